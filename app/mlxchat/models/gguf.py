"""Read a GGUF file's header and check that we can import it.

``mx.load`` reads the tensors themselves; this reader exists so that a bad
file fails with one line that says why (not a GGUF, truncated, a K-quant, an
architecture we do not map) before any array is touched.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from mlxchat.models.errors import ModelError

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# ggml type id -> (name, elements per block, bytes per block)
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 36),
    10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50), 20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136), 24: ("I8", 1, 1), 25: ("I16", 1, 2),
    26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8), 29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17),
}
# What mx.load turns into MLX arrays without loss (checked by the tests).
SUPPORTED_TYPES = ("F32", "F16", "Q4_0", "Q4_1", "Q8_0")
QUANTIZED_BITS = {"Q4_0": 4, "Q4_1": 4, "Q8_0": 8}
SUPPORTED_HINT = "use a Q4_0, Q4_1, Q8_0, F16 or F32 GGUF"
REQUIRED_KEYS = ("llama.block_count", "llama.embedding_length", "llama.feed_forward_length",
                 "llama.attention.head_count", "tokenizer.ggml.tokens",
                 "tokenizer.ggml.eos_token_id")

# GGUF metadata value types -> struct format (arrays and strings handled apart)
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
            10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    """Row-major (numpy/MLX) order: GGUF lists dimensions innermost first."""
    type_id: int
    offset: int
    """Relative to the start of the data section."""

    @property
    def type_name(self) -> str:
        return GGML_TYPES.get(self.type_id, (f"type {self.type_id}", 0, 0))[0]

    @property
    def nbytes(self) -> int:
        _, block, size = GGML_TYPES[self.type_id]
        count = 1
        for d in self.shape:
            count *= d
        return count // block * size


@dataclass
class GGUFHeader:
    path: Path
    version: int
    metadata: dict[str, Any]
    tensors: list[TensorInfo] = field(default_factory=list)
    alignment: int = DEFAULT_ALIGNMENT
    data_offset: int = 0
    file_size: int = 0

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", "unknown"))

    def tensor(self, name: str) -> TensorInfo | None:
        return next((t for t in self.tensors if t.name == name), None)


class _Reader:
    def __init__(self, fh: BinaryIO, path: Path, size: int):
        self.fh, self.path, self.size = fh, path, size

    def read(self, n: int) -> bytes:
        data = self.fh.read(n)
        if len(data) < n:
            raise ModelError(f"truncated GGUF: {self.path} ends inside its header "
                             f"({self.size} bytes)")
        return data

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.read(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        n = self.unpack("<Q")
        if n > self.size:
            raise ModelError(f"truncated GGUF: {self.path} has a string of {n} bytes "
                             f"in a {self.size}-byte file")
        return self.read(n).decode("utf-8", errors="replace")

    def value(self, vtype: int) -> Any:
        if vtype in _SCALARS:
            return self.unpack(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            item_type, count = self.unpack("<I"), self.unpack("<Q")
            if count > self.size:
                raise ModelError(f"truncated GGUF: {self.path} has an array of {count} "
                                 f"items in a {self.size}-byte file")
            if item_type in _SCALARS:
                fmt = _SCALARS[item_type]
                raw = self.read(struct.calcsize(fmt) * count)
                return list(struct.unpack(f"<{count}{fmt[1]}", raw))
            return [self.value(item_type) for _ in range(count)]
        raise ModelError(f"{self.path}: unknown GGUF metadata type {vtype} (corrupt file?)")


def read_header(path: Path) -> GGUFHeader:
    """Parse magic, version, metadata and tensor infos; raise ModelError on a bad file."""
    path = Path(path)
    try:
        size = path.stat().st_size
        fh = path.open("rb")
    except OSError as exc:
        raise ModelError(f"cannot read {path}: {exc.strerror or exc}") from None
    with fh:
        r = _Reader(fh, path, size)
        if fh.read(4) != MAGIC:
            raise ModelError(f"not a GGUF file: {path}")
        version = r.unpack("<I")
        if version not in (2, 3):
            raise ModelError(f"GGUF version {version} is not supported (only 2 and 3): {path}")
        n_tensors, n_kv = r.unpack("<Q"), r.unpack("<Q")
        if n_tensors > size or n_kv > size:
            raise ModelError(f"truncated GGUF: {path} claims {n_tensors} tensors and "
                             f"{n_kv} metadata keys in {size} bytes")
        metadata: dict[str, Any] = {}
        for _ in range(n_kv):
            key = r.string()
            metadata[key] = r.value(r.unpack("<I"))
        tensors = []
        for _ in range(n_tensors):
            name = r.string()
            dims = [r.unpack("<Q") for _ in range(r.unpack("<I"))]
            type_id, offset = r.unpack("<I"), r.unpack("<Q")
            tensors.append(TensorInfo(name, tuple(reversed(dims)), type_id, offset))
        alignment = int(metadata.get("general.alignment", DEFAULT_ALIGNMENT)) or 1
        end = fh.tell()
        data_offset = (end + alignment - 1) // alignment * alignment
    return GGUFHeader(path, version, metadata, tensors, alignment, data_offset, size)


def _unsupported_type(t: TensorInfo) -> str:
    name = t.type_name
    if name.endswith("_K"):
        why = "K-quants are not supported"
    elif name.startswith("IQ") or name.startswith("TQ"):
        why = "i-quants are not supported"
    else:
        why = f"{name} tensors are not supported"
    return f"tensor {t.name} is {name}: {why}; {SUPPORTED_HINT}"


def check_importable(header: GGUFHeader) -> None:
    """Raise ModelError (one line) unless the importer can convert this file exactly."""
    arch = header.architecture
    if arch != "llama":
        raise ModelError(f"architecture '{arch}' is not supported (only llama): {header.path}")
    if int(header.metadata.get("llama.expert_count", 0) or 0) > 0:
        raise ModelError("mixture-of-experts llama GGUFs are not supported: "
                         f"{header.path}")
    tok_model = header.metadata.get("tokenizer.ggml.model")
    if tok_model != "gpt2":
        raise ModelError(f"tokenizer '{tok_model}' is not supported (only byte-level "
                         f"BPE, 'gpt2'): {header.path}")
    pre = header.metadata.get("tokenizer.ggml.pre", "default")
    if pre not in ("default", "gpt2", "smollm"):
        raise ModelError(f"pre-tokenizer '{pre}' is not supported (only default, gpt2, "
                         f"smollm): {header.path}")
    if header.tensor("rope_freqs.weight") is not None:
        raise ModelError("Llama 3 rope scaling (rope_freqs) is not supported: "
                         f"{header.path}")
    for t in header.tensors:
        if t.type_id not in GGML_TYPES or t.type_name not in SUPPORTED_TYPES:
            raise ModelError(_unsupported_type(t))
        _, block, _ = GGML_TYPES[t.type_id]
        if t.shape and t.shape[-1] % block:
            raise ModelError(f"tensor {t.name} has {t.shape[-1]} columns, not a multiple "
                             f"of its {t.type_name} block ({block}): corrupt file?")
    need = max((header.data_offset + t.offset + t.nbytes for t in header.tensors),
               default=header.data_offset)
    if header.file_size < need:
        raise ModelError(f"truncated GGUF: {header.path} has {header.file_size} bytes, "
                         f"its tensors need {need}")
    missing = [k for k in REQUIRED_KEYS if k not in header.metadata]
    if missing:
        raise ModelError(f"{header.path} lacks metadata {', '.join(missing)}: "
                         "not a complete llama GGUF")
