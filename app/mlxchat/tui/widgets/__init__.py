"""Widgets that render plain data; each is tested alone in a small host App."""

from mlxchat.tui.widgets.folded import ThinkingBlock
from mlxchat.tui.widgets.gauges import GaugesPanel
from mlxchat.tui.widgets.meter import Meter
from mlxchat.tui.widgets.prompt import CompletionList, PromptInput
from mlxchat.tui.widgets.reply import AssistantMessage, ReplyHandle
from mlxchat.tui.widgets.transcript import (
    NoticeMessage,
    SystemMessage,
    Transcript,
    UserMessage,
)

__all__ = [
    "AssistantMessage",
    "CompletionList",
    "GaugesPanel",
    "Meter",
    "NoticeMessage",
    "PromptInput",
    "ReplyHandle",
    "SystemMessage",
    "ThinkingBlock",
    "Transcript",
    "UserMessage",
]
