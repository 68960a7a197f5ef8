"""The projected features of images, kept on disk beside the KV segments.

An image's features (what its span's tokens embed as) depend on its bytes,
the processor's settings (both in its key) and the model's weights: they are
kept under ``kv_dir()/features/<model fingerprint>/`` one file per image key,
so a prompt that must compute an image's span again (an edit before it, a
session whose KV was dropped, a new process) runs the language model over the
span but not the vision tower. The folder is bounded: past ``max_bytes`` the
least recently used files go. A file that cannot be read is ignored (the
tower runs again) and removed.
"""

from __future__ import annotations

import os
from pathlib import Path

import mlx.core as mx

from mlxchat.paths import ensure_private_dir, kv_dir

MAX_BYTES = 256 << 20
"""The folder's bound: about 100 Gemma 3 27B images (256 x 5,376 x 2 bytes each)."""


class FeatureStore:
    """Features by image key, for one model (its fingerprint's folder)."""

    def __init__(self, fingerprint: str, *, root: Path | None = None,
                 max_bytes: int = MAX_BYTES):
        self.fingerprint = fingerprint
        self.root = root
        """``kv_dir()/features`` when None, found at each use (the home may change)."""
        self.max_bytes = max_bytes

    @property
    def folder(self) -> Path:
        return (self.root or kv_dir() / "features") / self.fingerprint

    def _file(self, key: int) -> Path:
        return self.folder / f"img{-key}.safetensors"

    def get(self, key: int) -> tuple[mx.array, ...] | None:
        """What ``put`` kept for the image: its features, then any further
        outputs (Qwen3-VL's DeepStack levels), in order."""
        path = self._file(key)
        try:
            held = mx.load(str(path))
            feats = (held["features"], *(held[f"level{i}"] for i in range(1, len(held))))
            os.utime(path)  # recently used: pruned last
            return feats
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, RuntimeError):
            path.unlink(missing_ok=True)
            return None

    def put(self, key: int, feats: tuple[mx.array, ...]) -> None:
        """Write (temp file, then rename) and prune; a full disk is not an error."""
        path = self._file(key)
        try:
            ensure_private_dir(self.folder)
            tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.safetensors")
            mx.save_safetensors(str(tmp), {"features": feats[0], **{
                f"level{i}": level for i, level in enumerate(feats[1:], 1)}})
            os.chmod(tmp, 0o600)  # what an image shows is private
            os.replace(tmp, path)
            self.prune()
        except OSError:
            return

    def prune(self) -> None:
        """Remove the least recently used files past the bound."""
        files = []
        folder = self.folder
        for f in folder.glob("img*.safetensors"):
            try:
                st = f.stat()
            except FileNotFoundError:
                continue
            files.append((st.st_mtime_ns, st.st_size, f))
        total = sum(size for _, size, _ in files)
        for _, size, f in sorted(files, key=lambda x: x[0]):
            if total <= self.max_bytes:
                break
            f.unlink(missing_ok=True)
            total -= size
