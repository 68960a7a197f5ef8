"""Retrieval in the turn: a message with a collection in use carries its
sources in front of the question, within the token budget, stored with it and
in its token ledger, so a reopened session is exact and never retrieves again.

Real MLX on the tiny random model; the tiny random BERT embeds (real layers).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from mlxchat.config import Settings
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.events import TurnDone
from mlxchat.generation import DOCS_BUDGET_AUTO_MIN, DOCS_BUDGET_SHARE
from mlxchat.session.conversation import Conversation
from mlxchat.session.retrieval import RetrievalError
from mlxchat.sources import sources_block, without_sources
from mlxchat.store import open_store

from .conftest import tiny_embedder

HERONS = ("# Herons\n\nHerons wade in shallow water.\nThey eat fish and frogs.\n\n"
          "## Nests\n\nHerons nest in colonies called heronries.\n")
OWLS = "# Owls\n\nOwls hunt at night.\nTheir feathers are soft.\n"


def make(tiny, db: Path, embedder, session=None) -> Conversation:
    settings = Settings()
    settings.generation.temperature = 0.0
    settings.generation.max_tokens = 6
    return Conversation(settings=settings, store=open_store(db), engine=ChatEngine(tiny),
                        model_spec="tiny", session=session, embedder=lambda: embedder)


def last(events) -> TurnDone:
    return [e for e in events if isinstance(e, TurnDone)][-1]


@pytest.fixture
def notes(tmp_path) -> Path:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "herons.md").write_text(HERONS)
    (folder / "owls.md").write_text(OWLS)
    return folder


@pytest.fixture
def conv(tiny, tmp_path, notes):
    c = make(tiny, tmp_path / "s.db", tiny_embedder())
    c.retrieval.add("notes", [notes])
    c.retrieval.use("notes")
    yield c
    c.close()


def test_a_message_carries_its_sources_in_front_and_stored(conv, notes):
    done = last(conv.turns.send("Where do herons nest?"))
    found = conv.retrieval.last
    user = conv.messages[-2]
    assert found is not None and found.sources == user.sources
    # Owls share no word with the question: the fused score BM25 gave herons
    # leaves them below the relevance floor.
    assert {s.path for s in user.sources} == {str(notes / "herons.md")}
    assert found.below_floor == 1
    herons = next(s for s in user.sources if s.path.endswith("herons.md"))
    # The chunk keeps its place: its lines are the file's lines.
    lines = HERONS.splitlines()
    assert herons.text.strip() == "\n".join(lines[herons.start_line - 1:herons.end_line]).strip()
    assert [s.n for s in user.sources] == list(range(1, len(user.sources) + 1))
    assert user.content == sources_block("notes", user.sources) + "\n\nWhere do herons nest?"
    assert without_sources(user.content) == "Where do herons nest?"
    assert conv.session.title == "Where do herons nest?"
    # Every source's tokens were measured with the model's tokenizer, and the
    # block (what the prompt carries) is within the budget.
    tokenizer = conv.engine.loaded.tokenizer
    for s in user.sources:
        assert s.tokens == len(tokenizer.encode(s.entry(), add_special_tokens=False))
    assert found.tokens < found.block_tokens <= found.budget
    # The ledger holds the block: the prompt is the whole message's tokens.
    assert done.stats.prompt_tokens >= found.block_tokens


def test_the_budget_keeps_only_what_fits(conv):
    def block_cost(*parts):
        return conv.retrieval._tokens(sources_block("notes", list(parts)))

    settings = conv.session.settings
    both = conv.retrieval.retrieve("Where do herons nest and owls hunt?", remember=False)
    assert len(both.sources) == 2 and both.block_tokens == block_cost(*both.sources)
    first, second = both.sources
    # A budget that holds the first (or the second alone) but not both: one is
    # kept, the other counted as left out, and the whole block stays within.
    alone = [dataclasses.replace(s, n=1) for s in both.sources]
    budget = max(block_cost(alone[0]), block_cost(alone[1]))
    assert budget < both.block_tokens
    conv.update_generation(dataclasses.replace(settings, docs_budget=budget))
    found = conv.retrieval.retrieve("Where do herons nest and owls hunt?")
    assert (len(found.sources), found.left_out, found.budget) == (1, 1, budget)
    assert found.sources[0].path == first.path  # the better one, as it fits
    assert found.block_tokens == block_cost(*found.sources) <= budget
    # k caps the count too.
    conv.update_generation(dataclasses.replace(settings, docs_k=1))
    found = conv.retrieval.retrieve("herons owls")
    assert len(found.sources) == 1 and found.sources[0].n == 1
    # What the message itself takes is not left to the sources.
    conv.update_generation(dataclasses.replace(settings, docs_budget=None))
    long = "herons " * 250
    free = conv.views.window_left() - conv.engine.prompts.reply_reserve(conv.generation)
    auto = max(conv.views.context_window // DOCS_BUDGET_SHARE, DOCS_BUDGET_AUTO_MIN)
    assert conv.retrieval.budget("") == auto < free
    assert 0 < conv.retrieval.budget(long) < auto
    assert conv.retrieval.budget(long) + conv.retrieval._tokens(long) == free


def test_a_reopened_session_is_token_identical_and_never_retrieves_again(tiny, tmp_path,
                                                                         conv, notes):
    first = last(conv.turns.send("Where do herons nest?"))
    sid, user = conv.session.id, conv.messages[-2]
    conv.close()
    # The files change and the collection goes: the stored turn must not.
    (notes / "herons.md").write_text("# Herons\n\nNothing about nests any more.\n")
    counting = tiny_embedder()
    again = make(tiny, tmp_path / "s.db", counting)
    again.retrieval.remove("notes")
    again.open_session(sid)
    assert again.messages[0].sources == user.sources
    assert again.messages[0].content == user.content
    assert again.messages[0].token_ids == user.token_ids
    # Retrying re-answers the stored message: same tokens, same greedy reply, from disk.
    redo = last(again.turns.retry())
    assert redo.stats.prompt_tokens == first.stats.prompt_tokens
    assert redo.reply == first.reply
    assert redo.stats.cache_source in ("warm", "snapshot")
    assert counting.embedded == []  # nothing was embedded: nothing was retrieved
    # A follow-up with the collection gone and still chosen: one line, nothing stored.
    again.retrieval._open.change_generation(docs="notes")
    before = len(again.store.all_messages(sid))
    with pytest.raises(RetrievalError, match="no longer exists"):
        again.turns.send("And owls?")
    assert len(again.store.all_messages(sid)) == before
    again.close()


def test_editing_retrieves_for_the_new_text_and_retry_does_not(conv):
    last(conv.turns.send("Where do herons nest?"))
    first_sources = conv.messages[-2].sources
    last(conv.turns.retry())
    assert conv.messages[-2].sources == first_sources
    # The UI's edit starts from what was typed (sources off); sending the stored
    # content back retrieves once, for the question alone.
    assert conv.turns.last_user_text() == "Where do herons nest?"
    last(conv.turns.edit_last(conv.messages[-2].content))
    again = conv.messages[-2]
    assert again.content.count("<sources collection=") == 1
    assert without_sources(again.content) == "Where do herons nest?"
    last(conv.turns.edit_last("When do owls hunt?"))
    edited = conv.messages[-2]
    assert without_sources(edited.content) == "When do owls hunt?"
    assert edited.sources is not None and edited.id != conv.store.all_messages(
        conv.session.id)[0].id


def test_no_collection_in_use_sends_the_text_alone(conv):
    conv.retrieval.use(None)
    last(conv.turns.send("Plain question"))
    assert conv.messages[-2].content == "Plain question" and conv.messages[-2].sources is None
    assert conv.retrieval.last is None


def test_a_changed_file_is_said_by_its_source(conv, notes):
    (notes / "owls.md").write_text(OWLS + "More.\n")
    found = conv.retrieval.retrieve("owls feathers")
    owls = next(s for s in found.sources if s.path.endswith("owls.md"))
    assert owls.stale == "file changed since indexing"


def test_fork_and_export_keep_the_sources(conv, tmp_path):
    last(conv.turns.send("Where do herons nest?"))
    sources = conv.messages[-2].sources
    _, copy = conv.fork()
    assert conv.session.id == copy.id and conv.messages[-2].sources == sources
    path = conv.saved.export("json", str(tmp_path / "out.json"), cwd=tmp_path)
    data = json.loads(path.read_text())
    stored = [m for m in data["messages"] if m["role"] == "user"][0]
    assert [s["path"] for s in stored["sources"]] == [s.path for s in sources]
    md = conv.saved.export("md", str(tmp_path / "out.md"), cwd=tmp_path).read_text()
    for s in sources:
        assert f"[{s.n}] {s.place}" in md
    assert "best match" in md and " · score " not in md  # relevance in words, as the app says it
    imported = conv.saved.import_file(path)
    assert imported.messages[0].sources == sources


def test_typing_prefill_waits_while_retrieving(conv):
    assert conv.typing.typed_tokens("Where do") is None  # the sources go in front: unknown yet
    conv.retrieval.use(None)
    assert conv.typing.typed_tokens("Where do") is not None


def test_the_prefill_forecast_is_for_the_block_where_it_goes(conv):
    """The sources' "~N s to prefill" comes from the prefill rates measured on
    this model at that depth of the window, not from the last turn's rate."""
    before = conv.retrieval.retrieve("Where do herons nest?", remember=False)
    assert before.sources and before.forecast_s is None  # nothing measured yet
    last(conv.turns.send("Where do herons nest?"))
    found = conv.retrieval.retrieve("Where do owls hunt?", remember=False)
    estimate = conv.views.prefill_estimate(found.block_tokens)
    assert estimate is not None and found.forecast_s == estimate.seconds > 0
