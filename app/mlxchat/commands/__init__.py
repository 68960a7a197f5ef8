"""Slash commands: a registry that parses, completes and runs them against a
context (the Conversation plus what the UI or CLI provides). No UI imports.

A UI runs a line with ``registry.run(line, ctx)`` (off its event loop: a model
switch can take a while), renders the CommandResult generically, then acts on
its action fields: consume ``turn`` like ``conv.turns.send``, ask
``confirm.question`` and render ``confirm.accept()`` on yes, open
``open_screen``, reload on ``session_changed``, exit on ``quit``.
"""

from mlxchat.commands.base import (
    Args,
    Command,
    CommandContext,
    CommandError,
    CommandResult,
    Completion,
    Confirmation,
)
from mlxchat.commands.registry import Registry


def default_registry() -> Registry:
    """Every built-in command, /help included."""
    from mlxchat.commands import (
        compaction,
        docs,
        figures,
        images,
        models,
        pins,
        sessions,
        speculation,
        tools,
        tuning,
        turns,
    )

    return Registry([*sessions.COMMANDS, *turns.COMMANDS, *tuning.COMMANDS, *models.COMMANDS,
                     *figures.COMMANDS, *speculation.COMMANDS, *pins.COMMANDS, *docs.COMMANDS,
                     *tools.COMMANDS, *images.COMMANDS, *compaction.COMMANDS])


__all__ = ["Args", "Command", "CommandContext", "CommandError", "CommandResult", "Completion",
           "Confirmation", "Registry", "default_registry"]
