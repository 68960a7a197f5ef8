"""What the app shows of a failure: one line for the user, never a traceback."""

from __future__ import annotations

import logging

from mlxchat.errors import user_message

log = logging.getLogger(__name__)


def error_text(exc: BaseException) -> str:
    """One line for the user; a bug is logged with its traceback, never shown."""
    text = user_message(exc)
    if text is None:
        log.error("unexpected error", exc_info=exc)
        text = f"Unexpected error: {type(exc).__name__}: {exc}. Details are in the log."
    return text
