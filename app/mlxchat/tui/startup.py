"""What the app does before it can chat: open the store, find the session to
resume, load its model, start the engine. No Textual here; the app runs this
in a thread and shows ``progress`` (stage, done, total) as it arrives.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

from mlxchat.chat import Session, TurnStats
from mlxchat.config import Settings

if TYPE_CHECKING:
    from mlxchat.conversation import Conversation
    from mlxchat.engine import ChatEngine
    from mlxchat.models.info import LoadedModel
    from mlxchat.store import SessionStore

log = logging.getLogger(__name__)

Progress = Callable[[str, int, int], None]
"""``progress(stage, done, total)``, from the loading thread (see ``load_model``)."""
NoticeLevel = Literal["info", "warning", "error"]

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
    notices: list[tuple[str, NoticeLevel]] = field(default_factory=list)


class ConversationFactory(Protocol):
    def __call__(self, settings: Settings, *, model_spec: str | None, session: str | None,
                 continue_last: bool, progress: Progress | None) -> Opened: ...


def _default_store() -> SessionStore:
    from mlxchat.store import open_store

    return open_store()


def _default_loader(spec: str, progress: Progress | None = None) -> LoadedModel:
    from mlxchat.models import load_model

    return load_model(spec, progress=progress)


def _default_engine(loaded: LoadedModel) -> ChatEngine:
    from mlxchat.engine import ChatEngine

    return ChatEngine(loaded)


def _find_session(store: SessionStore, ref: str | None, continue_last: bool,
                  notices: list[tuple[str, NoticeLevel]]) -> Session | None:
    from mlxchat.store import StoreError

    if ref:
        try:
            return store.find_session(ref)
        except StoreError as exc:
            notices.append((f"{exc} Started a new session instead.", "warning"))
            return None
    if continue_last:
        found = store.most_recent_session()
        if found is None:
            notices.append(("No saved session to continue; this is a new one.", "info"))
        return found
    return None


def snapshot_words(conv: Conversation) -> str:
    snap = conv.last_snapshot
    if snap is None:
        return "no KV snapshot: the next turn prefills the history"
    if snap.ok:
        return f"KV cache restored from its snapshot ({snap.tokens:,} tokens)"
    return f"KV snapshot not used ({snap.reason}); the next turn recomputes the history"


def open_conversation(settings: Settings, *, model_spec: str | None = None,
                      session: str | None = None, continue_last: bool = False,
                      progress: Progress | None = None,
                      store_factory: Callable[[], SessionStore] = _default_store,
                      load_model: Callable[..., LoadedModel] = _default_loader,
                      engine_factory: Callable[[LoadedModel], ChatEngine] = _default_engine,
                      ) -> Opened:
    """Open the store, pick the session (``session`` id/title, or the most recent
    one with ``continue_last``), load the model once (``model_spec``, else the
    session's, else the settings'), and restore the session's KV snapshot.

    Tests pass their own store, loader and engine; the logic is the same.
    """
    from mlxchat.conversation import Conversation

    notices: list[tuple[str, NoticeLevel]] = []
    store = store_factory()
    try:
        resumed = _find_session(store, session, continue_last, notices)
        spec = model_spec or (resumed.model if resumed else None) or settings.model
        loaded = load_model(spec, progress=progress)
        engine = engine_factory(loaded)
    except BaseException:
        store.close()
        raise
    conv = Conversation(settings=settings, store=store, engine=engine, model_spec=spec,
                        # /model later reports its import or download the same way.
                        load_model=lambda s: load_model(s, progress=progress), session=resumed)
    if resumed is not None:
        if resumed.model != spec and resumed.id is not None:
            conv.session = store.update_model(resumed.id, spec)
        conv.restore_snapshot()
        n = len(conv.messages)
        text = (f"Resumed #{resumed.id} “{resumed.title}” ({n:,} messages; "
                f"{snapshot_words(conv)}).")
        notices.append((text, "info"))
    return Opened(conv, notices)


def discard_if_empty(conv: Conversation) -> bool:
    """Delete the open session when nothing was ever written to it, so quitting
    an unused window leaves no 'New chat' behind (and --continue skips it)."""
    session_id = conv.session.id
    if session_id is None:
        return False
    try:
        if conv.store.all_messages(session_id):
            return False
        for path in conv.store.delete_session(session_id):
            path.unlink(missing_ok=True)
    except Exception as exc:  # noqa: BLE001 - cleanup on exit must not fail the exit
        log.warning("empty session #%s not removed: %s", session_id, exc)
        return False
    return True


def branch_stats(conv: Conversation) -> TurnStats | None:
    """The live turn's stats, else those stored with the branch's last reply."""
    if conv.last_stats is not None:
        return conv.last_stats
    return next((m.stats for m in reversed(conv.messages)
                 if m.role == "assistant" and m.stats is not None), None)


def close_conversation(conv: Conversation) -> None:
    """On exit: stop any turn, drop an unused session, stop the engine, close the store."""
    conv.cancel()
    discard_if_empty(conv)
    conv.close()
    conv.store.close()


@contextmanager
def log_to_file() -> Iterator[None]:
    """While the UI owns the terminal, log records go to a file, not stderr."""
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
