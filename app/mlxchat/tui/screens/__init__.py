"""Modal screens; each takes its data and actions as arguments (no app globals)."""

from mlxchat.tui.screens.confirm import ConfirmScreen
from mlxchat.tui.screens.help import HelpScreen
from mlxchat.tui.screens.model_picker import ModelPickerScreen
from mlxchat.tui.screens.sessions import SessionsScreen
from mlxchat.tui.screens.tool_consent import ToolConsentScreen

__all__ = ["ConfirmScreen", "HelpScreen", "ModelPickerScreen", "SessionsScreen",
           "ToolConsentScreen"]
