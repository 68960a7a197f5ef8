"""Where an allowed image URL may be fetched from: public addresses only unless
the user said otherwise (``serve --allow-private-image-urls``).

A request could otherwise make the server read what only it can reach:
``http://127.0.0.1:…`` of another local service, the cloud metadata address
(169.254.169.254), a router on the LAN. The check sits where connections are
made, not on the URL: every connect (the first one and each redirect's) resolves
the host once, refuses it when any of its addresses is not public, and connects
to the address it checked, so a name that resolves to a public address for the
check and a private one for the connect (DNS rebinding) gets nowhere. TLS still
verifies the certificate against the URL's host name.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Iterable

import anyio
import httpcore2
import httpx2
from httpcore2._backends.anyio import AnyIOBackend


class PrivateAddress(httpcore2.ConnectError):
    """A host that resolves to an address the fetch may not reach."""


def not_public(address: str) -> bool:
    """True for loopback, private, link-local, multicast, reserved and unspecified
    addresses (an IPv4-mapped IPv6 address is judged as its IPv4 one)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return not ip.is_global or ip.is_multicast


class PublicOnlyBackend(AnyIOBackend):
    """anyio's network backend, connecting only to public addresses."""

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: Iterable[tuple] | None = None
                          ) -> httpcore2.AsyncNetworkStream:
        try:
            infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise httpcore2.ConnectError(f"{host} could not be resolved ({exc})") from None
        addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
        if not addresses:
            raise httpcore2.ConnectError(f"{host} could not be resolved")
        private = [a for a in addresses if not_public(a)]
        if private:
            raise PrivateAddress(
                f"{host} is a private address ({private[0]}), and image URLs are fetched "
                "only from public ones (serve --allow-private-image-urls allows them)")
        return await super().connect_tcp(addresses[0], port, timeout=timeout,
                                          local_address=local_address,
                                          socket_options=socket_options)


class GuardedTransport(httpx2.AsyncHTTPTransport):
    """httpx2's transport over a connection pool that connects only to public
    addresses (httpx2 does not pass a network backend through)."""

    def __init__(self) -> None:
        super().__init__(trust_env=False)
        self._pool = httpcore2.AsyncConnectionPool(
            ssl_context=httpx2.create_ssl_context(trust_env=False),
            network_backend=PublicOnlyBackend())


def transport(*, private: bool) -> httpx2.AsyncHTTPTransport:
    """The transport image fetches go through: with ``private``, any address."""
    return httpx2.AsyncHTTPTransport(trust_env=False) if private else GuardedTransport()
