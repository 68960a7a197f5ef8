"""KV segments of a model split over ranks: each rank writes its own shard.

Rank 0 writes its shard where a one-rank engine writes the whole segment (the
store's row points at it, with its checksum); rank r of N writes
``NAME.rank{r}of{N}.safetensors`` into its own snapshots folder (on its own
host). Rank 0 then writes a manifest next to its file, ``NAME.ranks.json``:
the layout and every rank's file, checksum and bytes. No schema change.

Each rank's file carries its layout in the model fingerprint
(``models.sharding.split_fingerprint``), so a session reopened on another
layout (one rank, other hosts) rejects the segment and recomputes from the
token ledger, never reading another layout's shard. A restore runs on every
rank; the ranks then agree on the segments all of them could use.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from mlx_lm.models.cache import trim_prompt_cache

from mlxchat import paths
from mlxchat.engine.disk import branch_restore, segments
from mlxchat.engine.disk.checks import failure_words
from mlxchat.engine.disk.segments import SegmentRef
from mlxchat.engine.distributed.channel import NOT_ACROSS_RANKS, RankLost
from mlxchat.engine.events import CacheLoad
from mlxchat.engine.kv import prompt_cache
from mlxchat.engine.kv.layers import row
from mlxchat.files import write_private_text

if TYPE_CHECKING:
    from mlxchat.engine.distributed.channel import Channel
    from mlxchat.engine.distributed.rank_worker import RankWorker

MANIFEST = "mlxchat-rank-manifest-1"


def rank_file(name: str, rank: int, size: int) -> str:
    """Rank ``rank``'s file of the segment rank 0 writes as ``name``."""
    stem, dot, suffix = name.rpartition(".")
    return f"{stem}.rank{rank}of{size}{dot}{suffix}" if dot else f"{name}.rank{rank}of{size}"


def manifest_path(path: Path) -> Path:
    return path.with_name(path.name + ".ranks.json")


def with_rank_files(files: Iterable[Path | str]) -> list[Path]:
    """``files`` (segment files being deleted) and, for a split model's, the
    other ranks' files on this machine and rank 0's manifest: rank files first,
    the manifest last, so what a failed delete leaves is still named."""
    out: list[Path] = []
    for path in map(Path, files):
        manifest = Manifest.read(path)
        size = manifest.ranks if isinstance(manifest, Manifest) else 0
        out += [path.with_name(rank_file(path.name, r, size)) for r in range(1, size)]
        out += [path] + ([manifest_path(path)] if manifest_path(path).exists() else [])
    return out


@dataclass(frozen=True)
class Manifest:
    """Which file each rank wrote for one segment, and its checksum."""

    layout: str
    ranks: int
    files: list[dict[str, Any]]

    def write(self, path: Path) -> None:
        write_private_text(manifest_path(path), json.dumps(
            {"format": MANIFEST, "layout": self.layout, "ranks": self.ranks,
             "files": self.files}))

    @classmethod
    def read(cls, path: Path) -> "Manifest | str":
        """The manifest next to ``path``, or why there is none to use."""
        try:
            data = json.loads(manifest_path(path).read_text())
            if data.get("format") != MANIFEST:
                return "not a rank manifest"
            return cls(str(data["layout"]), int(data["ranks"]), list(data["files"]))
        except FileNotFoundError:
            return "written by one rank, not split across ranks"
        except (OSError, ValueError, KeyError, TypeError):
            return "its rank manifest is damaged"


def _origin(loaded: Any) -> dict[str, str]:
    info = loaded.info
    return dict(fingerprint=info.fingerprint, template_hash=info.chat_template_hash)


# -- writing ------------------------------------------------------------------------


def save_own(loaded: Any, layers: list[Any], path: Path, start: int, end: int,
             tokens: Sequence[int]) -> dict[str, Any]:
    """Write this rank's shard of positions ``[start, end)``; what it wrote, or
    the error in words (every rank must reach the gather that follows)."""
    try:
        paths.ensure_private_dir(path.parent)
        info = segments.write(path, layers, start, end, tokens, **_origin(loaded))
    except (OSError, RuntimeError, ValueError) as exc:
        return {"error": failure_words(exc)}  # as one rank's save warning says it
    return {"name": Path(info.path).name, "checksum": info.checksum, "bytes": info.bytes}


def _save_job(worker: "RankWorker", job: dict[str, Any]) -> None:
    channel = worker.channel
    name = rank_file(job["name"], channel.rank, channel.size)
    path = paths.kv_dir() / name
    channel.gather(save_own(worker.loaded, worker.live.layers, path, int(job["start"]),
                            int(job["end"]), job["tokens"]))


# -- restoring ----------------------------------------------------------------------


@dataclass(frozen=True)
class Agreed:
    """What every rank keeps of a restore: the first ``used`` segments."""

    used: int
    reason: str | None


def agree(outcomes: list[dict[str, Any]], trimmable: bool) -> Agreed:
    """The segments every rank could use (the same decision on each rank)."""
    used = min(int(o["used"]) for o in outcomes)
    reason = next((f"rank {r}: {o['reason']}" if r else o["reason"]
                   for r, o in enumerate(outcomes) if o["reason"]), None)
    if used and not trimmable and len({int(o["used"]) for o in outcomes}) > 1:
        used = 0  # a rank restored more than the others and cannot give it back
    return Agreed(used, reason)


def restore_own(loaded: Any, channel: "Channel", refs: Sequence[SegmentRef]
                ) -> tuple[list[Any] | None, Agreed, list[int]]:
    """Restore this rank's refs, then agree with the other ranks; the layers cut
    to what all of them hold (None when nothing), the agreement, and the ends
    of the segments kept."""
    got = branch_restore.restore(loaded.model, refs, **_origin(loaded))
    layers = got.layers
    trims = layers is not None and prompt_cache.trimmable(layers)
    outcomes = channel.gather({"used": got.used, "reason": got.reason, "trimmable": trims})
    agreed = agree(outcomes, all(o["trimmable"] for o in outcomes))
    if not agreed.used or layers is None:
        return None, agreed, []
    if agreed.used < got.used:
        trim_prompt_cache(layers, got.end - refs[agreed.used - 1].end)
    return layers, agreed, [ref.end for ref in refs[:agreed.used]]


def _restore_job(worker: "RankWorker", job: dict[str, Any]) -> None:
    channel = worker.channel
    folder = paths.kv_dir()
    refs = [SegmentRef(folder / r["name"], int(r["start"]), int(r["end"]), r["checksum"],
                       list(r["tokens"])) for r in job["refs"][channel.rank]]
    layers, _, _ = restore_own(worker.loaded, channel, refs)
    if layers is None:
        worker.live.reset()
    else:
        worker.live.layers = layers


class RankDisk:
    """Rank 0's side of the segments of a split model: its own shard, the
    other ranks' through jobs, the manifest. Engine thread only."""

    def __init__(self, loaded: Any, live: Any, channel: "Channel", layout: str):
        self._loaded, self._live, self._channel, self._layout = loaded, live, channel, layout

    def save_segment(self, path: Path, start: int,
                     end: int | None = None) -> segments.SegmentInfo:
        """Every rank writes positions ``[start, end)`` of its shard (None: to the
        cache's end); then the manifest. OSError (naming the rank, or the lost
        one) when any rank could not write: said as the segment's warning, the
        reply is stored."""
        if self._channel.lost is not None:
            raise OSError(str(self._channel.lost))
        try:
            return self._save(path, start, end)
        except RankLost as exc:
            raise OSError(str(exc)) from None

    def _save(self, path: Path, start: int, end: int | None) -> segments.SegmentInfo:
        live, channel = self._live, self._channel
        end = len(live.tokens) if end is None else end
        if not 0 <= start < end <= len(live.tokens):
            raise ValueError("nothing new in the KV cache to save")
        if end < len(live.tokens) and not all(row(c).sliceable(c) for c in live.layers):
            raise ValueError("only layers that keep every position can be saved short of "
                             "their end")
        tokens = live.tokens[start:end]
        channel.send("save", name=path.name, start=start, end=end, tokens=tokens)
        files = channel.gather(save_own(self._loaded, live.layers, path, start, end, tokens))
        failed = [f"rank {r}: {f['error']}" for r, f in enumerate(files) if "error" in f]
        if failed:
            raise OSError("; ".join(failed))
        path = path.with_name(files[0]["name"])  # a fresh one when the name was taken
        Manifest(self._layout, channel.size, files).write(path)
        return segments.SegmentInfo(path=str(path), start=start, end=end, bytes=files[0]["bytes"],
                                    checksum=files[0]["checksum"],
                                    kv_bits=prompt_cache.bits(live.layers))

    def _plan(self, refs: Sequence[SegmentRef]) -> tuple[list[list[dict]], int, str | None]:
        """Each rank's refs, from the manifests, up to the first segment that has
        none of this layout; how many segments that is, and why it stopped."""
        size = self._channel.size
        per_rank: list[list[dict]] = [[] for _ in range(size)]
        for i, ref in enumerate(refs):
            found = Manifest.read(ref.path)
            if isinstance(found, str) or found.layout != self._layout or found.ranks != size:
                why = found if isinstance(found, str) else (
                    f"made on another layout ({found.layout}; running {self._layout})")
                return per_rank, i, f"segment {i + 1} of {len(refs)}: {why}"
            for r, entry in enumerate(found.files):
                per_rank[r].append({"name": entry["name"], "start": ref.start, "end": ref.end,
                                    "checksum": entry["checksum"], "tokens": ref.token_ids})
        return per_rank, len(refs), None

    def load_snapshot(self, path: Any, *, expected_checksum: str | None = None,
                      conversation: Sequence[Any] = ()) -> CacheLoad:
        """Refused: a whole-cache snapshot holds one rank's cache."""
        reason = f"a whole-cache snapshot holds one rank's cache; {NOT_ACROSS_RANKS}"
        self._live.reset(reason)
        return CacheLoad(ok=False, reason=reason)

    def load_segments(self, refs: Sequence[SegmentRef], *,
                      conversation: Sequence[Any] = ()) -> CacheLoad:
        """Make consecutive segments the live cache on every rank; a segment some
        rank cannot use stops the restore there on all of them."""
        per_rank, usable, reason = self._plan(refs)
        refs = list(refs[:usable])
        layers = None
        if refs:
            self._channel.send("restore", refs=per_rank)
            layers, agreed, ends = restore_own(self._loaded, self._channel, refs)
            reason = agreed.reason or reason
        if layers is None:
            self._live.reset(f"snapshot rejected: {reason}", report=True)
            return CacheLoad(ok=False, reason=reason)
        tokens = [t for ref in refs[:agreed.used] for t in ref.token_ids]
        self._live.adopt(layers, tokens, conversation if reason is None else (), "snapshot")
        return CacheLoad(ok=True, tokens=ends[-1], reason=reason)


WORKER_JOBS = {"save": _save_job, "restore": _restore_job}
"""The segment jobs a rank other than 0 does (``RankWorker``'s extra jobs)."""
