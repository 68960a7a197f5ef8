"""Text for `mlxchat import` (what each tensor type became) and `mlxchat models --scan`."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path


def _table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def import_report(folder: Path) -> str:
    """Per GGUF tensor type: how many, what it became, bits per weight; then the notes."""
    try:
        meta = json.loads((Path(folder) / "mlxchat-import.json").read_text())
    except (OSError, ValueError):
        return "(no import report in this folder)"
    rows = [("TYPE", "TENSORS", "BECAME", "BITS/WEIGHT")]
    for name, row in sorted(meta.get("tensor_types", {}).items()):
        if isinstance(row, dict):
            rows.append((name, str(row["tensors"]), row["became"], f"{row['bits_per_weight']:.2f}"))
    lines = [_table(rows)] if len(rows) > 1 else []
    params = meta.get("parameters") or {}
    if params.get("total"):
        lines.append(f"parameters: {params['total']:,} total, {params['active']:,} active per "
                     "token" + (" (experts routed)" if params["active"] < params["total"] else ""))
    lines += [f"note: {n}" for n in meta.get("notes", [])]
    return "\n".join(lines)


def scan_table(as_json: bool = False) -> str:
    from mlxchat.chat import human_bytes
    from mlxchat.models.scan import scan

    found = scan()
    if as_json:
        return json.dumps([asdict(f) for f in found], indent=2)
    if not found:
        return "no GGUF models found in Ollama's or LM Studio's folders"
    rows = [("STORE", "IMPORT WITH", "SIZE", "QUANT", "IMPORTABLE")]
    for f in found:
        rows.append((f.store, f.spec, human_bytes(f.size_bytes) if f.size_bytes else "-",
                     f.quantization, "yes" if f.importable else f"no: {f.why}"))
    return _table(rows)
