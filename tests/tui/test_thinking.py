"""The app on a model whose generation prompt opens reasoning (an R1 distill):
the reasoning streams into the folded block, ctrl+t unfolds the last one, and
copying the reply takes only its answer."""

from __future__ import annotations

from mlxchat.config import Settings
from mlxchat.generation import GenerationSettings
from mlxchat.models import load_folder
from mlxchat.tui.widgets import AssistantMessage

from .app_support import GB, ready, settle, tiny_app
from tests.families.builders import FAMILIES, write_family_model


async def test_reasoning_is_folded_unfolded_and_never_copied(tmp_path):
    fam = next(f for f in FAMILIES if f.name == "qwen3_moe-r1")
    loaded = load_folder(write_family_model(fam, tmp_path / "r1"), name="r1", spec="tiny")
    settings = Settings(model="tiny", memory_budget_bytes=16 * GB,
                        generation=GenerationSettings(temperature=0.0, max_tokens=4,
                                                      max_reasoning_tokens=6))
    app = tiny_app(tmp_path / "s.db", loaded, settings=settings)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        app.prompt.text = "Think about this"
        await pilot.press("enter")
        await settle(pilot)
        stored = app.conversation.messages[-1]
        assert stored.role == "assistant" and stored.reasoning
        block = app.transcript.query(AssistantMessage).last().thinking
        assert block.text.rstrip() == stored.reasoning
        assert stored.reasoning not in block.render().plain  # folded
        await pilot.press("ctrl+t")
        await pilot.pause()
        assert block.render().plain.endswith(block.text)
        assert app.title == "Think about this"
        app.copy_to_clipboard("")
        await pilot.press("ctrl+y")
        await pilot.pause()
        assert app.clipboard == stored.content  # the answer only ('' copies nothing)
