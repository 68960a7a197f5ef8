"""A turn that first reads its branch's KV cache from disk says so before it
does (the app shows it while the user waits); one the live cache serves does not."""

from __future__ import annotations

from mlxchat.engine.events import PrefillProgress, Preparing
from tests.session.test_compaction import last, make


def test_a_turn_says_it_restores_its_branch_from_disk_before_it_does(tiny, tmp_path):
    conv = make(tiny, tmp_path / "s.db")
    last(conv.turns.send("One."))
    last(conv.turns.send("Two? Tell me about rivers and the sea."))
    leaf = conv.session.leaf_id
    last(conv.turns.edit_last("Two?"))  # another branch now holds the live cache
    last(conv.turns.send("And then?"))

    conv.saved.switch_branch(leaf)
    events = list(conv.turns.send("Three."))
    assert isinstance(events[0], Preparing)
    assert events[0].what == "restoring this branch's KV cache from disk"
    assert last(events).stats.cache_source == "snapshot"

    events = list(conv.turns.send("Four."))  # the live cache holds this branch now
    assert isinstance(events[0], PrefillProgress)
    conv.close()
