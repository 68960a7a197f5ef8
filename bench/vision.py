"""Images in the token ledger, timed per vision family.

Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Gemma 3 and SmolVLM, each on a small random
model (mlx-vlm's classes, random weights, the family's published template and
processor settings; 256 image tokens an image, 320 in SmolVLM's five tiles;
bench/vision_families.py), each figure printed as ``NAME_FAMILY=X``
(``vision_followup_ratio_gemma3=0.07``):

- ``vision_followup_ratio``: TTFT of a text follow-up after an image turn,
  on the warm cache / the same prompt recomputed from nothing (goal <= 0.1).
- ``vision_second_image_ratio``: TTFT of turn 5, which adds a second image
  after four turns (the first with an image), warm / recomputed (goal <= 0.35);
  warm as a user meets it: the image attached and encoded (``/image``) while
  the question is typed, then sent. ``vision_second_image_ratio_at_send``: the
  same with the tower run after the send (before early encoding), same run.
- ``vision_resume_ratio``: TTFT of the follow-up after a restart (a fresh
  model object and engine, the branch restored from its KV segments, the
  vision tower not run) / the warm follow-up's (goal <= 1.1).

And mlx-vlm's own ``stream_generate`` with its ``PromptCacheState`` on the
same model and turns (bench/vision_mlx_vlm.py), side by side:
``vs_mlx_vlm_followup`` and ``vs_mlx_vlm_second_image``, ours warm / theirs.

Each TTFT is the median of ``--repeats`` runs (5) of the same turn, the
machine's load average printed beside them (before and after), each engine
warmed up first (``ChatEngine.warm_up``: MLX's kernels and the template, as
the server does before listening); every run checks that the warm, resumed
and recomputed replies agree. ``--family`` (repeatable) picks families.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common import temporary_home  # noqa: E402
from vision_families import FAMILIES, BenchFamily  # noqa: E402
from vision_mlx_vlm import conversation_ttfts  # noqa: E402

from mlxchat.chat import ImageRef, Message  # noqa: E402
from mlxchat.engine.core import ChatEngine  # noqa: E402
from mlxchat.engine.disk.segments import SegmentRef  # noqa: E402
from mlxchat.engine.events import TurnDone  # noqa: E402
from mlxchat.engine.prompt.fit import FittedPrompt  # noqa: E402
from mlxchat.generation import GenerationSettings  # noqa: E402
from mlxchat.models import load_folder  # noqa: E402
from mlxchat.models.vision.images import file_digest  # noqa: E402
from mlxchat.paths import kv_dir  # noqa: E402

ONE = GenerationSettings(temperature=0.0, max_tokens=1)
TURNS = [("Describe this picture in detail, please.", 0), ("What are the main colours?", None),
         ("Is there any text in it?", None), ("What would you title it?", None),
         ("Now compare it with this second picture.", 1)]


def images(folder: Path, side: int) -> list[ImageRef]:
    """Two random ``side`` x ``side`` pictures."""
    import numpy as np
    from PIL import Image

    refs = []
    for n in range(2):
        path = folder / f"picture{n}.png"
        rng = np.random.default_rng(n)
        Image.fromarray(rng.integers(0, 255, (side, side, 3), dtype=np.uint8)).save(path)
        refs.append(ImageRef(file_digest(path), str(path), path.name, side, side))
    return refs


class Ledger:
    """The turns' prompts as the session builds them (the token ledger)."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.messages: list[Message] = []
        self.previous: list[int] | None = None

    def prompt(self, engine: ChatEngine, text: str, shown: tuple[ImageRef, ...]
               ) -> FittedPrompt:
        added = engine.prompts.message_ids(text, system=None, previous=self.previous,
                                           images=shown)
        return FittedPrompt(self.tokens + added, [*self.messages,
                                                  Message("user", text, images=shown)], 0,
                            ledger=True)

    def keep(self, prompt: FittedPrompt, done: TurnDone) -> None:
        self.tokens = prompt.tokens + done.token_ids
        self.messages = [*prompt.messages, Message("assistant", done.reply,
                                                   token_ids=done.token_ids)]
        self.previous = done.token_ids


def run(engine: ChatEngine, prompt: FittedPrompt) -> TurnDone:
    return next(e for e in engine.turn(prompt, ONE) if isinstance(e, TurnDone))


def minor_faults() -> int:
    """Pages this process faulted in so far (a restore's or a first call's show here)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def warm_turns(folder: Path, refs: list[ImageRef], work: Path | None, *, early: bool
               ) -> tuple[list[FittedPrompt], list[TurnDone], list[SegmentRef], dict]:
    """The five turns on one engine; ``early``: each image attached and its
    encoding waited for (as while the user types the question) before its
    turn is sent. Segments written under ``work`` (None: none). No image
    features kept on disk from an earlier pass (Gemma 3's)."""
    shutil.rmtree(kv_dir() / "features", ignore_errors=True)
    loaded = load_folder(folder, available=None)
    engine = ChatEngine(loaded)
    engine.warm_up()
    ledger, segs, prompts, dones = Ledger(), [], [], []
    counts: dict[str, list] = {"encode_s": [], "tower_in_turn": [], "faults": []}
    for i, (text, image) in enumerate(TURNS):
        shown = () if image is None else (refs[image],)
        encoded = engine.images.hold(shown, ONE).result() if early and shown else None
        counts["encode_s"].append(0.0 if encoded is None else encoded.seconds)
        prompt = ledger.prompt(engine, text, shown)
        calls, faults = loaded.model.vision_calls, minor_faults()
        done = run(engine, prompt)
        counts["faults"].append(minor_faults() - faults)
        counts["tower_in_turn"].append(loaded.model.vision_calls - calls)
        prompts.append(prompt)
        dones.append(done)
        ledger.keep(prompt, done)
        if work is not None:
            start = segs[-1].end if segs else 0
            info = engine.save_segment(work / f"t{i}.safetensors", start)
            segs.append(SegmentRef(work / f"t{i}.safetensors", start, info.end, info.checksum,
                                   engine.cached_tokens[start:info.end]))
    engine.close()
    return prompts, dones, segs, counts


def one_run(folder: Path, refs: list[ImageRef], work: Path) -> dict[str, float]:
    """The five turns warm, images encoded as attached (segments written), and
    again with each image's tower run at send; then the follow-up and turn 5
    each recomputed cold, and the follow-up resumed from the segments."""
    prompts, warm, segs, counts = warm_turns(folder, refs, work, early=True)
    _, at_send, _, sent_counts = warm_turns(folder, refs, None, early=False)
    assert [d.token_ids for d in at_send] == [d.token_ids for d in warm], "early encoding differs"
    figures = {"warm_followup": warm[1].stats.ttft_s, "warm_second": warm[4].stats.ttft_s,
               "warm_second_at_send": at_send[4].stats.ttft_s,
               "encode_before_turn": counts["encode_s"][4],
               "tower_in_second": counts["tower_in_turn"][4],
               "tower_in_second_at_send": sent_counts["tower_in_turn"][4],
               "faults_warm_followup": counts["faults"][1]}
    for name, turn in (("cold_followup", 1), ("cold_second", 4)):
        # Recomputed from nothing: no KV, and no image features kept on disk.
        shutil.rmtree(kv_dir() / "features", ignore_errors=True)
        cold = load_folder(folder, available=None)
        engine = ChatEngine(cold)
        engine.warm_up()  # first-call costs (kernels, the template) out of every TTFT
        done = run(engine, prompts[turn])
        engine.close()
        assert done.token_ids == warm[turn].token_ids, "a recomputed turn differs"
        figures[name] = done.stats.ttft_s
    fresh = load_folder(folder, available=None)
    engine = ChatEngine(fresh)
    engine.warm_up()
    assert engine.load_segments(segs[:1], conversation=prompts[1].messages[:2]).ok
    faults = minor_faults()
    done = run(engine, prompts[1])
    figures["faults_resumed_followup"] = minor_faults() - faults
    engine.close()
    assert done.token_ids == warm[1].token_ids and fresh.model.vision_calls == 0
    figures["resumed_followup"] = done.stats.ttft_s
    figures["image_tokens"] = fresh.model.know(refs[:1])[0].tokens
    figures["followup_prompt"] = warm[1].stats.prompt_tokens
    figures["followup_prefilled"] = warm[1].stats.prefilled_tokens
    figures["second_prompt"] = warm[4].stats.prompt_tokens
    figures["second_prefilled"] = warm[4].stats.prefilled_tokens
    return figures


def bench_family(family: BenchFamily, args: argparse.Namespace) -> dict[str, float]:
    """Run and print one family's figures; returns them (ratios suffixed)."""
    with temporary_home("mlxchat-bench-vision-home-"):
        work = Path(tempfile.mkdtemp(prefix="mlxchat-bench-vision-"))
        template = family.template()
        folder = family.write(work / "model", template)
        refs = images(work, family.side)
        load = os.getloadavg()
        runs = []
        for n in range(args.repeats):
            (work / f"run{n}").mkdir()
            runs.append(one_run(folder, refs, work / f"run{n}"))
        theirs = None if args.no_mlx_vlm else conversation_ttfts(
            family, folder, template, [r.path for r in refs], TURNS)
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    out = {
        "vision_followup_ratio": med["warm_followup"] / med["cold_followup"],
        "vision_second_image_ratio": med["warm_second"] / med["cold_second"],
        "vision_second_image_ratio_at_send": med["warm_second_at_send"] / med["cold_second"],
        "vision_resume_ratio": med["resumed_followup"] / med["warm_followup"],
    }
    print(f"{family.name}: {family.describe}, {int(med['image_tokens'])} tokens an image, "
          f"median of {args.repeats} runs; load average before {load[0]:.2f}, after "
          f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print(f"follow-up after the image: {int(med['followup_prefilled'])} of "
          f"{int(med['followup_prompt'])} prompt tokens prefilled; TTFT warm "
          f"{med['warm_followup'] * 1000:.1f} ms, recomputed {med['cold_followup'] * 1000:.1f} "
          f"ms, resumed from segments {med['resumed_followup'] * 1000:.1f} ms (pages faulted "
          f"in: warm {int(med['faults_warm_followup'])}, resumed "
          f"{int(med['faults_resumed_followup'])}; tower calls resumed: 0)")
    print(f"turn 5 adding a second image: {int(med['second_prefilled'])} of "
          f"{int(med['second_prompt'])} prompt tokens prefilled; TTFT warm "
          f"{med['warm_second'] * 1000:.1f} ms with the image encoded as attached "
          f"({med['encode_before_turn'] * 1000:.1f} ms before the turn, "
          f"{int(med['tower_in_second'])} tower calls in it), "
          f"{med['warm_second_at_send'] * 1000:.1f} ms encoded at send "
          f"({int(med['tower_in_second_at_send'])} tower calls in it); recomputed "
          f"{med['cold_second'] * 1000:.1f} ms")
    if theirs is not None:
        # The same prompts, but for a template that writes a past reply
        # otherwise than its generation prompt began it (SmolVLM's "Assistant:"
        # then "Assistant: " + reply): the ledger keeps the tokens the model
        # saw, mlx-vlm renders the history again, at most a token a reply more.
        for turn, ours in ((1, med["followup_prompt"]), (4, med["second_prompt"])):
            assert 0 <= theirs[turn][1] - ours <= turn, ("another prompt", turn, theirs, med)
        print(f"mlx-vlm stream_generate + PromptCacheState, same turns ({theirs[1][1]} and "
              f"{theirs[4][1]} prompt tokens): TTFT follow-up {theirs[1][0] * 1000:.1f} ms, "
              f"turn 5 {theirs[4][0] * 1000:.1f} ms (turn 1 {theirs[0][0] * 1000:.1f} ms)")
        out["vs_mlx_vlm_followup"] = med["warm_followup"] / theirs[1][0]
        out["vs_mlx_vlm_second_image"] = med["warm_second"] / theirs[4][0]
    named = {f"{name}_{family.name}": value for name, value in out.items()}
    for name, value in named.items():
        print(f"{name}={value:.3f}")
    return {**named, **{f"{k}_{family.name}": v for k, v in med.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--family", action="append", choices=sorted(FAMILIES),
                        help="time this family (repeatable; default: every one)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    parser.add_argument("--no-mlx-vlm", action="store_true",
                        help="leave out mlx-vlm's own multi-turn path")
    args = parser.parse_args()
    figures: dict[str, float] = {}
    for name in args.family or sorted(FAMILIES):
        figures.update(bench_family(FAMILIES[name], args))
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
