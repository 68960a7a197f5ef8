"""No module outside the UI imports Textual; the store and the command registry
also keep MLX out.

Every module of app/mlxchat is imported as in a fresh interpreter (see
import_probe.py), except the UI:
mlxchat.tui.* (but for its start-up and streaming helpers, which the UI runs
outside Textual), the command line mlxchat.cli.* and mlxchat.__main__ (which runs
the app when imported).
"""

from __future__ import annotations

import json
import subprocess
import sys
from fnmatch import fnmatchcase
from pathlib import Path

import pytest

PACKAGE_ROOT = Path(__file__).resolve().parents[2] / "app" / "mlxchat"
PROBE = Path(__file__).with_name("import_probe.py")
UI = ("mlxchat.tui", "mlxchat.tui.*", "mlxchat.cli", "mlxchat.cli.*", "mlxchat.__main__")
UI_FREE = ("mlxchat.tui.streaming",)
# Beyond Textual: the store never needs MLX or numpy, and building the command
# registry never needs MLX (the engine loads it when a model is used); nor do the
# engine's event types (ChatEngine is imported on first use).
ALSO_BANNED = {"mlxchat.store*": ("mlx", "mlx_lm", "numpy"), "mlxchat.commands*": ("mlx.core",),
               "mlxchat.engine": ("mlx", "mlx_lm"), "mlxchat.engine.events": ("mlx", "mlx_lm")}
EXERCISE = {"mlxchat.commands": "module.default_registry()",
            "mlxchat.engine.events":
                "from mlxchat.engine.events import EngineState, Event, TextDelta, TurnDone"}


def non_ui_modules() -> list[str]:
    names = []
    for path in sorted(PACKAGE_ROOT.rglob("*.py")):
        parts = path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if name in UI_FREE or not any(fnmatchcase(name, p) for p in UI):
            names.append(name)
    return names


def test_the_module_list_is_the_whole_package_but_the_ui():
    modules = non_ui_modules()
    assert {"mlxchat", "mlxchat.errors", "mlxchat.chat", "mlxchat.config", "mlxchat.session",
            "mlxchat.engine", "mlxchat.engine.core", "mlxchat.store", "mlxchat.store.export",
            "mlxchat.commands", "mlxchat.commands.registry", "mlxchat.models",
            "mlxchat.server.app", "mlxchat.server.core.lane",
            "mlxchat.tui.streaming"} <= set(modules)
    ui = ("mlxchat.cli", "mlxchat.__main__", "mlxchat.tui.widgets", "mlxchat.tui.app")
    assert not any(m == u or m.startswith(u + ".") for m in modules for u in ui)


def banned_for(module: str) -> tuple[str, ...]:
    return ("textual", *(b for pattern, names in ALSO_BANNED.items()
                         if fnmatchcase(module, pattern) for b in names))


@pytest.fixture(scope="module")
def probed() -> dict[str, dict]:
    """Every module's import, probed in one process (tests/unit/import_probe.py:
    each module imported as in a fresh interpreter, the heavy packages shared)."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for module in non_ui_modules():
        groups.setdefault(banned_for(module), []).append(module)
    spec = json.dumps({"groups": [
        {"modules": modules, "banned": banned,
         "exercise": {m: EXERCISE[m] for m in modules if m in EXERCISE}}
        for banned, modules in groups.items()]})
    proc = subprocess.run([sys.executable, str(PROBE), spec], capture_output=True, text=True,
                          check=False, stdin=subprocess.DEVNULL, timeout=300)
    assert proc.returncode == 0, proc.stderr
    results = {}
    for line in proc.stdout.splitlines():
        result = json.loads(line)
        results[result["module"]] = result
    return results


@pytest.mark.parametrize("module", non_ui_modules())
def test_non_ui_modules_leave_textual_out(module, probed):
    result = probed[module]
    assert result["error"] is None, result["error"]
    assert result["found"] == [], f"{module} imported {' '.join(result['found'])}"


def test_the_engine_package_and_its_events_import_no_mlx():
    code = ("import sys\nimport mlxchat.engine\nfrom mlxchat.engine.events import TextDelta\n"
            "before = 'mlx.core' in sys.modules\n"
            "from mlxchat.engine.core import ChatEngine\n"
            "print(before, 'mlx.core' in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False, stdin=subprocess.DEVNULL, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "True"]
