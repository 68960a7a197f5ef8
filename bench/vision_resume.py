"""What a resumed follow-up does that a warm one does not, counted per family.

The follow-up after an image turn, three ways on the family's small random
model (bench/vision_families.py): ``warm`` (the engine that ran the image
turn), ``resumed`` (a fresh model object and engine, warmed up, the branch
restored from its KV segment) and ``resumed_after_a_turn`` (the same, but a
throwaway turn first: every first-call cost of a fresh engine paid before).
Beside each TTFT (median and minimum of ``--repeats``: the minimum is what
a loaded machine's noise hides least) the counters: vision tower calls,
pages faulted in during the turn (minor, major), the tokens whose mRoPE
positions were placed (a restore replays the restored ones) and the seconds
that took, and the restore's own seconds (outside the TTFT).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common import temporary_home  # noqa: E402
from vision import TURNS, Ledger, images, run  # noqa: E402
from vision_families import FAMILIES  # noqa: E402

from mlxchat.chat import ImageRef  # noqa: E402
from mlxchat.engine.core import ChatEngine  # noqa: E402
from mlxchat.engine.disk.segments import SegmentRef  # noqa: E402
from mlxchat.engine.prompt.fit import FittedPrompt  # noqa: E402
from mlxchat.models import load_folder  # noqa: E402
from mlxchat.models.vision import model as vision_model

PLACED = {"tokens": 0, "seconds": 0.0}
_extend = vision_model.Positions._extend


def _counted(self: Any, row: Any, known: Any) -> Any:
    start = time.perf_counter()
    out = _extend(self, row, known)
    PLACED["tokens"] += len(row)
    PLACED["seconds"] += time.perf_counter() - start
    return out


vision_model.Positions._extend = _counted  # counts, computes the same


def counted_turn(engine: ChatEngine, prompt: FittedPrompt) -> dict[str, float]:
    PLACED.update(tokens=0, seconds=0.0)
    before = resource.getrusage(resource.RUSAGE_SELF)
    done = run(engine, prompt)
    after = resource.getrusage(resource.RUSAGE_SELF)
    return {"ttft": done.stats.ttft_s, "minflt": after.ru_minflt - before.ru_minflt,
            "majflt": after.ru_majflt - before.ru_majflt, "placed": PLACED["tokens"],
            "placed_s": PLACED["seconds"]}


def one_run(folder: Path, refs: list[ImageRef], work: Path) -> dict[str, dict[str, float]]:
    loaded = load_folder(folder, available=None)
    engine = ChatEngine(loaded)
    engine.warm_up()
    ledger = Ledger()
    first = ledger.prompt(engine, TURNS[0][0], (refs[0],))
    ledger.keep(first, run(engine, first))
    info = engine.save_segment(work / "t0.safetensors", 0)
    seg = SegmentRef(work / "t0.safetensors", 0, info.end, info.checksum,
                     engine.cached_tokens[:info.end])
    followup = ledger.prompt(engine, TURNS[1][0], ())
    rows = {"warm": counted_turn(engine, followup)}
    engine.close()
    for name in ("resumed", "resumed_after_a_turn"):
        fresh = load_folder(folder, available=None)
        engine = ChatEngine(fresh)
        engine.warm_up()
        if name == "resumed_after_a_turn":
            run(engine, followup)
            engine.drop_cache()
        calls = fresh.model.vision_calls
        start = time.perf_counter()
        assert engine.load_segments([seg], conversation=followup.messages[:2]).ok
        restore = time.perf_counter() - start
        rows[name] = {**counted_turn(engine, followup), "restore": restore,
                      "tower": fresh.model.vision_calls - calls}
        engine.close()
    rows["warm"]["tower"] = 0  # asserted by bench/vision.py's resumed run too
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--family", action="append", choices=sorted(FAMILIES))
    args = parser.parse_args()
    for family in (FAMILIES[f] for f in args.family or sorted(FAMILIES)):
        with temporary_home("mlxchat-bench-resume-home-"):
            work = Path(tempfile.mkdtemp(prefix="mlxchat-bench-resume-"))
            folder = family.write(work / "model", family.template())
            refs = images(work, family.side)
            load = os.getloadavg()[0]
            runs = []
            for n in range(args.repeats):
                (work / f"run{n}").mkdir()
                runs.append(one_run(folder, refs, work / f"run{n}"))
        print(f"{family.name}: {args.repeats} runs; load average before {load:.2f}, after "
              f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
        for name in runs[0]:
            got = {k: [r[name][k] for r in runs] for k in runs[0][name]}
            restore = (f", restore {statistics.median(got['restore']) * 1000:.1f} ms"
                       if "restore" in got else "")
            print(f"  {name}: TTFT median {statistics.median(got['ttft']) * 1000:.1f} ms, "
                  f"min {min(got['ttft']) * 1000:.1f} ms; tower calls {max(got['tower'])}; "
                  f"pages faulted in {statistics.median(got['minflt']):.0f} minor, "
                  f"{max(got['majflt'])} major; positions placed {max(got['placed'])} "
                  f"tokens in {max(got['placed_s']) * 1000:.2f} ms{restore}")
        ratio = (statistics.median(r["resumed"]["ttft"] for r in runs)
                 / statistics.median(r["warm"]["ttft"] for r in runs))
        low = min(r["resumed"]["ttft"] for r in runs) / min(r["warm"]["ttft"] for r in runs)
        print(f"vision_resume_ratio_{family.name}={ratio:.3f}")
        print(f"vision_resume_ratio_min_{family.name}={low:.3f}")


if __name__ == "__main__":
    main()
