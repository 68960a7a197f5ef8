"""Model aliases: the built-in catalog (package data) plus the user's own.

Both files are TOML tables ``[models."alias"]`` (or one inline table a line
under ``[models]``) with a ``source`` (a model spec: Hugging Face repo, folder,
.gguf file or ``bundled:...``) and optional ``context``, ``size_mb``, ``bits``,
``kv_kb``, ``licence``, ``draft`` (a small sibling for speculative decoding),
``description``, ``rope_scaling`` (a table passed
to the model's config, e.g. YaRN with ``context`` the stretched window) and
``sampling`` (default temperature, top_p, min_p, repetition_penalty measured for a
model that has no generation_config, with a ``note``). Stdlib only.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from importlib import resources

from mlxchat import paths
from mlxchat.files import write_private_text
from mlxchat.models.errors import ModelError
from mlxchat.models.sampling import ModelSampling, from_mapping

_ALIAS = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


@dataclass(frozen=True)
class CatalogEntry:
    alias: str
    source: str
    """A model spec that is not itself an alias."""
    context_window: int | None = None
    size_bytes: int | None = None
    """Approximate download size; None when unknown."""
    bits: int | None = None
    description: str = ""
    user: bool = False
    """Registered by the user (``mlxchat import --name``) rather than built in."""
    rope_scaling: dict | None = None
    """Passed to the model's config when loading (e.g. YaRN to stretch the window)."""
    kv_bytes_per_token: int | None = None
    """KV cache bytes per token at 16 bits (full-attention layers), from the config."""
    licence: str = ""
    draft: str | None = None
    """A small sibling with the same tokenizer, for speculative decoding
    (``/set draft auto``); an alias or a spec."""
    sampling: ModelSampling = ModelSampling()
    """Default sampling measured for this model (it has no generation_config)."""
    images: bool = False
    """A vision-language model: it sees images (``/image``)."""


def _entries(text: str, *, user: bool, origin: str) -> list[CatalogEntry]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ModelError(f"{origin}: not valid TOML ({exc})") from None
    entries = []
    for alias, item in data.get("models", {}).items():
        if not isinstance(item, dict) or not isinstance(item.get("source"), str):
            raise ModelError(f"{origin}: model '{alias}' has no source")
        size_mb = item.get("size_mb")
        entries.append(CatalogEntry(
            alias=alias, source=item["source"], context_window=item.get("context"),
            size_bytes=int(size_mb * 1_000_000) if size_mb else None, bits=item.get("bits"),
            description=item.get("description", ""), user=user,
            kv_bytes_per_token=int(item["kv_kb"] * 1024) if item.get("kv_kb") else None,
            licence=item.get("licence", ""), images=item.get("images") is True,
            draft=item["draft"] if isinstance(item.get("draft"), str) else None,
            sampling=from_mapping(item.get("sampling"), "the catalog, "
                                  + str(item.get("sampling", {}).get("note", "measured"))
                                  if isinstance(item.get("sampling"), dict) else ""),
            rope_scaling=item["rope_scaling"] if isinstance(item.get("rope_scaling"), dict)
            else None))
    return entries


def builtin_entries() -> list[CatalogEntry]:
    text = resources.files("mlxchat.models").joinpath("catalog.toml").read_text("utf-8")
    return _entries(text, user=False, origin="built-in catalog")


def user_entries() -> list[CatalogEntry]:
    path = paths.user_catalog_file()
    if not path.is_file():
        return []
    return _entries(path.read_text("utf-8"), user=True, origin=str(path))


def list_entries() -> list[CatalogEntry]:
    """Built-in aliases first, then the user's, each in file order."""
    return builtin_entries() + user_entries()


def lookup(alias: str) -> CatalogEntry | None:
    return next((e for e in list_entries() if e.alias == alias), None)


def draft_for(spec: str) -> str | None:
    """The catalog's draft pairing for a model given by alias or source."""
    entry = next((e for e in list_entries() if spec in (e.alias, e.source)), None)
    return entry.draft if entry is not None else None


def _toml_string(value: str) -> str:
    # A JSON string is a valid TOML basic string (same escapes).
    return json.dumps(value, ensure_ascii=False)


def _render(entries: list[CatalogEntry]) -> str:
    lines = ["# Model aliases added with `mlxchat import --name`; edit freely.", ""]
    for e in entries:
        lines.append(f"[models.{_toml_string(e.alias)}]")
        lines.append(f"source = {_toml_string(e.source)}")
        if e.context_window:
            lines.append(f"context = {int(e.context_window)}")
        if e.size_bytes:
            lines.append(f"size_mb = {round(e.size_bytes / 1_000_000, 1)}")
        if e.bits:
            lines.append(f"bits = {int(e.bits)}")
        if e.description:
            lines.append(f"description = {_toml_string(e.description)}")
        if e.rope_scaling:
            # JSON strings, numbers and booleans are TOML values too.
            pairs = ", ".join(f"{_toml_string(k)} = {json.dumps(v)}"
                              for k, v in e.rope_scaling.items())
            lines.append(f"rope_scaling = {{ {pairs} }}")
        lines.append("")
    return "\n".join(lines)


def add_user_alias(alias: str, source: str, *, context_window: int | None = None,
                   size_bytes: int | None = None, bits: int | None = None,
                   description: str = "") -> CatalogEntry:
    """Register (or replace) a user alias; built-in aliases cannot be shadowed."""
    if not _ALIAS.fullmatch(alias):
        raise ModelError(f"bad model name '{alias}': use letters, digits, '.', '_' or '-' "
                         "(no '/', at most 64 characters)")
    if any(e.alias == alias for e in builtin_entries()):
        raise ModelError(f"'{alias}' is a built-in model name; choose another")
    entry = CatalogEntry(alias=alias, source=source, context_window=context_window,
                         size_bytes=size_bytes, bits=bits, description=description, user=True)
    entries = [e for e in user_entries() if e.alias != alias] + [entry]
    path = paths.user_catalog_file()
    paths.ensure_private_dir(path.parent)
    write_private_text(path, _render(entries))
    return entry


def remove_user_alias(alias: str) -> bool:
    """Forget a user alias; False when there was none."""
    entries = user_entries()
    kept = [e for e in entries if e.alias != alias]
    if len(kept) == len(entries):
        return False
    write_private_text(paths.user_catalog_file(), _render(kept))
    return True
