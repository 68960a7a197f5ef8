"""The command line: `mlxchat` (the app), `ask`, `sessions`, `models`, `import`."""

from mlxchat.cli.main import main

__all__ = ["main"]
