"""Progress of a model import or download, drawn as one line on a terminal."""

from __future__ import annotations

import sys
from typing import Callable


def progress_printer(stream=None) -> Callable[[str, int, int], None]:
    """A progress callback that draws one updating line on a terminal's stderr;
    elsewhere (a pipe, a log) one line as each stage starts."""
    from mlxchat.models import STAGE_LABELS

    stream = stream or sys.stderr
    tty = stream.isatty()
    last: dict[str, int] = {}

    def report(stage: str, done: int, total: int) -> None:
        pct = int(100 * done / total) if total else 0
        if not tty:
            if stage not in last and stage != "load":  # a load is not worth a line
                last[stage] = pct
                stream.write(f"{STAGE_LABELS.get(stage, stage)} model…\n")
                stream.flush()
            return
        if last.get(stage) == pct:
            return
        last[stage] = pct
        stream.write(f"\r{STAGE_LABELS.get(stage, stage)} model… {pct:3d}%")
        if done >= total:
            stream.write("\r\033[K")
        stream.flush()
    return report
