"""The composition root: the one place that builds store + model + engine +
Conversation. The TUI, `mlxchat ask` and the benchmarks all open through it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Literal, Protocol

from mlxchat.chat import NO_SYSTEM_ROLE, Session
from mlxchat.config import Settings
from mlxchat.engine.interface import Engine
from mlxchat.models import LoadedModel
from mlxchat.session.conversation import Conversation
from mlxchat.session.lock import SessionBusy
from mlxchat.store import SessionNotFound, SessionStore, StoreError
from mlxchat.tools.host import ToolHost

Progress = Callable[[str, int, int], None]
"""``progress(stage, done, total)``, from the loading thread (see ``load_model``)."""
NoticeLevel = Literal["info", "warning", "error"]
SessionLookup = Literal["lenient", "exact"]
"""How a session name is matched: 'lenient' (the UI: case-insensitive, unique
prefix; a miss opens a new session with a notice) or 'exact' (scripts: id or
exact title; a miss creates a session with that title)."""

BUDGET_SHARE_OF_RAM = 0.75


def memory_budget(settings: Settings) -> int:
    """The KV memory budget the gauges measure against: the setting, or 75% of RAM."""
    if settings.memory_budget_bytes:
        return settings.memory_budget_bytes
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0  # unknown: the gauge shows '–' instead of a made-up figure
    return int(ram * BUDGET_SHARE_OF_RAM)


@dataclass
class Opened:
    """A ready conversation and what the user should be told about getting there."""

    conversation: Conversation
    store: SessionStore
    """The store and the engine the conversation was built on, for those the
    root hands them to (the API server's rows and raw completions)."""
    engine: Engine
    notices: list[tuple[str, NoticeLevel]] = field(default_factory=list)
    resumed: bool = False
    """An existing session was opened (not a new one)."""


class ConversationFactory(Protocol):
    """How an app opens its conversation (``open_conversation``, or a test's);
    it is given ``tool_host=`` only when the app runs MCP tools."""

    def __call__(self, settings: Settings, *, model_spec: str | None, session: str | None,
                 continue_last: bool, progress: Progress | None) -> Opened: ...


def default_store() -> SessionStore:
    from mlxchat.store import open_store

    return open_store()


def throwaway_store() -> SessionStore:
    """An in-memory store: one-off questions go through the same turn path."""
    from mlxchat.store import open_store

    return open_store(":memory:")


def default_loader(spec: str, progress: Progress | None = None) -> LoadedModel:
    from mlxchat.models import load_model

    return load_model(spec, progress=progress)


def default_tool_host() -> ToolHost:
    """The MCP servers of the user's ``mcp.json`` (none started until a session needs them)."""
    from mlxchat.tools.config import load_tools_config

    return ToolHost(load_tools_config())


def default_engine(loaded: LoadedModel) -> Engine:
    from mlxchat.engine.core import ChatEngine

    return ChatEngine(loaded)


def _find_session(store: SessionStore, ref: str | None, continue_last: bool,
                  lookup: SessionLookup, notices: list[tuple[str, NoticeLevel]]
                  ) -> Session | None:
    if ref:
        try:
            return store.find_session(ref, prefix=lookup == "lenient")
        except SessionNotFound as exc:
            if lookup == "lenient":
                notices.append((f"{exc} Started a new session instead.", "warning"))
            return None
        except StoreError as exc:
            if lookup == "exact":
                raise  # several sessions match: the user must pick one
            notices.append((f"{exc} Started a new session instead.", "warning"))
            return None
    if continue_last:
        found = store.most_recent_session()
        if found is None:
            notices.append(("No saved session to continue; this is a new one.", "info"))
        return found
    return None


def open_conversation(settings: Settings, *, model_spec: str | None = None,
                      session: str | None = None, continue_last: bool = False,
                      lookup: SessionLookup = "lenient", new_title: str | None = None,
                      progress: Progress | None = None,
                      store_factory: Callable[[], SessionStore] = default_store,
                      load_model: Callable[..., LoadedModel] = default_loader,
                      engine_factory: Callable[[LoadedModel], Engine] = default_engine,
                      keep_snapshots: bool = True, lock_wait_s: float = 0.0,
                      lock_holder: str = "", tool_host: ToolHost | None = None) -> Opened:
    """Open the store, pick the session (``session`` id/title, or the most recent
    one with ``continue_last``), load the model once (``model_spec``, else the
    session's, else the settings'), and restore the session's KV snapshot.

    A new session gets ``new_title`` (else it is named by its first message).
    A session open in another process is waited for ``lock_wait_s``; then the
    lenient lookup opens a new session with a notice, the exact one refuses.
    ``lock_holder`` names this conversation in a refusal to another part of
    the process ('the API server'). Tests pass their own store, loader and
    engine; the logic is the same.
    """
    notices: list[tuple[str, NoticeLevel]] = []
    store = store_factory()
    try:
        resumed = _find_session(store, session, continue_last, lookup, notices)
        spec = model_spec or (resumed.model if resumed else None) or settings.model
        loaded = load_model(spec, progress=progress)
        if loaded.info.memory_note:
            notices.append((loaded.info.memory_note + ".", "warning"))
        engine = engine_factory(loaded)
        if resumed is None and lookup == "exact" and session and session == new_title:
            # Not found by name: another process may be creating it right now,
            # so look again and create it in one transaction.
            resumed_or_new, created = store.titled_session(
                new_title, spec, settings.system_prompt, replace(settings.generation))
            resumed = None if created else resumed_or_new
        elif resumed is None:
            resumed_or_new = store.create_session(spec, settings.system_prompt,
                                                  replace(settings.generation), title=new_title)
        else:
            resumed_or_new = resumed
    except BaseException:
        store.close()
        raise
    build = partial(Conversation, settings=settings, store=store, engine=engine,
                    model_spec=spec, keep_snapshots=keep_snapshots, lock_wait_s=lock_wait_s,
                    lock_holder=lock_holder, tool_host=tool_host,
                    # /model later reports its import or download the same way.
                    load_model=lambda s: load_model(s, progress=progress))
    try:
        try:
            conv = build(session=resumed_or_new)
        except SessionBusy as exc:
            if lookup == "exact":
                raise
            notices.append((f"{exc} Started a new session instead.", "warning"))
            resumed, conv = None, build(session=None)
    except BaseException:
        engine.close()
        store.close()
        raise
    if conv.session.system_prompt and not loaded.info.system_role:
        notices.append((NO_SYSTEM_ROLE[0].upper() + NO_SYSTEM_ROLE[1:] + ".", "info"))
    if resumed is not None:
        if resumed.model != spec and resumed.id is not None:
            conv.session = store.update_model(resumed.id, spec)
        conv.cache.restore()
        text = (f"Resumed #{resumed.id} “{resumed.title}” ({len(conv.messages):,} messages; "
                f"{conv.cache.words()}).")
        notices.append((text, "info"))
        if conv.messages and conv.messages[-1].role == "tool":
            notices.append(("The last tool results were stored but not answered (the app "
                            "stopped mid-loop); /retry lets the model read them.", "info"))
    notice = conv.speculation.resume()
    if notice:
        notices.append((notice + ".", "warning"))
    return Opened(conv, store, engine, notices, resumed=resumed is not None)


@contextmanager
def log_to_file() -> Iterator[None]:
    """While a UI owns the terminal, log records go to a file, not stderr."""
    from mlxchat import paths

    root = logging.getLogger()
    streams = [h for h in root.handlers if type(h) is logging.StreamHandler]
    handler: logging.Handler | None = None
    try:
        folder = paths.ensure_private_dir(paths.cache_dir())
        handler = logging.FileHandler(folder / "mlxchat.log", encoding="utf-8")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    except OSError:
        handler = logging.NullHandler()
    for h in streams:
        root.removeHandler(h)
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)
        handler.close()
        for h in streams:
            root.addHandler(h)
