"""The whole app on a tiny random model: turns, commands, keys, sessions, resume."""

from __future__ import annotations

import gc

from textual.widgets import Static

from mlxchat.chat import human_bytes
from mlxchat.config import load_settings
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.events import TextDelta
from mlxchat.store import open_store
from mlxchat.tui.formatting import cache_source_label, fmt_bits_per_weight, kv_room
from mlxchat.tui.screens import ConfirmScreen, HelpScreen, ModelPickerScreen
from mlxchat.tui.widgets import AssistantMessage, NoticeMessage, UserMessage
from mlxchat.tui.widgets.notices import TableNotice
from mlxchat.units import fmt_gauge_percent, fmt_int, fmt_seconds, fmt_tps

from .app_support import GB, ready, send, settle, start_long_reply, tiny_app, tiny_settings, until


def plain(widget) -> str:
    return widget.render().plain


def gauge(app, selector: str) -> str:
    return plain(app.gauges.query_one(selector, Static))


def rows(app) -> list[tuple[str, str]]:
    """(kind, text) of each transcript entry."""
    out = []
    for w in app.transcript.children:
        if isinstance(w, UserMessage):
            out.append(("user", w.text))
        elif isinstance(w, AssistantMessage):
            out.append(("assistant", w.text))
        elif isinstance(w, NoticeMessage):
            out.append((w.level, plain(w)))
        else:
            out.append((type(w).__name__, ""))
    return out


async def test_send_shows_the_reply_and_the_engine_figures(tmp_path, tiny):
    app = tiny_app(tmp_path / "s.db", tiny)
    async with app.run_test(size=(200, 50)) as pilot:
        await ready(pilot)
        assert app.sub_title == "tiny"
        await send(pilot, "Hello there")
        conv = app.conversation
        stored = conv.messages
        assert [m.role for m in stored] == ["user", "assistant"]
        assert rows(app) == [("user", "Hello there"), ("assistant", stored[1].content)]
        assert app.title == conv.session.title == "Hello there"
        reply = app.transcript.query_one(AssistantMessage)
        assert reply.stats is conv.turns.last_stats and not reply.cancelled

        # The gauges show exactly the engine's figures.
        st, state = conv.turns.last_stats, conv.views.state()
        assert gauge(app, "#turn-text").splitlines() == [
            cache_source_label(st.cache_source),
            f"first token  {fmt_seconds(st.ttft_s)}",
            f"prefill      {fmt_tps(st.prefill_tps)}",
            f"decode       {fmt_tps(st.decode_tps)}",
            f"reused {fmt_int(st.reused_tokens)} · prefilled {fmt_int(st.prefilled_tokens)}",
        ]
        assert gauge(app, "#context-text") == (
            f"{fmt_int(state.cached_tokens)} / {fmt_int(state.context_window)} tokens  "
            f"{fmt_gauge_percent(state.cached_tokens, state.context_window)}\nheld in the KV cache"
            f"\n│ compacts past {fmt_int(state.context_window * 75 // 100)}")
        room = kv_room(kv_bytes=state.kv_bytes, cached_tokens=state.cached_tokens,
                       budget_bytes=16 * GB, context_window=state.context_window)
        budget_line = (f"{human_bytes(state.kv_bytes)} · "
                       f"{fmt_gauge_percent(state.kv_bytes, 16 * GB)} of {human_bytes(16 * GB)} budget")
        assert gauge(app, "#kv-text").splitlines()[:2] == [
            budget_line, f"room {fmt_int(room.tokens)} tokens ({room.limit} limit)"]
        assert gauge(app, "#kv-source") == f"warm cache · {fmt_int(state.cached_tokens)} tokens"
        assert gauge(app, "#weights-text") == (
            f"{human_bytes(state.weights_bytes)} in memory\n"
            f"{fmt_bits_per_weight(state.bits_per_weight, conv.views.model_info.scales_dtype)}\n"
            "computes in float32\n"  # a float model: no format besides its dtype
            f"peak memory {human_bytes(state.peak_memory_bytes)}")
        assert gauge(app, "#live-text") == "idle"
        assert state.cached_tokens == st.context_used and state.kv_bytes == st.kv_bytes


async def test_slash_commands_from_the_input(tmp_path, tiny):
    app = tiny_app(tmp_path / "s.db", tiny)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await send(pilot, "/get temperature")
        kind, text = rows(app)[-1]
        assert kind == "info" and text.startswith("temperature = 0.0 · new sessions: 0.0 ·")
        assert app.prompt.text == ""
        await send(pilot, "/stats")
        no_turn = ("No turn has ended yet in this session; /stats reports the last one once "
                   "it ends.")
        assert rows(app)[-1] == ("info", no_turn)
        await send(pilot, "Hi")
        await send(pilot, "/stats")
        table = app.transcript.children[-1]
        assert isinstance(table, TableNotice) and table.caption == "Last turn"
        st = app.conversation.turns.last_stats
        prompt_row = (f"{fmt_int(st.prompt_tokens)} tokens: 0 reused (cold start), "
                      f"{fmt_int(st.prefilled_tokens)} prefilled")
        assert ("prompt", prompt_row) in table.rows


async def test_completion_list_appears_on_slash(tmp_path, tiny):
    app = tiny_app(tmp_path / "s.db", tiny)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await pilot.press("/")
        shown = [c.display for c in app.prompt.completions]
        assert {"/help", "/stats", "/new", "/sessions", "/model"} <= set(shown)
        await pilot.press("s", "t")
        assert [c.display for c in app.prompt.completions] == ["/stats"]
        await pilot.press("tab")
        assert app.prompt.text == "/stats"


async def test_bad_command_is_an_error_notice_and_the_text_comes_back(tmp_path, tiny):
    app = tiny_app(tmp_path / "s.db", tiny)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await send(pilot, "/stast")
        assert rows(app) == [("error", "Unknown command /stast. Did you mean /stats?")]
        assert app.prompt.text == "/stast"


async def test_too_large_message_is_refused_and_changes_nothing(tmp_path, tiny):
    app = tiny_app(tmp_path / "s.db", tiny)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        conv = app.conversation
        huge = "x" * 5000  # one token a byte: more than the 2,048-token window
        await send(pilot, huge)
        [(kind, text)] = rows(app)
        assert kind == "error" and "context window" in text, text
        assert app.prompt.text == huge
        assert conv.messages == [] and conv.store.all_messages(conv.session.id) == []
        assert not app.generating and conv.views.state().cached_tokens == 0


async def test_escape_stops_a_long_reply_and_keeps_the_partial_text(tmp_path, tiny_long):
    app = tiny_app(tmp_path / "s.db", tiny_long, settings=tiny_settings(max_tokens=30000))
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await start_long_reply(app)
        assert app.generating
        # A second Enter while generating is refused and keeps its text.
        app.prompt.text = "and more"
        app.simulate_key("enter")
        await until(lambda: any("being generated" in n.message for n in app._notifications))
        assert app.prompt.text == "and more"
        app.simulate_key("escape")
        await settle(pilot)
        assert app.is_running and not app.generating
        conv = app.conversation
        stats = conv.turns.last_stats
        assert stats.finish_reason == "cancelled" and 0 < stats.generated_tokens < 30000
        reply = app.transcript.query_one(AssistantMessage)
        footer = plain(reply.query_one(".message-footer"))
        assert reply.cancelled and footer.startswith("(stopped)")
        assert "stopped by" not in footer  # said once, in front
        stored = conv.store.all_messages(conv.session.id)[-1]
        assert stored.role == "assistant" and stored.cancelled
        assert stored.content == reply.text != ""
        # The reply is over: what was typed meanwhile ("and") is prefilled now.
        await until(lambda: app.typing.tokens > 0)
        assert gauge(app, "#live-text") == \
            f"prefilled while typing: {app.typing.tokens:,} tokens"


class FailingMidReply(ChatEngine):
    """A real engine whose turn fails once its first text came (a device lost)."""

    def turn(self, messages, settings, **kw):
        for event in super().turn(messages, settings, **kw):
            yield event
            if isinstance(event, TextDelta) and event.text:
                raise RuntimeError("the device went away")


async def test_how_a_reply_ended_is_said_under_it(tmp_path, tiny):
    app = tiny_app(tmp_path / "s.db", tiny, settings=tiny_settings(max_tokens=4))
    async with app.run_test(size=(160, 40)) as pilot:
        await ready(pilot)
        await send(pilot, "Hello")
        stats = app.conversation.turns.last_stats
        footer = plain(app.transcript.query(AssistantMessage).last().query_one(
            ".message-footer"))
        assert footer.endswith(f" · {stats.ending}") and not footer.startswith("(")
        assert stats.ending in ("stopped by max_tokens", "ended by the model")


async def test_a_reply_an_error_cut_short_says_so(tmp_path, tiny):
    app = tiny_app(tmp_path / "s.db", tiny, engine_factory=FailingMidReply)
    async with app.run_test(size=(160, 40)) as pilot:
        await ready(pilot)
        await send(pilot, "Hello")
        reply = app.transcript.query(AssistantMessage).last()
        assert plain(reply.query_one(".message-footer")) == "(cut short by an error)"
        assert any("the device went away" in str(n.render())
                   for n in app.transcript.query(NoticeMessage))


async def test_escape_and_ctrl_c_never_quit(tmp_path, tiny):
    app = tiny_app(tmp_path / "s.db", tiny)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await pilot.press("escape", "ctrl+c", "escape")
        await pilot.pause()
        assert app.is_running and app.return_code is None


async def test_up_arrow_edits_the_last_message_on_a_new_branch(tmp_path, tiny):
    app = tiny_app(tmp_path / "s.db", tiny)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await send(pilot, "First question")
        await pilot.press("up")
        assert app.editing and app.prompt.text == "First question"
        await pilot.press("escape")
        assert not app.editing and app.prompt.text == ""
        await pilot.press("up")
        app.prompt.text = "Better question"
        await pilot.press("enter")
        await settle(pilot)
        conv = app.conversation
        assert conv.messages[0].content == "Better question"
        assert rows(app)[0] == ("user", "Better question")
        assert len(conv.store.branches.of(conv.session.id)) == 2
        assert not app.editing


async def test_new_open_and_the_sessions_browser_swap_transcript_and_gauges(tmp_path, tiny):
    app = tiny_app(tmp_path / "s.db", tiny)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await send(pilot, "About apples")
        first = app.conversation.session
        first_turn = gauge(app, "#turn-text")
        held = app.conversation.views.state().cached_tokens
        await send(pilot, "/new")
        assert rows(app)[-1][1].startswith("New session #")
        assert [k for k, _ in rows(app)] == ["info"]
        assert gauge(app, "#turn-text") == "no turn yet"
        # The new chat holds nothing yet; the last one's tokens stay warm in the cache.
        assert held and app.conversation.views.state().cached_tokens == held
        window = app.conversation.views.state().context_window
        assert gauge(app, "#context-text") == (
            f"0 / {fmt_int(window)} tokens  {fmt_gauge_percent(0, window)}\n"
            f"in this chat · the KV cache holds {fmt_int(held)}\n"
            f"│ compacts past {fmt_int(window * 75 // 100)}")
        await send(pilot, "About pears")
        second = app.conversation.session
        assert app.title == "About pears"

        await send(pilot, "/open About apples")
        assert app.conversation.session.id == first.id
        assert rows(app)[0] == ("user", "About apples") and rows(app)[-1][0] == "info"
        assert gauge(app, "#turn-text") == first_turn  # the stored stats of its reply
        assert app.title == "About apples"

        await pilot.press("ctrl+o")
        await settle(pilot)
        screen = app.screen
        assert [s.title for s in screen.results] == ["About pears", "About apples"]
        await pilot.press("down", "enter")  # into the list (newest first), open
        await settle(pilot)
        assert app.conversation.session.id == second.id
        assert rows(app)[0] == ("user", "About pears")
        assert app.conversation.views.state().cache_source in ("snapshot", "warm")


async def test_deleting_the_open_session_after_confirming_starts_a_new_one(tmp_path, tiny):
    app = tiny_app(tmp_path / "s.db", tiny)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await send(pilot, "Delete me")
        old = app.conversation.session.id
        await send(pilot, "/delete")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await settle(pilot)
        conv = app.conversation
        assert conv.session.id != old and conv.messages == []
        assert [s.id for s in conv.store.list_sessions()] == [conv.session.id]
        assert rows(app)[-1][1].startswith(f"Deleted #{old}")


async def test_continue_restores_the_snapshot_and_prefills_only_the_new_message(tmp_path, tiny):
    db = tmp_path / "s.db"
    app = tiny_app(db, tiny)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await send(pilot, "Remember the number seven")
        session_id = app.conversation.session.id
        await pilot.press("ctrl+q")
        await pilot.pause()
    store = open_store(db)
    assert store.segments.on_branch(store.get_session(session_id).leaf_id)  # its KV on disk
    store.close()

    app = tiny_app(db, tiny, continue_last=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        conv = app.conversation
        state = conv.views.state()
        assert conv.session.id == session_id
        assert state.cache_source == "snapshot" and state.cached_tokens > 0
        assert gauge(app, "#kv-source") == f"from snapshot · {fmt_int(state.cached_tokens)} tokens"
        assert [k for k, _ in rows(app)] == ["user", "assistant", "info"]
        assert "KV cache restored from its snapshot" in rows(app)[-1][1]
        await send(pilot, "Which number?")
        st = conv.turns.last_stats
        assert st.cache_source == "snapshot" and st.miss_reason is None
        # The whole restored history is reused; only the new message is prefilled.
        assert st.reused_tokens == state.cached_tokens
        assert st.prefilled_tokens == st.prompt_tokens - state.cached_tokens < 40
        assert gauge(app, "#turn-text").splitlines()[0] == "from snapshot"


async def test_unknown_session_argument_starts_a_new_one_with_a_warning(tmp_path, tiny):
    app = tiny_app(tmp_path / "s.db", tiny, session="no such chat")
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        [(kind, text)] = rows(app)
        assert kind == "warning" and "No session matches 'no such chat'" in text


async def test_quitting_an_unused_window_leaves_no_empty_session(tmp_path, tiny):
    app = tiny_app(tmp_path / "s.db", tiny)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await pilot.press("ctrl+q")
        await pilot.pause()
    store = open_store(tmp_path / "s.db")
    assert store.list_sessions() == []
    store.close()


async def test_help_copy_and_palette(tmp_path, tiny):
    app = tiny_app(tmp_path / "s.db", tiny)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await pilot.press("f1")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        assert ("/stats", app.registry.get("stats").help) in app.screen.commands
        await pilot.press("escape")
        await pilot.pause()
        await send(pilot, "Hello")
        reply = app.conversation.messages[-1].content
        await pilot.press("ctrl+y")
        assert app.clipboard == reply
        app.copy_to_clipboard("")
        await send(pilot, "/copy")  # the command copies from its worker thread
        assert app.clipboard == reply
        kind, said = rows(app)[-1]
        assert kind == "info" and said.startswith(f"Copied the last reply ({len(reply)} "
                                                  "characters) ")
        assert "to the terminal (OSC 52" in said  # which way it went

        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"stats")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.transcript.children[-1], TableNotice)


async def test_theme_change_is_remembered(tmp_path, tiny):
    app = tiny_app(tmp_path / "s.db", tiny)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        app.theme = "nord"
        await pilot.pause()
    assert load_settings().theme == "nord"
    app = tiny_app(tmp_path / "s.db", tiny, settings=tiny_settings(theme="nord"))
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        assert app.theme == "nord"


async def test_model_picker_switches_the_model(tmp_path, tiny, tiny_b):
    from mlxchat.models import ModelEntry

    entries = [ModelEntry("tiny", "test", "folder", None, 2048, 400_000, True, True),
               ModelEntry("tiny-b", "test", "folder", None, 1024, 400_000, True, True)]
    app = tiny_app(tmp_path / "s.db", tiny, tiny_b)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        app.ctx.list_models = lambda: entries
        await send(pilot, "/models")
        assert isinstance(app.screen, ModelPickerScreen) and app.screen.current == "tiny"
        await pilot.press("down", "enter")
        await settle(pilot)
        assert app.conversation.model_spec == "tiny-b" and app.sub_title == "tiny-b"
        assert gauge(app, "#gauge-model") == "tiny-b"
        assert rows(app)[-1][1].startswith("Switched to tiny-b")
        # The palette starts a command that needs an argument in the input.
        app.screens.palette_command("rename")
        assert app.prompt.text == "/rename "


async def test_model_load_failure_is_shown_and_sending_is_refused(tmp_path, tiny):
    app = tiny_app(tmp_path / "s.db", tiny, model_spec="qwen9")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        [(kind, text)] = rows(app)
        assert kind == "error" and text.startswith("Could not load the model: unknown model")
        app.prompt.text = "hello?"
        await pilot.press("enter")
        assert app.prompt.text == "hello?"


async def test_retry_edit_prefill_and_quit_commands(tmp_path, tiny):
    app = tiny_app(tmp_path / "s.db", tiny, settings=tiny_settings(system_prompt="Be brief."))
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await send(pilot, "Question")
        conv = app.conversation
        await send(pilot, "/retry")  # a turn result: streamed like a send, on a new branch
        assert [k for k, _ in rows(app)] == ["user", "assistant"]
        assert len(conv.store.branches.of(conv.session.id)) == 2
        assert conv.turns.last_stats.finish_reason in ("length", "stop")
        await send(pilot, "/edit")  # no text: the last message comes back to edit
        assert app.prompt.text == "/edit Question"
        app.prompt.text = ""
        await send(pilot, "/quit")
        assert app.return_code == 0


async def test_what_exists_at_start_is_out_of_the_collectors_sight(tmp_path, tiny):
    # A full collection walks every object the collector tracks while it holds
    # the interpreter lock; the model and the libraries are moved out of its way.
    gc.unfreeze()  # an earlier app in this process froze its own start
    before_start = [object()]
    app = tiny_app(tmp_path / "s.db", tiny)
    async with app.run_test() as pilot:
        await ready(pilot)
        assert gc.get_freeze_count() > 0
        assert not any(o is before_start for o in gc.get_objects())


async def test_each_reply_is_labelled_with_the_model_that_wrote_it(tmp_path, tiny, tiny_b):
    app = tiny_app(tmp_path / "s.db", tiny, tiny_b)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await send(pilot, "One.")
        await send(pilot, "/model tiny-b")
        await send(pilot, "Two.")
        await send(pilot, "/model tiny")  # the transcript is shown again
        await settle(pilot)
        labels = [w.label for w in app.transcript.query(AssistantMessage)]
        assert labels == ["tiny", "tiny-b"]


async def test_notices_stay_through_a_reload_and_a_resize_but_not_into_another_session(
        tmp_path, tiny):
    app = tiny_app(tmp_path / "s.db", tiny)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await send(pilot, "Hello there.")
        await send(pilot, "/nosuchcommand")
        await send(pilot, "/stats")
        before = rows(app)
        assert [kind for kind, _ in before][:2] == ["user", "assistant"]
        assert any(kind == "error" for kind, _ in before)
        await send(pilot, "/rename Kept notices")  # the session changed: shown again
        await pilot.resize_terminal(80, 24)
        await settle(pilot)
        after = rows(app)
        assert after[:len(before)] == before
        assert len(app.transcript.query(TableNotice)) == 1
        await send(pilot, "/new")
        assert not any(kind == "error" for kind, _ in rows(app))
