"""Every field of an ``mlx.launch`` hostfile checked before anything starts,
each problem one line naming the field (``hosts[1].ips[0]: 5 is not an IP
address``), so that a bad hostfile never launches a rank, never leaves one
running and never ends in a traceback from MLX's ring.

Addresses a rank listens on must be this machine's when the rank runs here
(rank 0, and hosts reached as 127.0.0.1 or localhost); any other host's must
have a route from here.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import socket
from pathlib import Path
from typing import Any

from mlxchat.errors import UserError

LOCAL_NAMES = ("127.0.0.1", "localhost")
ENV_KEY_CHARS = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")


class HostfileError(UserError):
    """The hostfile cannot be read or used with the chosen backend."""


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _env(where: str, item: Any) -> None:
    if not isinstance(item, str) or "=" not in item:
        raise HostfileError(f"{where}: {_shown(item)} is not a \"KEY=VALUE\" string")
    key = item.split("=", 1)[0]
    if not key or not set(key) <= ENV_KEY_CHARS or key[0].isdigit():
        raise HostfileError(f"{where}: {key!r} is not an environment variable name "
                            "(letters, digits and _)")


def _ip(where: str, value: Any) -> str:
    if not isinstance(value, str):
        raise HostfileError(f"{where}: {_shown(value)} is not an IP address (a string such "
                            "as \"10.0.0.2\")")
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise HostfileError(f"{where}: {value!r} is not an IP address") from None
    return value


def _host(where: str, host: Any) -> None:
    if not isinstance(host, dict):
        raise HostfileError(f"{where}: must be an object with \"ssh\" and \"ips\"")
    ssh = host.get("ssh")
    if not isinstance(ssh, str) or not ssh.strip():
        raise HostfileError(f"{where}.ssh: must be the host's name or address; got "
                            f"{_shown(ssh)}")
    for key in ("ips", "rdma"):
        if not isinstance(host.get(key, []), list):
            raise HostfileError(f"{where}.{key}: must be a list; got {_shown(host[key])}")
    for i, ip in enumerate(host.get("ips", [])):
        _ip(f"{where}.ips[{i}]", ip)
    for i, device in enumerate(host.get("rdma", [])):
        if device is not None and not isinstance(device, str):
            raise HostfileError(f"{where}.rdma[{i}]: must be a device name or null; got "
                                f"{_shown(device)}")
    unknown = sorted(set(host) - {"ssh", "ips", "rdma"})
    if unknown:
        raise HostfileError(f"{where}.{unknown[0]}: not a field of a host (ssh, ips, rdma)")


def check_fields(data: Any) -> None:
    """Every field's type and form; HostfileError naming the first bad one."""
    if isinstance(data, list):
        data = {"hosts": data}
    if not isinstance(data, dict):
        raise HostfileError("must be a list of hosts or an object with \"hosts\"")
    unknown = sorted(set(data) - {"backend", "envs", "hosts"})
    if unknown:
        raise HostfileError(f"{unknown[0]}: not a field of a hostfile (backend, envs, hosts)")
    backend = data.get("backend", "")
    if not isinstance(backend, str):
        raise HostfileError(f"backend: must be a name such as \"ring\"; got {_shown(backend)}")
    envs = data.get("envs", [])
    if not isinstance(envs, list):
        raise HostfileError(f"envs: must be a list of \"KEY=VALUE\" strings; got {_shown(envs)}")
    for i, item in enumerate(envs):
        _env(f"envs[{i}]", item)
    hosts = data.get("hosts")
    if not isinstance(hosts, list):
        raise HostfileError(f"hosts: must be a list of hosts; got {_shown(hosts)}")
    for i, host in enumerate(hosts):
        _host(f"hosts[{i}]", host)


def _is_mine(ip: str) -> bool:
    """Whether this machine has the address (a rank here can listen on it)."""
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        try:
            s.bind((ip, 0))
        except OSError:
            return False
    return True


def _has_route(ip: str) -> bool:
    """Whether a packet to the address has a way out of this machine (no packet is sent)."""
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        try:
            s.connect((ip, 9))
        except OSError as exc:
            return exc.errno not in (errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EADDRNOTAVAIL)
    return True


def check_addresses(hosts: Any, source: str | None = None) -> None:
    """Addresses a rank on this machine listens on are this machine's; the
    others can be reached from here (checked just before a launch: ``hosts``
    are MLX's, ``source`` the hostfile's path for the message)."""
    try:
        _check_addresses(hosts)
    except HostfileError as exc:
        raise HostfileError(f"{source}: {exc}" if source else str(exc)) from None


def _check_addresses(hosts: Any) -> None:
    for i, host in enumerate(hosts):
        here = i == 0 or host.ssh_hostname in LOCAL_NAMES
        for j, ip in enumerate(host.ips):
            where = f"hosts[{i}].ips[{j}]"
            if here and not _is_mine(ip):
                who = "rank 0 (this process)" if i == 0 else \
                    f"rank {i} (run here: ssh {host.ssh_hostname})"
                raise HostfileError(f"{where}: {ip} is not an address of this machine, and "
                                    f"{who} must listen on it")
            if not here and not _has_route(ip):
                raise HostfileError(f"{where}: {ip} cannot be reached from this machine "
                                    "(no route to it)")


def check_hostfile(path: Path) -> Any:
    """The hostfile's JSON, every field checked; HostfileError ('PATH: FIELD:
    what is wrong') otherwise."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise HostfileError(f"{path}: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise HostfileError(f"{path} is not valid JSON: {exc}") from None
    try:
        check_fields(data)
    except HostfileError as exc:
        raise HostfileError(f"{path}: {exc}") from None
    return data
