"""The package's import graph has no cycles and never imports up a layer.

Every module of app/mlxchat is parsed with `ast`: all its imports count, those
inside functions and under `if TYPE_CHECKING:` too. Layers, bottom to top, by
folder:

    ground    mlxchat.errors, paths, files, chat, record, generation, turn_stats, config,
              units, sources, blas, open_files, clipboard, mlxchat/__init__
    core      mlxchat/engine/, mlxchat/store/, mlxchat/models/, mlxchat/docs/,
              mlxchat/tools/
              (peers: engine may import models, docs may import store; store and
              models import neither)
    session   mlxchat/session/ (the conversation layer and its composition root)
    commands  mlxchat/commands/, mlxchat/server/ (the HTTP API, beside the commands)
    tui, cli  mlxchat/tui/, mlxchat/cli/, mlxchat.__main__

A module imports only its own layer or those below; errors imports nothing of
the project. Inside the engine the same holds between its floors, bottom to top
(``ENGINE_FLOORS``): a subpackage (or root module) imports only its own floor
or those below. `from pkg import sub`, where sub is a submodule, is an import of
pkg.sub only (so a package's __init__ re-exporting its submodules, and those
submodules doing `from pkg import kv`, is no cycle). `import pkg.sub` is an
import of pkg.sub; the parents Python also runs are not edges.

The server is one package per wire protocol over a shared core
(``server_violations``): a protocol package (``mlxchat/server/<protocol>/``)
imports ``server.core`` and the layers below, never another protocol nor the
host modules at the server's root (app, beside, runner, ...); ``server.core``
imports no protocol and nothing of the host.

Inside models/ (``MODELS_PARTS``): gguf/ and vision/ import the root's modules
and their own, never each other; the root imports both; testing/ (tiny random
models for tests and benchmarks) may import any of models/, and no module of
the app outside it imports it.
"""

from __future__ import annotations

import ast
from fnmatch import fnmatchcase
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[2] / "app" / "mlxchat"

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("ground", ("mlxchat.errors", "mlxchat.paths", "mlxchat.files", "mlxchat.chat",
                "mlxchat.record", "mlxchat.generation", "mlxchat.turn_stats",
                "mlxchat.config", "mlxchat.__init__", "mlxchat.units", "mlxchat.sources",
                "mlxchat.clipboard", "mlxchat.open_files", "mlxchat.blas", "mlxchat.table_fit",
                "mlxchat.native.*")),
    ("core", ("mlxchat.engine.*", "mlxchat.store.*", "mlxchat.models.*", "mlxchat.docs.*",
              "mlxchat.tools.*")),
    ("session", ("mlxchat.session.*",)),
    ("commands", ("mlxchat.commands.*", "mlxchat.server.*")),
    ("tui", ("mlxchat.tui.*",)),
    ("cli", ("mlxchat.cli.*", "mlxchat.__main__")),
]
# Within the core layer, the only import between different packages allowed.
PEER_IMPORTS = {("mlxchat.engine", "mlxchat.models"), ("mlxchat.docs", "mlxchat.store")}
IMPORTS_NOTHING = {"mlxchat.errors"}
# The engine's floors, bottom to top: each a subpackage of engine/ or a module at its root.
ENGINE_FLOORS = ["events", "thread", "prompt", "kv", "results", "disk", "speculative", "batch", "turn",
                 "core", "distributed", "interface", "__init__"]
# models/ by concept: each part (a subpackage, or "" for the root's modules) and
# the parts it may import. Nothing outside testing/ imports testing/.
MODELS_PARTS = {"": {"", "gguf", "vision"}, "gguf": {"", "gguf"}, "vision": {"", "vision"},
                "testing": {"", "gguf", "vision", "testing"}}


# -- the checker ---------------------------------------------------------------

def find_modules(root: Path) -> dict[str, Path]:
    """Module name -> file, for every .py under the package folder `root`.
    A package's __init__ keeps its name: `mlxchat.engine.__init__`."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        modules[".".join((root.name, *parts))] = path
    return modules


def _package_of(module: str) -> str:
    """The package a module's relative imports start from."""
    return module.rsplit(".", 1)[0]  # "a.b.c" -> "a.b"; "a.b.__init__" -> "a.b"


def _as_module(name: str, modules: dict[str, Path]) -> str | None:
    """The project module a dotted import name means (a package means its __init__)."""
    if name in modules:
        return name
    if f"{name}.__init__" in modules:
        return f"{name}.__init__"
    return None


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, int]]:
    """(imported project module, line) for every import in the file, at any depth."""
    project = module.split(".")[0]
    found: list[tuple[str, int]] = []

    def add(name: str, line: int) -> None:
        if name.split(".")[0] != project:
            return
        target = _as_module(name, modules)
        # An unknown name (a typo, a module being moved) still counts, as its package.
        while target is None and "." in name:
            name = name.rsplit(".", 1)[0]
            target = _as_module(name, modules)
        if target is not None:
            found.append((target, line))

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package_of(module).split(".")
                base = base[:len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                add(sub if _as_module(sub, modules) else source, node.lineno)
        elif (isinstance(node, ast.Call) and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"):
            add(node.args[0].value, node.lineno)
    return found


def build_graph(root: Path) -> dict[str, dict[str, int]]:
    """module -> {imported module: first line}, project modules only."""
    modules = find_modules(root)
    graph: dict[str, dict[str, int]] = {}
    for module, path in modules.items():
        edges: dict[str, int] = {}
        for target, line in imports_of(module, path, modules):
            if target != module:
                edges.setdefault(target, line)
        graph[module] = edges
    return graph


def find_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle path (first module repeated at the end) per strongly connected
    group of modules (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_cycle_path(graph, group) for group in sorted(groups)]


def _cycle_path(graph: dict[str, dict[str, int]], group: list[str]) -> list[str]:
    """A shortest cycle through the group's first module (breadth-first)."""
    start, members = group[0], set(group)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v]):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if w in members and w not in came_from:
                    came_from[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no cycle through {start}")  # pragma: no cover


def layer_of(module: str) -> int | None:
    for rank, (_, patterns) in enumerate(LAYERS):
        if any(fnmatchcase(module, p) for p in patterns):
            return rank
    return None


def _package(module: str) -> str:
    return ".".join(module.split(".")[:2])


def layer_violations(graph: dict[str, dict[str, int]]) -> list[str]:
    problems = []
    for module in sorted(graph):
        if layer_of(module) is None:
            problems.append(f"{module}: in no layer (add it to LAYERS)")
    for module in sorted(graph):
        here = layer_of(module)
        for target, line in sorted(graph[module].items()):
            there = layer_of(target)
            where = f"{module} -> {target} (line {line})"
            if here is None or there is None:
                continue
            if there > here:
                problems.append(f"{where}: up a layer, {LAYERS[here][0]} imports "
                                f"{LAYERS[there][0]}")
            elif module in IMPORTS_NOTHING:
                problems.append(f"{where}: {module} imports nothing of the project")
            elif (there == here and LAYERS[here][0] == "core"
                  and _package(module) != _package(target)
                  and (_package(module), _package(target)) not in PEER_IMPORTS):
                problems.append(f"{where}: {_package(module)} may not import "
                                f"{_package(target)}")
    return problems


def engine_floor(module: str) -> int | None:
    """The floor of an engine module (None: not in the engine, or on no floor)."""
    parts = module.split(".")
    if parts[:2] != ["mlxchat", "engine"] or len(parts) < 3:
        return None
    return ENGINE_FLOORS.index(parts[2]) if parts[2] in ENGINE_FLOORS else None


def engine_violations(graph: dict[str, dict[str, int]]) -> list[str]:
    problems = []
    for module in sorted(graph):
        if module.startswith("mlxchat.engine.") and engine_floor(module) is None:
            problems.append(f"{module}: on no engine floor (add it to ENGINE_FLOORS)")
    for module in sorted(graph):
        here = engine_floor(module)
        for target, line in sorted(graph[module].items()):
            there = engine_floor(target)
            if here is not None and there is not None and there > here:
                problems.append(f"{module} -> {target} (line {line}): up an engine floor, "
                                f"{ENGINE_FLOORS[here]} imports {ENGINE_FLOORS[there]}")
    return problems


def models_part(module: str) -> str | None:
    """The part of models/ a module is in ("" for the root's modules; None:
    not in models/); a subpackage the table does not name is its own part."""
    parts = module.split(".")
    if parts[:2] != ["mlxchat", "models"] or len(parts) < 3:
        return None
    return parts[2] if len(parts) > 3 else ""


def models_violations(graph: dict[str, dict[str, int]]) -> list[str]:
    problems = []
    for module in sorted(graph):
        part = models_part(module)
        if part is not None and part not in MODELS_PARTS:
            problems.append(f"{module}: in no part of models/ (add {part} to MODELS_PARTS)")
    for module in sorted(graph):
        here = models_part(module)
        for target, line in sorted(graph[module].items()):
            there = models_part(target)
            where = f"{module} -> {target} (line {line})"
            if there == "testing" and here != "testing":
                problems.append(f"{where}: only tests and benchmarks import models.testing")
            elif (here in MODELS_PARTS and there is not None
                  and there not in MODELS_PARTS[here]):
                problems.append(f"{where}: models.{here or '(root)'} may not import "
                                f"models.{there or '(root)'}")
    return problems


def server_part(module: str) -> str | None:
    """"core", a protocol's name, or "host" (a module at the server's root);
    None outside the server."""
    parts = module.split(".")
    if parts[:2] != ["mlxchat", "server"] or len(parts) < 3:
        return None
    return "host" if len(parts) == 3 else parts[2]


def server_violations(graph: dict[str, dict[str, int]]) -> list[str]:
    problems = []
    for module in sorted(graph):
        here = server_part(module)
        if here is None or here == "host":
            continue
        for target, line in sorted(graph[module].items()):
            there = server_part(target)
            if there is None or there == here or (there == "core" and here != "core"):
                continue
            what = "the host" if there == "host" else f"server.{there}"
            problems.append(f"{module} -> {target} (line {line}): server.{here} may not "
                            f"import {what}")
    return problems


def check(root: Path) -> list[str]:
    """Every problem of the package at `root`: cycles, then layer violations,
    then the engine's floors, then the server's protocols, then the parts of
    models/."""
    graph = build_graph(root)
    cycles = [f"cycle: {' -> '.join(path)}" for path in find_cycles(graph)]
    return (cycles + layer_violations(graph) + engine_violations(graph)
            + server_violations(graph) + models_violations(graph))


# -- the tests -----------------------------------------------------------------

def test_the_package_imports_down_the_layers_without_cycles():
    assert PACKAGE_ROOT.joinpath("__init__.py").is_file(), PACKAGE_ROOT
    problems = check(PACKAGE_ROOT)
    assert not problems, "\n" + "\n".join(problems)


def _write(root: Path, files: dict[str, str]) -> Path:
    pkg = root / "mlxchat"
    for name, text in files.items():
        path = pkg / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return pkg


def test_the_checker_reports_a_cycle_and_an_upward_import(tmp_path):
    pkg = _write(tmp_path, {"__init__.py": "", "errors.py": "import mlxchat.cli.main\n",
                            "cli/main.py": "from mlxchat.errors import UserError\n"})
    assert check(pkg) == [
        "cycle: mlxchat.cli.main -> mlxchat.errors -> mlxchat.cli.main",
        "mlxchat.errors -> mlxchat.cli.main (line 1): up a layer, ground imports cli",
    ]
    pkg.joinpath("errors.py").write_text("from mlxchat import paths\n")
    pkg.joinpath("paths.py").write_text("")
    assert check(pkg) == ["mlxchat.errors -> mlxchat.paths (line 1): "
                          "mlxchat.errors imports nothing of the project"]


def test_the_checker_sees_every_kind_of_import(tmp_path):
    pkg = _write(tmp_path, {
        "__init__.py": "",
        "chat.py": "def later():\n    from .tui import app\n",
        "paths.py": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                     "    from mlxchat.store.base import Store\n"),
        "store/__init__.py": "from .base import Store\nfrom . import search\n",
        "store/base.py": "from mlxchat.store import search\n",  # a submodule: no cycle
        "store/search.py": "from ..engine import core\n",
        "engine/__init__.py": "from mlxchat.engine.core import run\n",
        "engine/core.py": ("import importlib\nfrom mlxchat.models import info\n"
                           "def run():\n    importlib.import_module('mlxchat.commands')\n"),
        "models/__init__.py": "",
        "models/info.py": "from mlxchat.engine import run\n",  # a name from __init__
        "commands/__init__.py": "",
        "tui/__init__.py": "",
        "tui/app.py": "import mlxchat.commands\n",
    })
    graph = build_graph(pkg)
    assert graph["mlxchat.chat"] == {"mlxchat.tui.app": 2}
    assert graph["mlxchat.paths"] == {"mlxchat.store.base": 3}
    assert graph["mlxchat.store.__init__"] == {"mlxchat.store.base": 1, "mlxchat.store.search": 2}
    assert graph["mlxchat.store.base"] == {"mlxchat.store.search": 1}
    assert graph["mlxchat.store.search"] == {"mlxchat.engine.core": 1}
    assert graph["mlxchat.engine.core"] == {"mlxchat.models.info": 2,
                                            "mlxchat.commands.__init__": 4}
    assert graph["mlxchat.tui.app"] == {"mlxchat.commands.__init__": 1}
    assert check(pkg) == [
        "cycle: mlxchat.engine.__init__ -> mlxchat.engine.core -> mlxchat.models.info"
        " -> mlxchat.engine.__init__",
        "mlxchat.chat -> mlxchat.tui.app (line 2): up a layer, ground imports tui",
        "mlxchat.engine.core -> mlxchat.commands.__init__ (line 4): up a layer, "
        "core imports commands",
        "mlxchat.models.info -> mlxchat.engine.__init__ (line 1): mlxchat.models may not "
        "import mlxchat.engine",
        "mlxchat.paths -> mlxchat.store.base (line 3): up a layer, ground imports core",
        "mlxchat.store.search -> mlxchat.engine.core (line 1): mlxchat.store may not "
        "import mlxchat.engine",
    ]


def test_a_module_in_no_layer_is_reported(tmp_path):
    # A conversation-layer module left beside the ground modules is in no layer:
    # the layer is the session/ folder.
    pkg = _write(tmp_path, {"__init__.py": "", "helpers.py": "", "app_root.py": "",
                            "session/__init__.py": "", "session/root.py": ""})
    assert check(pkg) == ["mlxchat.app_root: in no layer (add it to LAYERS)",
                          "mlxchat.helpers: in no layer (add it to LAYERS)"]


def test_the_checker_holds_the_engine_floors(tmp_path):
    pkg = _write(tmp_path, {"__init__.py": "", "engine/__init__.py": "",
                            "engine/events.py": "", "engine/core.py": "",
                            "engine/kv/__init__.py": "", "engine/kv/live.py": "",
                            "engine/turn/__init__.py": "",
                            "engine/turn/pipeline.py": "from mlxchat.engine.kv import live\n",
                            "engine/disk/__init__.py": "",
                            "engine/disk/segments.py":
                                "from mlxchat.engine.turn import pipeline\n",
                            "engine/helpers.py": "from mlxchat.engine import events\n"})
    assert check(pkg) == [
        "mlxchat.engine.helpers: on no engine floor (add it to ENGINE_FLOORS)",
        "mlxchat.engine.disk.segments -> mlxchat.engine.turn.pipeline (line 1): up an "
        "engine floor, disk imports turn",
    ]


def test_the_checker_holds_the_parts_of_models(tmp_path):
    pkg = _write(tmp_path, {"__init__.py": "", "models/__init__.py": "",
                            "models/errors.py": "",
                            "models/loader.py": "from mlxchat.models.vision import load\n",
                            "models/gguf/__init__.py": "",
                            "models/gguf/header.py": "from mlxchat.models import errors\n",
                            "models/gguf/vocab.py": "from mlxchat.models.vision import images\n",
                            "models/vision/__init__.py": "",
                            "models/vision/images.py": "", "models/vision/load.py": "",
                            "models/testing/__init__.py": "",
                            "models/testing/text.py": "from mlxchat.models.gguf import header\n",
                            "models/helpers/__init__.py": "",
                            "engine/__init__.py": "",
                            "engine/core.py": "from mlxchat.models.testing import text\n",
                            "engine/events.py": ""})
    assert check(pkg) == [
        "mlxchat.models.helpers.__init__: in no part of models/ (add helpers to MODELS_PARTS)",
        "mlxchat.engine.core -> mlxchat.models.testing.text (line 1): only tests and "
        "benchmarks import models.testing",
        "mlxchat.models.gguf.vocab -> mlxchat.models.vision.images (line 1): "
        "models.gguf may not import models.vision",
    ]

def test_the_checker_keeps_the_protocols_apart(tmp_path):
    pkg = _write(tmp_path, {"__init__.py": "", "server/__init__.py": "",
                            "server/app.py": "from mlxchat.server.openai import chat\n",
                            "server/options.py": "",
                            "server/core/__init__.py": "",
                            "server/core/service.py": "from mlxchat.server import options\n",
                            "server/core/errors.py": "from mlxchat.server.ollama import chat\n",
                            "server/openai/__init__.py": "",
                            "server/openai/chat.py": (
                                "from mlxchat.server.core import service\n"
                                "from mlxchat.server.anthropic import shape\n"),
                            "server/anthropic/__init__.py": "",
                            "server/anthropic/shape.py": "from mlxchat.server import app\n",
                            "server/ollama/__init__.py": "", "server/ollama/chat.py": ""})
    assert check(pkg) == [
        "cycle: mlxchat.server.anthropic.shape -> mlxchat.server.app -> "
        "mlxchat.server.openai.chat -> mlxchat.server.anthropic.shape",
        "mlxchat.server.anthropic.shape -> mlxchat.server.app (line 1): server.anthropic "
        "may not import the host",
        "mlxchat.server.core.errors -> mlxchat.server.ollama.chat (line 1): server.core "
        "may not import server.ollama",
        "mlxchat.server.core.service -> mlxchat.server.options (line 1): server.core "
        "may not import the host",
        "mlxchat.server.openai.chat -> mlxchat.server.anthropic.shape (line 2): "
        "server.openai may not import server.anthropic",
    ]
