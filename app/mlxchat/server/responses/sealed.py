"""A reasoning item's ``encrypted_content``: the reasoning as text of ours,
sent to the client and carried back unchanged (Codex asks for it with
``include: ["reasoning.encrypted_content"]`` and sends it back with each
request). It is the reasoning, compressed, with an HMAC under the database's
own key: one that comes back is checked as ours before it is read, and
anything longer than ``MAX_SEALED_CHARS`` is refused unread."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import zlib

PREFIX = "mlxchat-reasoning-1."
MAX_SEALED_CHARS = 256 * 1024
"""The longest encrypted_content taken back (a 32k-token reasoning seals to
well under it)."""
MAX_OPENED_BYTES = 4 * 1024 * 1024
"""What one may open to; ours never does (checked only after the HMAC)."""
_TAG_BYTES = 16


class SealTooLarge(ValueError):
    """An encrypted_content over ``MAX_SEALED_CHARS``."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _tag(key: bytes, body: str) -> str:
    return _b64(hmac.new(key, (PREFIX + body).encode(), hashlib.sha256).digest()[:_TAG_BYTES])


def seal(key: bytes, reasoning: str) -> str:
    body = _b64(zlib.compress(reasoning.encode("utf-8", "surrogatepass"), 6))
    return f"{PREFIX}{body}.{_tag(key, body)}"


def unseal(key: bytes, sealed: str) -> str | None:
    """The reasoning ``sealed`` holds, or None when it is not ours (another
    server's, or changed); SealTooLarge when it is too long to be read."""
    if len(sealed) > MAX_SEALED_CHARS:
        raise SealTooLarge(f"An encrypted_content may be at most {MAX_SEALED_CHARS:,} "
                           f"characters; got {len(sealed):,}.")
    if not sealed.startswith(PREFIX):
        return None
    body, _, tag = sealed[len(PREFIX):].rpartition(".")
    if not body or not hmac.compare_digest(tag, _tag(key, body)):
        return None
    try:
        opener = zlib.decompressobj()
        data = opener.decompress(_unb64(body), MAX_OPENED_BYTES)
        if opener.unconsumed_tail:
            return None
        return data.decode("utf-8", "surrogatepass")
    except (binascii.Error, ValueError, zlib.error):
        return None
