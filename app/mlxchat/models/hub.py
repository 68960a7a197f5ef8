"""Hugging Face Hub access: the local cache first, the network only when allowed."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Callable

from mlxchat.models.errors import ModelError

Progress = Callable[[str, int, int], None]

REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
# What mlx-lm fetches for a model (weights, config, tokenizer, template).
ALLOW_PATTERNS = ["*.json", "model*.safetensors", "*.py", "tokenizer.model", "*.tiktoken",
                  "tiktoken.model", "*.txt", "*.jsonl", "*.jinja"]


def is_repo_id(spec: str) -> bool:
    return bool(REPO_ID.fullmatch(spec)) and ".." not in spec


def offline() -> bool:
    """Read at call time: huggingface_hub only reads HF_HUB_OFFLINE when imported."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.strip().lower() in ("1", "true", "yes", "on")


def local_snapshot(repo: str) -> Path | None:
    """The cached snapshot folder of ``repo``, or None when it is not (fully) cached."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        folder = Path(snapshot_download(repo, local_files_only=True,
                                        allow_patterns=ALLOW_PATTERNS))
    except (LocalEntryNotFoundError, ValueError, OSError):
        return None
    return folder if (folder / "config.json").is_file() else None


def folder_size(folder: Path) -> int:
    """Bytes of the files in ``folder`` (the HF cache links to blobs: follow them)."""
    total = 0
    for f in folder.rglob("*"):
        try:
            if f.is_file():
                total += f.stat().st_size
        except OSError:
            pass
    return total


def _progress_tqdm(progress: Progress):
    """A silent tqdm class that forwards snapshot_download's byte counts."""
    from huggingface_hub.utils import tqdm as hf_tqdm

    class ForwardingTqdm(hf_tqdm):
        def __init__(self, *args, **kwargs):
            self._bytes = kwargs.get("unit") == "B" and "transfer" not in str(
                kwargs.get("name", ""))
            self._done = kwargs.get("initial", 0) or 0
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)

        def update(self, n=1):
            self._done += n or 0
            if self._bytes and self.total:
                progress("download", int(self._done), int(self.total))
            return super().update(n)

    return ForwardingTqdm


def snapshot(repo: str, *, progress: Progress | None = None) -> Path:
    """A local folder with ``repo``: the cache if it has it, else a download if allowed."""
    local = local_snapshot(repo)
    if local is not None:
        return local
    if offline():
        raise ModelError(f"model '{repo}' is not in the local Hugging Face cache and "
                         "HF_HUB_OFFLINE is set; unset it to download the model")
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    kwargs = {"tqdm_class": _progress_tqdm(progress)} if progress else {}
    try:
        folder = Path(snapshot_download(repo, allow_patterns=ALLOW_PATTERNS, **kwargs))
    except GatedRepoError:
        raise ModelError(f"model '{repo}' is gated on Hugging Face: accept its license "
                         "there and log in with `hf auth login`") from None
    except RepositoryNotFoundError:
        raise ModelError(f"model '{repo}' was not found on Hugging Face "
                         "(or it is private)") from None
    except Exception as exc:  # httpx/OS/hub errors alike: one line, no traceback
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise ModelError(f"cannot download model '{repo}' from Hugging Face: {reason}") \
            from None
    if not (folder / "config.json").is_file():
        raise ModelError(f"model '{repo}' has no config.json: not an MLX/transformers "
                         "checkpoint")
    return folder
