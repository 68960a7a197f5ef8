"""How an index run reports itself: the progress line while it runs and the
figures when it ends, in the words every surface (the TUI, the CLI) shows.

A rate is shown only once it rests on enough work (``RATE_MIN_CHUNKS`` embedded
over ``RATE_MIN_S``): five small files used to say '0 chunks/s', then
'1 chunks/s', figures rounded from too little to mean anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mlxchat.docs.walk import Skipped
from mlxchat.units import fmt_seconds, plural

RATE_MIN_CHUNKS = 8
RATE_MIN_S = 1.0


def measured_rate(chunks: int, seconds: float) -> float | None:
    """Chunks a second, or None while too little was done to say."""
    if chunks < RATE_MIN_CHUNKS or seconds < RATE_MIN_S:
        return None
    return chunks / seconds


def rate_words(rate: float) -> str:
    """'3.4 chunks/s', '1,250 chunks/s'."""
    return f"{rate:.1f} chunks/s" if rate < 100 else f"{rate:,.0f} chunks/s"


@dataclass(frozen=True)
class IndexProgress:
    files_done: int
    """Files read and chunked so far."""
    files_total: int
    chunks: int
    """Chunks found so far (embedded or waiting for it)."""
    chunks_per_s: float | None
    """Chunks embedded a second since the run began; None until measured."""
    current: str
    part: float | None = None
    """How far into ``current`` a file written in batches is (0-1)."""
    chunks_embedded: int = 0

    def work(self) -> tuple[int, int]:
        """(done, total) of the run's work for a progress bar: chunks embedded
        of those expected (the files not read yet counted at the chunks a file
        has had so far), or files read while there are no chunks to go on."""
        if not self.chunks or not self.files_done:
            return self.files_done, self.files_total
        expected = round(self.chunks * self.files_total / self.files_done)
        return self.chunks_embedded, max(expected, self.chunks_embedded, 1)

    def words(self) -> str:
        """'12/40 files · 96/230 chunks · 4.5 chunks/s' (files read, chunks
        embedded of those found), as every progress line says it, short enough
        for an 80-column status line (and '· big.txt 40%' within a file
        written in batches)."""
        rate = f" · {rate_words(self.chunks_per_s)}" if self.chunks_per_s is not None else ""
        within = f" · {Path(self.current).name} {self.part:.0%}" if self.part is not None else ""
        return (f"{self.files_done:,}/{self.files_total:,} files · "
                f"{self.chunks_embedded:,}/{self.chunks:,} chunks{rate}{within}")


@dataclass
class IndexReport:
    collection: str
    files_indexed: int = 0
    files_unchanged: int = 0
    files_removed: int = 0
    chunks_added: int = 0
    skipped: list[Skipped] = field(default_factory=list)
    files_with_replacements: int = 0
    """Files that were not valid UTF-8 (bad bytes replaced)."""
    cancelled: bool = False
    seconds: float = 0.0

    @property
    def chunks_per_s(self) -> float:
        return self.chunks_added / self.seconds if self.seconds > 0 else 0.0

    def speed_words(self) -> str:
        """'10 chunks in 0.80 s', with the rate where it means something."""
        rate = measured_rate(self.chunks_added, self.seconds)
        return (f"{plural(self.chunks_added, 'chunk')} in {fmt_seconds(self.seconds)}"
                + (f", {rate_words(rate)}" if rate is not None else ""))
