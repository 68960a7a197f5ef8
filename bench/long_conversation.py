"""A conversation longer than the window: what its turns cost once the window
is full, with ``context_policy compact`` (the compaction prepared in idle
time, what left the window recalled) against ``drop_oldest``, from one run.

A scripted conversation of 60 turns (a long message, then two short ones,
again and again) fills the bundled model's 8,192-token window about twice; its
first 20 turns each state a fact (a box's colour and its code word), and late
short turns ask for them. The user pauses ``--pause`` seconds between turns,
as people do (what the app has as idle time). Printed, for each policy:

- ``full_window_ttft_ratio``: median wall time to first token (from the send)
  of the turns after the window first filled / of the turns before (goal <= 1.5);
- ``full_window_ttft_max_ratio``: the slowest turn after / the median of like
  turns before (long with long, short with short; goal <= 3);
- ``full_window_prefill_ratio``: the most any turn after prefilled / its own
  new tokens (what the message adds to the ledger: its text, the passages it
  recalled and the template's tokens; <= 1.2);
- ``recall_at_3`` (compact): of the questions about early facts no longer in
  the model's view, the share whose passages brought back include the turn
  that stated the fact (>= 0.9);

and for the compacted session at the end of the compact run:

- ``compact_exact``: ``/compact``, ``/compact undo``, then a message: the reply
  token for token what a fork that was never compacted answers (1.0);
- ``compact_resume_ratio``: TTFT of a message to the compacted session reopened
  in a new process / the same message warm (<= 1.2).

The drop_oldest run stops ``--baseline-after`` turns after its window first
filled (each of those turns prefills nearly the whole window again).

    HF_HUB_OFFLINE=1 .venv/bin/python bench/long_conversation.py           # bundled model
    HF_HUB_OFFLINE=1 .venv/bin/python bench/long_conversation.py --quick   # a tiny model
    # what docs/cache.md reports, on a machine too busy for the full window:
    HF_HUB_OFFLINE=1 .venv/bin/python bench/long_conversation.py --window 4096 --turns 45 \
        --pause 20 --baseline-pause 2 --baseline-after 3
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))  # run alone too

from common import median, temporary_home, wall_ttft  # noqa: E402

from mlxchat.config import Settings  # noqa: E402
from mlxchat.engine.core import ChatEngine  # noqa: E402
from mlxchat.models import LoadedModel  # noqa: E402
from mlxchat.session.conversation import Conversation  # noqa: E402
from mlxchat.store import open_store  # noqa: E402

COLOURS = ("red", "blue", "green", "amber", "violet", "silver", "golden", "black", "white",
           "orange", "pink", "grey", "brown", "teal", "crimson", "ivory", "navy", "olive",
           "coral", "indigo")
WORDS = ("harbour", "lantern", "meadow", "quartz", "falcon", "orchard", "glacier", "compass",
         "violin", "saffron", "cobalt", "thistle", "pebble", "zephyr", "marble", "juniper",
         "tundra", "beacon", "walnut", "sparrow")
FILLER = ("the river the city the market the garden the bridge the station the library a "
          "morning an evening a letter a journey a recipe a question a story walked talked "
          "waited wondered built carried painted counted slowly quietly often later again "
          "because although while after before during near under beside through").split()


@dataclass
class Turn:
    text: str
    long: bool
    fact: int | None = None
    """The fact this turn states (its index), if any."""
    asks: int | None = None
    """The fact this turn asks about, if any."""


@dataclass
class Measured:
    ttft: list[float] = field(default_factory=list)
    prefilled: list[int] = field(default_factory=list)
    new: list[int] = field(default_factory=list)
    long: list[bool] = field(default_factory=list)
    filled_at: int | None = None
    """The first turn that overflowed the window (compacted or dropped)."""
    notes: list[str] = field(default_factory=list)
    recall_hits: list[bool] = field(default_factory=list)
    """Of the questions whose fact had left the model's view: was it brought back."""
    in_view: int = 0
    """Questions whose fact was still in the model's view (nothing to recall)."""


def script(turns: int, long_chars: int, facts: int, asks_from: int, seed: int = 7) -> list[Turn]:
    """Long, short, short, ...; the first ``facts`` turns each state one fact,
    short turns from ``asks_from`` on ask for them in turn."""
    rng = random.Random(seed)
    out: list[Turn] = []
    asked = 0
    for i in range(turns):
        long = i % 3 == 0
        text = ""
        if long:
            words: list[str] = []
            while len(" ".join(words)) < long_chars:
                words.append(rng.choice(FILLER))
            text = "Here are some notes, read them: " + " ".join(words) + ". "
        turn = Turn(text, long)
        if i < facts:
            turn.fact = i
            turn.text += (f"Please remember: the code word for the {COLOURS[i]} box is "
                          f"{WORDS[i]}.")
        elif not long and i >= asks_from and asked < facts:
            turn.asks = asked
            turn.text = f"What is the code word for the {COLOURS[asked]} box?"
            asked += 1
        elif not long:
            turn.text = rng.choice(("Thanks. One more word?", "Go on.", "And then?",
                                    "Say that more briefly."))
        out.append(turn)
    return out


def make(loaded: LoadedModel, db: Path, policy: str, args: argparse.Namespace) -> Conversation:
    settings = Settings(system_prompt="You are a helpful assistant.")
    gen = settings.generation
    gen.temperature, gen.max_tokens, gen.speculative = 0.0, args.max_tokens, "off"
    gen.context_policy, gen.context_window = policy, args.window
    return Conversation(settings=settings, store=open_store(db), engine=ChatEngine(loaded),
                        model_spec=args.spec)


def idle(conv: Conversation, pause: float) -> None:
    """The user's pause: the app's idle time (the compaction is prepared meanwhile)."""
    time.sleep(pause)


def run(conv: Conversation, turns: list[Turn], args: argparse.Namespace, *, pause: float,
        stop_after: int | None = None) -> Measured:
    m = Measured()
    stated: dict[int, int] = {}
    for i, turn in enumerate(turns):
        ledger = conv.ledger(conv.engine)
        previous = conv.messages[-1].token_ids if conv.messages else None
        gone = {g.id for g in conv.recall.gone()}
        ttft, done = wall_ttft(conv, turn.text)
        sent = next(m for m in reversed(conv.messages) if m.role == "user")
        # The message as sent (the passages it recalled included), template included.
        new = len(conv.engine.prompts.message_ids(
            sent.content, system=conv.session.context_system, previous=previous,
            options=ledger.options))
        s = done.stats
        m.ttft.append(ttft)
        m.prefilled.append(s.prefilled_tokens)
        m.new.append(new)
        m.long.append(turn.long)
        note = s.compaction or (f"{s.dropped_messages} dropped" if s.dropped_messages else "")
        m.notes.append(note)
        if m.filled_at is None and (s.compaction or s.dropped_messages):
            m.filled_at = i
        if turn.fact is not None:
            stated[turn.fact] = conv.messages[-2].id
        if turn.asks is not None and stated[turn.asks] in gone:  # in view: nothing to recall
            brought = {conv.recall.message_id(src) for src in conv.recall.last}
            m.recall_hits.append(stated[turn.asks] in brought)
        elif turn.asks is not None:
            m.in_view += 1
        print(f"  turn {i:2d} {'long ' if turn.long else 'short'} ttft {ttft:6.2f} s  "
              f"prefilled {s.prefilled_tokens:5d} / new {new:4d}  context {s.context_used:5d}"
              f"  {note}", flush=True)
        if stop_after is not None and m.filled_at is not None and i >= m.filled_at + stop_after:
            break
        idle(conv, pause)
    return m


def figures(m: Measured) -> dict[str, float]:
    if m.filled_at is None:
        return {}
    at = m.filled_at
    before = range(1, at)  # the first turn is a cold start
    after = range(at, len(m.ttft))
    out = {"full_window_ttft_ratio": median([m.ttft[i] for i in after])
           / median([m.ttft[i] for i in before])}
    worst = 0.0
    for i in after:
        like = [m.ttft[j] for j in before if m.long[j] == m.long[i]]
        worst = max(worst, m.ttft[i] / median(like))
    out["full_window_ttft_max_ratio"] = worst
    out["full_window_prefill_ratio"] = max(m.prefilled[i] / m.new[i] for i in after)
    if m.recall_hits:
        out["recall_at_3"] = sum(m.recall_hits) / len(m.recall_hits)
        out["recall_questions"] = len(m.recall_hits)
    if m.in_view:
        out["questions_in_view"] = m.in_view
    return out


def compact_exact(conv: Conversation, text: str) -> float:
    """/compact, /compact undo, then ``text``: the reply against a fork's."""
    source, _copy = conv.fork()
    reference = wall_ttft(conv, text)[1]
    conv.open_session(source.id)
    conv.compactor.compact()
    conv.compactor.undo()
    again = wall_ttft(conv, text)[1]
    return 1.0 if again.token_ids == reference.token_ids else 0.0


def resumed_ttft(db: Path, session_id: int, text: str, args: argparse.Namespace) -> dict:
    """The same message to the session, in a new process that reopens it."""
    cmd = [sys.executable, __file__, "--resume", str(db), str(session_id), text,
           "--window", str(args.window), "--max-tokens", str(args.max_tokens)]
    cmd += ["--quick"] if args.quick else []
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if done.returncode:
        raise SystemExit(done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def resume_child(args: argparse.Namespace) -> None:
    loaded = model(args)
    conv = make(loaded, Path(args.resume[0]), "compact", args)
    conv.open_session(int(args.resume[1]))
    conv.retrieval.on_thread(conv.retrieval.embedder)  # loaded once a process, as warm had it
    ttft, done = wall_ttft(conv, args.resume[2])
    print(json.dumps({"ttft": ttft, "prefilled": done.stats.prefilled_tokens,
                      "source": done.stats.cache_source}))
    conv.close(compact=False)


def model(args: argparse.Namespace) -> LoadedModel:
    if args.quick:
        from mlxchat.models import load_folder
        from mlxchat.models.testing.text import write_tiny_model

        home = Path(os.environ["MLXCHAT_HOME"])
        folder = home / "tiny-model"
        if not folder.exists():
            write_tiny_model(folder, context_window=4096)
        return load_folder(folder, name="tiny", spec="tiny")
    from mlxchat.models import load_model

    return load_model("smollm2-135m")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a tiny random model, a small window")
    p.add_argument("--turns", type=int)
    p.add_argument("--pause", type=float, help="seconds the user pauses between turns")
    p.add_argument("--window", type=int)
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--baseline-after", type=int, default=6,
                   help="turns drop_oldest runs after its window first filled")
    p.add_argument("--baseline-pause", type=float,
                   help="seconds between drop_oldest's turns (default: --pause; it has "
                   "nothing to prepare in them)")
    p.add_argument("--policies", nargs="+", choices=("compact", "drop_oldest"),
                   default=["compact", "drop_oldest"], help="the policies run, in order")
    p.add_argument("--resume", nargs=3, metavar=("DB", "SESSION", "TEXT"), help=argparse.SUPPRESS)
    args = p.parse_args()
    args.spec = "tiny" if args.quick else "smollm2-135m"
    args.window = args.window or (2048 if args.quick else 8192)
    if args.resume:
        return resume_child(args)
    args.turns = args.turns or (30 if args.quick else 60)
    args.pause = args.pause if args.pause is not None else (0.5 if args.quick else 8.0)
    long_chars = 150 if args.quick else 2400
    facts = 10 if args.quick else 20
    turns = script(args.turns, long_chars, facts, asks_from=args.turns * 2 // 3)
    with temporary_home("mlxchat-long-") as home:
        loaded = model(args)
        print(f"model {loaded.info.name}, window {args.window}, {args.turns} turns, pause "
              f"{args.pause} s (drop_oldest {args.baseline_pause or args.pause} s), replies up to {args.max_tokens} tokens; load "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
        results: dict[str, dict[str, float]] = {}
        for policy in args.policies:
            db = home / f"{policy}.db"
            conv = make(loaded, db, policy, args)
            print(f"context_policy {policy}:", flush=True)
            pause = args.pause if policy == "compact" or args.baseline_pause is None \
                else args.baseline_pause
            measured = run(conv, turns, args, pause=pause,
                           stop_after=None if policy == "compact" else args.baseline_after)
            results[policy] = figures(measured)
            if policy == "compact":
                probe = "In a few words, what were we talking about?"
                warm, _ = wall_ttft(conv, probe)
                conv.turns.undo()
                sid = conv.session.id
                conv.close(compact=False)
                resumed = resumed_ttft(db, sid, probe, args)
                results[policy]["compact_resume_ratio"] = resumed["ttft"] / warm
                print(f"  resumed in a new process: ttft {resumed['ttft']:.2f} s "
                      f"({resumed['source']}, prefilled {resumed['prefilled']}) / warm "
                      f"{warm:.2f} s", flush=True)
                conv = make(loaded, db, policy, args)
                conv.open_session(sid)
                results[policy]["compact_exact"] = compact_exact(conv, "And one more thing?")
            conv.close(compact=False)
            print(f"  {policy}: " + ", ".join(f"{k} {v:.3f}" for k, v in results[policy].items()),
                  flush=True)
        print(f"load after {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        results = {p: results.get(p, {}) for p in ("compact", "drop_oldest")}
        names = sorted({k for r in results.values() for k in r})
        print(f"{'figure':28s} {'compact':>10s} {'drop_oldest':>12s}")
        for name in names:
            cells = [f"{results[p][name]:.3f}" if name in results[p] else "-"
                     for p in ("compact", "drop_oldest")]
            print(f"{name:28s} {cells[0]:>10s} {cells[1]:>12s}")


if __name__ == "__main__":
    main()
