"""The engine, store, commands and chat modules never import Textual."""

import subprocess
import sys

import pytest


@pytest.mark.parametrize("module", ["mlxchat.chat", "mlxchat.engine", "mlxchat.store",
                                    "mlxchat.commands", "mlxchat.models", "mlxchat.conversation"])
def test_core_modules_leave_textual_out(module):
    code = (f"import importlib, sys; importlib.import_module({module!r}); "
            "sys.exit(1 if 'textual' in sys.modules else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr or f"{module} imported textual"
