"""A 3-step tool loop on the bundled model against a local stdio MCP server
(bench/tool_server.py), consent allowed in advance (an 'everywhere' grant):

- ``tool_step_prefill_ratio``: tokens each step prefilled / tokens the step
  added (its result, as the template renders it); 1.00 is the ledger at work.
  Beside it, what a client that re-renders the conversation would prefill.
- ``tool_call_overhead_ms``: from the reply's last token (the end token that
  closes the call) to the engine being asked to prefill the result, less the
  call's round trip to the server (the tool's own time and the protocol,
  printed beside it): the reply's commit and KV segment, reading the call,
  the grant, cutting and storing the result, rendering what it adds.
- ``tool_resume_prefill_ratio``: the same, for the step after a restart in the
  middle of the loop (a new engine with a cold cache: the branch comes back
  from its KV segments on disk; the weights stay loaded).

The bundled SmolLM2 speaks ChatML but its template renders no tools and it
never chose to call one: the bench gives it Qwen3's published template (also
ChatML) and forces each reply to a call, as the tests do; the model still
runs every token.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common import median, temporary_home  # noqa: E402

from mlxchat.config import Settings  # noqa: E402
from mlxchat.engine.events import TurnDone  # noqa: E402
from mlxchat.models import LoadedModel, load_folder  # noqa: E402
from mlxchat.session.root import open_conversation  # noqa: E402
from mlxchat.session.tool_loop import Consent  # noqa: E402
from mlxchat.store import open_store  # noqa: E402
from mlxchat.tools.config import ToolsConfig, server_from  # noqa: E402
from mlxchat.tools.host import ToolHost  # noqa: E402

from tests.scripted import Scripted  # noqa: E402
from tests.tools.servers import qwen_call  # noqa: E402

TEMPLATE = ROOT / "tests" / "families" / "real_templates" / "qwen3.jinja"
HARBOURS = ("Lerwick", "Stromness", "Kirkwall")


def call(name: str) -> str:
    return qwen_call("harbour", name=name)


def with_tool_template(loaded: LoadedModel, folder: Path) -> LoadedModel:
    """The model's folder with Qwen3's template (weights linked, not copied)."""
    source = Path(loaded.info.path)
    folder.mkdir()
    for item in source.iterdir():
        (folder / item.name).symlink_to(item)
    config = json.loads((source / "tokenizer_config.json").read_text())
    config["chat_template"] = TEMPLATE.read_text()
    (folder / "tokenizer_config.json").unlink()
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return load_folder(folder, name="bench", spec="bench")


class Timed:
    """When the engine is asked for a turn (its first step starts the prefill)."""

    def __init__(self, engine) -> None:
        self.asked: float | None = None
        real = engine.turn

        def turn(*args, **kwargs):
            self.asked = time.perf_counter()
            yield from real(*args, **kwargs)
        engine.turn = turn


def stream(events) -> tuple[TurnDone, float, float]:
    """Consume a turn: its end, when its last token (the end token that
    closes a call) was sampled, and when the turn was over (the reply
    committed and its KV segment written)."""
    done, last = None, time.perf_counter()
    for event in events:
        if isinstance(event, TurnDone):
            done, last = event, time.perf_counter()
    assert done is not None
    return done, last, time.perf_counter()


def open_conv(loaded, db: Path, host: ToolHost):
    settings = Settings(model="bench")
    settings.generation = replace(settings.generation, temperature=0.0, max_tokens=80,
                                  speculative="off", tools="b")
    opened = open_conversation(settings, store_factory=lambda: open_store(db),
                               load_model=lambda spec, progress=None: loaded, tool_host=host,
                               session="tools", lookup="exact", new_title="tools")
    conv = opened.conversation
    conv.tools.ready()
    return conv, Timed(conv.engine)


def step(conv, timed: Timed, turn: tuple, script: Scripted, nxt: str) -> dict:
    """One step after ``turn`` (a reply that called the tool): the call runs and
    the turn that reads its result streams. Its figures, and that turn."""
    done, last, over = turn
    script.reply(nxt)  # steers the turn after this step; set before the clock matters
    result = conv.tool_loop.step(done, consent=lambda request: Consent("deny"))
    after = stream(result.turn)
    trip = result.results[0].tool_run.duration_s * 1000
    return {"prefilled": after[0].stats.prefilled_tokens,
            "added": len(result.results[0].token_ids), "whole": after[0].stats.prompt_tokens,
            "trip": trip, "kept": (over - last) * 1000,
            "loop": (timed.asked - over) * 1000 - trip,
            "overhead": (timed.asked - last) * 1000 - trip, "turn": after}


def measure(loaded: LoadedModel, *, repeats: int = 2) -> dict[str, float]:
    with temporary_home("mlxchat-bench-tools-") as folder:
        model = with_tool_template(loaded, folder / "model")
        entry = {"command": sys.executable, "args": [str(ROOT / "bench" / "tool_server.py")]}
        host = ToolHost(ToolsConfig(folder / "mcp.json", {"b": server_from("b", entry, {})}))
        script = Scripted(model.tokenizer, _Patch())
        ratios, overheads, trips, resumed = [], [], [], []
        try:
            for k in range(repeats):
                conv, timed = open_conv(model, folder / f"s{k}.db", host)
                conv.tools.grant(conv.tools.named()["harbour"], everywhere=True)
                script.reply(call(HARBOURS[0]))
                turn = stream(conv.turns.send("Tell me about three harbours."))
                for i, name in enumerate(HARBOURS[1:] + ("",)):
                    if i == 2:  # a restart in the middle of the loop: the third step resumes
                        conv.shutdown()
                        conv, timed = open_conv(model, folder / f"s{k}.db", host)
                    nxt = call(name) if name else "All three are quiet harbours."
                    got = step(conv, timed, turn, script, nxt)
                    turn = got["turn"]
                    (resumed if i == 2 else ratios).append(got["prefilled"] / got["added"])
                    if i < 2:  # the resumed step's clock holds the restart
                        overheads.append(got["overhead"])
                        trips.append(got["trip"])
                    print(f"run {k + 1} step {i + 1}{' (resumed)' if i == 2 else ''}: "
                          f"prefilled {got['prefilled']} of the {got['added']} tokens the "
                          f"result added (a client re-rendering the history: {got['whole']});"
                          f" cache {turn[0].stats.cache_source}" + ("" if i == 2 else
                          f"; last token -> prefill {got['overhead'] + got['trip']:.1f} ms = "
                          f"reply kept {got['kept']:.1f} + call {got['trip']:.1f} + "
                          f"loop {got['loop']:.1f}"))
                conv.shutdown()
        finally:
            host.close()
        print(f"tools: {len(HARBOURS)}-step loop x {repeats}; call round trip median "
              f"{median(trips):.1f} ms (the server's tool and the protocol)")
    return {"tool_step_prefill_ratio": max(ratios),
            "tool_call_overhead_ms": median(overheads),
            "tool_resume_prefill_ratio": max(resumed)}


class _Patch:
    """What ``Scripted`` needs of pytest's monkeypatch, for a script."""

    def setattr(self, target, name, value) -> None:
        setattr(target, name, value)


if __name__ == "__main__":
    from common import pick_model

    quick = "--quick" in sys.argv
    figures = measure(pick_model("smollm2-135m"), repeats=1 if quick else 2)
    print("ratios: " + " ".join(f"{k}={v:.3f}" for k, v in figures.items())
          + "  (goals: <= 1.05, <= 50 ms, <= 1.05)")
