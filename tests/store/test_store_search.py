"""Full-text search: snippets, prefix words, and no user string can make it raise."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlxchat.store import SessionStore, fts_query, open_store


@pytest.fixture
def searchable(store: SessionStore) -> dict[str, int]:
    ids = {}
    for title, texts in {
        "cooking": ["How long do I boil an egg?", "About seven minutes for a firm yolk."],
        "rust": [
            "Explain Rust lifetimes",
            "Lifetimes tell the borrow checker how long references live.",
        ],
        "café": ["Où est le café?", "Près de la gare."],
    }.items():
        s = store.create_session("m", title=title)
        for i, text in enumerate(texts):
            store.add_message(s.id, "user" if i % 2 == 0 else "assistant", text)
        ids[title] = s.id
    return ids


def test_search_finds_sessions_with_a_snippet(store: SessionStore, searchable) -> None:
    hits = store.list_sessions(search="borrow checker")
    assert [h.id for h in hits] == [searchable["rust"]]
    assert "[borrow] [checker]" in hits[0].snippet
    assert {h.id for h in store.list_sessions(search="how long")} == {
        searchable["rust"],
        searchable["cooking"],
    }


def test_search_prefix_diacritics_and_titles(store: SessionStore, searchable) -> None:
    assert [h.id for h in store.list_sessions(search="lifeti*")] == [searchable["rust"]]
    assert [h.id for h in store.list_sessions(search="cafe")] == [searchable["café"]]
    assert [h.id for h in store.list_sessions(search="cook")] == [
        searchable["cooking"]
    ]  # title only
    assert store.list_sessions(search="   ") == store.list_sessions()


def test_search_of_a_deleted_session_finds_nothing(store: SessionStore, searchable) -> None:
    store.delete_session(searchable["rust"])
    assert store.list_sessions(search="lifetimes") == []
    conn = store.db._conn  # noqa: SLF001 - checking the index itself
    conn.execute("INSERT INTO messages_fts(messages_fts) VALUES ('integrity-check')")


@pytest.mark.parametrize(
    "query",
    [
        '"',
        '""',
        "AND (",
        "egg AND (",
        "*",
        "**",
        "NEAR(",
        "a:b",
        "-",
        "^x",
        "NOT",
        "OR OR",
        "(",
        ")",
        "'",
        "col:egg",
        "{x}",
        "x*y",
        "\x00",
        "egg\x00",
        "\ud800",
        "egg ) OR ( yolk",
    ],
)
def test_fts_syntax_in_user_input_never_raises(store: SessionStore, searchable, query: str) -> None:
    store.list_sessions(search=query)


def test_fts_query_quotes_every_word() -> None:
    assert fts_query('say "hi" AND (x*') == '"say" """hi""" "AND" "(x"*'
    assert fts_query("  ") is None


@settings(max_examples=300, deadline=None)
@given(
    query=st.text(
        alphabet=st.characters(exclude_categories=()) | st.sampled_from('"*():^-+ANDORNT'),
        max_size=40,
    )
)
def test_fuzzed_search_strings_never_raise(query: str) -> None:
    hits = _shared_store().list_sessions(search=query)
    if query.strip():
        assert all(h.snippet for h in hits)


_STORE: list[SessionStore] = []


def _shared_store() -> SessionStore:
    if not _STORE:
        store = open_store(":memory:")
        s = store.create_session("m")
        for text in [
            "alpha beta",
            'quote " and (paren',
            "NEAR AND OR NOT",
            "x* y^ z:",
            "ünïcödé 🙂 text",
        ]:
            store.add_message(s.id, "user", text)
        _STORE.append(store)
    return _STORE[0]
