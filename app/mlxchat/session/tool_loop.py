"""The tool loop, one step at a time: the reply's calls (read with the
parser of the model's own markup) → the user's consent → each call on its
server, with a timeout (escape stops it) → its result cut to the token
budget → stored as ``tool`` messages with their call ids → the turn that
reads them, whose prompt extends the token ledger (only the results are
prefilled). Up to ``max_tool_steps`` steps per message.

Nothing runs before the answer: a call the user denies never reaches its
server, and goes back to the model as a result that says so.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from mlxchat.chat import CalledTool, Message, ToolRun
from mlxchat.engine.events import Event, TurnDone
from mlxchat.engine.interface import Engine
from mlxchat.models.tools import ToolCall, call_markup, split_tool_calls
from mlxchat.session.current import OpenSession
from mlxchat.session.tools import SessionTools
from mlxchat.session.turns import TurnRunner
from mlxchat.store import SessionStore
from mlxchat.tools import catalog, outcome
from mlxchat.tools.catalog import ToolInfo
from mlxchat.tools.outcome import CallOutcome

Answer = Literal["once", "session", "everywhere", "deny"]


@dataclass(frozen=True)
class ConsentRequest:
    """A call waiting for the user's answer."""

    tool: ToolInfo
    arguments: Any
    model_name: str
    """The name the model called it by."""

    def arguments_text(self) -> str:
        return json.dumps(self.arguments, indent=2, ensure_ascii=False, sort_keys=True)


@dataclass(frozen=True)
class Consent:
    answer: Answer
    reason: str = ""
    """With 'deny': why, told to the model."""


AskConsent = Callable[[ConsentRequest], Consent]


@dataclass
class ToolStep:
    """What one step did: the results it stored, and the turn that reads them
    (None when the loop ends here)."""

    results: list[Message] = field(default_factory=list)
    turn: Iterator[Event] | None = None
    notice: str | None = None
    """One line for the user: why the loop ended, or what went wrong."""


def _with_ids(calls: list[ToolCall], step: int) -> tuple[CalledTool, ...]:
    """Calls with their ids: the model's own, else made from the step and place
    (stable, so a resumed session renders them again the same)."""
    return tuple(CalledTool(c.name, c.arguments, c.id or f"call_{step}_{i}")
                 for i, c in enumerate(calls))


class ToolLoop:
    """Runs the calls of the open session's last reply (``conv.tool_loop``)."""

    def __init__(self, open_session: OpenSession, store: SessionStore, engine: Engine, *,
                 turns: TurnRunner, tools: SessionTools):
        self._open = open_session
        self._store = store
        self._engine = engine
        self._turns = turns
        self._tools = tools

    def calls(self, done: TurnDone) -> list[ToolCall]:
        """The tool calls in a finished reply (none when the session uses no
        tools, or the reply was stopped)."""
        if not self._tools.choice or not done.reply or done.stats.finish_reason == "cancelled":
            return []
        pieces = split_tool_calls(self._engine.loaded.tokenizer, done.reply)
        return [p for p in pieces if isinstance(p, ToolCall)]

    def steps_taken(self) -> int:
        """Tool steps since the last user message (each a group of results)."""
        steps, previous = 0, None
        for message in reversed(self._open.messages):
            if message.role == "user":
                break
            steps += message.role == "tool" and previous != "tool"
            previous = message.role
        return steps

    def step(self, done: TurnDone, *, consent: AskConsent,
             on_call: Callable[[str], None] | None = None) -> ToolStep | None:
        """After a finished reply: run its calls and start the turn that reads
        their results; None when the reply called no tool."""
        calls = self.calls(done)
        reply = self._open.messages[-1] if self._open.messages else None
        if not calls or reply is None or reply.role != "assistant" or reply.id is None:
            return self._unread(done)
        step = self.steps_taken() + 1
        called = _with_ids(calls, step)
        text = "".join(p for p in split_tool_calls(self._engine.loaded.tokenizer, reply.content)
                       if isinstance(p, str))
        self._store.set_reply_calls(reply.id, text, called)
        self._open.reload()
        limit = self._open.generation.max_tool_steps
        if step > limit:
            return ToolStep(notice=f"The model asked for another tool call after {limit} steps "
                                   f"(max_tool_steps); it was not run. /set max_tool_steps N "
                                   "allows more.")
        self._tools.cancel_event.clear()
        results = []
        for call in called:
            results.append(self._run(call, consent, on_call))
            if self._tools.cancel_event.is_set():
                return ToolStep(notice=f"Stopped at {call.name}: nothing was sent to the model"
                                       " (a call already running may have done part of its "
                                       "work).")
        turn = self._turns.send_results(results)
        return ToolStep(self._open.messages[-len(results):], turn)

    def _unread(self, done: TurnDone) -> ToolStep | None:
        """A reply that spells a call's start but no call could be read from it."""
        markup = call_markup(self._engine.loaded.tokenizer)
        if (self._tools.choice and markup is not None and markup.start in (done.reply or "")
                and done.stats.finish_reason != "cancelled"):
            return ToolStep(notice="The model wrote a tool call that cannot be read (cut short "
                                   "or not valid JSON); nothing was run.")
        return None

    def _run(self, call: CalledTool, consent: AskConsent,
             on_call: Callable[[str], None] | None) -> Message:
        named = self._tools.named()
        tool = named.get(call.name)
        if tool is None:
            known = ", ".join(sorted(named)) or "none"
            return self._result(call, None, outcome.failed(
                f"there is no tool named {call.name!r} (the tools are: {known})"))
        problem = catalog.argument_problem(tool, call.arguments)
        if problem is not None:
            return self._result(call, tool, outcome.failed(
                f"the arguments do not fit {call.name}'s schema: {problem}"))
        if not self._tools.granted(tool):
            answer = consent(ConsentRequest(tool, call.arguments, call.name))
            if self._tools.cancel_event.is_set():
                return self._result(call, tool, outcome.failed("cancelled by the user"))
            if answer.answer == "deny":
                why = f": {answer.reason.strip()}" if answer.reason.strip() else ""
                text = f"The user denied this call{why}. It did not run."
                return self._result(call, tool, CallOutcome(
                    text, is_error=True, note=f"denied{why}"))
            if answer.answer in ("session", "everywhere"):
                self._tools.grant(tool, everywhere=answer.answer == "everywhere")
        if on_call is not None:
            on_call(f"running {tool.qualified}… (escape stops it)")
        settings = self._open.generation
        result = self._tools.host.call(tool.server, tool.name, call.arguments,  # type: ignore
                                       timeout_s=settings.tool_timeout,
                                       cancel=self._tools.cancel_event)
        return self._result(call, tool, result)

    def _result(self, call: CalledTool, tool: ToolInfo | None, result: CallOutcome) -> Message:
        """The result as the model gets it (cut to the budget) and as it is stored."""
        tok = self._engine.loaded.tokenizer
        budget = self._tools.result_budget()
        cut = outcome.cut_to_budget(result.text, budget,
                                    encode=lambda t: tok.encode(t, add_special_tokens=False),
                                    decode=tok.decode)
        note = result.note
        if cut.cut:
            shown = f"cut to {budget:,} tokens"
            note = f"{note}; {shown}" if note else shown
        run = ToolRun(tool.server if tool else "?", tool.name if tool else call.name,
                      round(result.duration_s, 3), result.size_bytes or len(result.text), note)
        return Message("tool", cut.text, tool_call_id=call.id, tool_name=call.name,
                       tool_run=run)
