"""The house rules, measured: what keeps the package easy to find one's way in.

Run as a script (``python tests/unit/test_house.py``) it prints each figure;
as tests, each rule fails with the places that break it:

- ``engine/`` keeps at its root only its face (``__init__``, ``interface``,
  ``events``, ``results``, ``core``); the rest lives in subpackages by concept;
- ``Conversation`` forwards nothing (no method whose whole body hands its
  arguments on to one of its parts) and stays within 250 lines;
- no class has more than one base class of the project (no mixins);
- no module hands on a name it imported (re-export shims) except package faces
  (``__init__.py``), and no module renames an imported class (``A = B``);
- no class name is defined in two modules;
- a name is imported by one path from outside its package: the package's face
  when the face hands it on, else the module that defines it (a module inside
  the package whose face hands it on takes it from the module that defines it:
  ``models.resolve`` from ``models.gguf.importer``, where others take
  ``bundled_gguf`` from ``models``);
- outside the session layer nobody reaches a conversation's store or engine
  (``conv.store``, ``ctx.conversation.engine``): they ask its parts;
- no module is over 400 lines;
- only the cache-layer table (``engine/kv/layers.py``) asks what class an
  mlx-lm cache layer is (``isinstance``, ``type(c) is``, a class's name
  compared): everything else asks the layer's row.

The import order inside ``engine/`` (and between layers) is
``test_import_graph.py``'s.
"""

from __future__ import annotations

import ast
import importlib.util
from collections import defaultdict
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[2] / "app" / "mlxchat"
ENGINE_ROOT_FILES = {"__init__.py", "interface.py", "events.py", "results.py", "core.py"}
CONVERSATION = PACKAGE_ROOT / "session" / "conversation.py"
CONVERSATION_MAX_LINES = 250
MODULE_MAX_LINES = 400
CACHE_TABLE = PACKAGE_ROOT / "engine" / "kv" / "layers.py"


def _modules(root: Path) -> dict[Path, ast.Module]:
    return {p: ast.parse(p.read_text(encoding="utf-8"), str(p))
            for p in sorted(root.rglob("*.py"))}


def _rel(path: Path) -> str:
    return str(path.relative_to(PACKAGE_ROOT.parent))


# -- the figures -------------------------------------------------------------------

def engine_root_extras(root: Path = PACKAGE_ROOT) -> list[str]:
    """Modules at engine/'s root beyond its face."""
    return sorted(p.name for p in (root / "engine").glob("*.py")
                  if p.name not in ENGINE_ROOT_FILES)


def _attribute_chain(node: ast.AST) -> list[str] | None:
    """['self', 'a', 'b'] for ``self.a.b``; None for anything else."""
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(names)]
    return None


def _passes_through(call: ast.Call, params: list[str]) -> bool:
    args = [a.id for a in call.args if isinstance(a, ast.Name)]
    kwargs = [k.value.id for k in call.keywords if isinstance(k.value, ast.Name)]
    plain = len(args) == len(call.args) and len(kwargs) == len(call.keywords)
    return plain and set(args + kwargs) <= set(params)


def forwarding_methods(tree: ast.Module, class_name: str) -> list[str]:
    """Methods of ``class_name`` whose body (past a docstring) only hands its
    parameters on to an attribute of one of its parts: ``return self._x.y(a)``,
    ``self._x.y(a)`` or, for a property, ``return self._x.y``."""
    found = []
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name):
        for fn in (n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            body = fn.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                body = body[1:]
            if len(body) != 1 or not isinstance(body[0], (ast.Return, ast.Expr)):
                continue
            value = body[0].value
            params = [a.arg for a in fn.args.args[1:] + fn.args.kwonlyargs]
            target = value.func if isinstance(value, ast.Call) else value
            chain = _attribute_chain(target) if target is not None else None
            if chain is None or chain[0] != "self" or len(chain) < 3:
                continue
            if isinstance(value, ast.Call) and not _passes_through(value, params):
                continue
            found.append(f"{class_name}.{fn.name}")
    return found


def mixin_classes(trees: dict[Path, ast.Module]) -> list[str]:
    """Classes with more than one base class defined in the project."""
    defined = {n.name for t in trees.values() for n in ast.walk(t) if isinstance(n, ast.ClassDef)}
    found = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                own = [b for b in node.bases
                       if (_attribute_chain(b) or [""])[-1] in defined]
                if len(own) > 1:
                    found.append(f"{_rel(path)}: {node.name}")
    return found


def _imported_names(tree: ast.Module) -> dict[str, int]:
    names = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            for alias in node.names:
                names[alias.asname or alias.name] = node.lineno
    return names


def _listed_in_all(tree: ast.Module) -> set[str]:
    for node in tree.body:
        if (isinstance(node, ast.Assign) and isinstance(node.value, (ast.List, ast.Tuple))
                and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)):
            return {e.value for e in node.value.elts if isinstance(e, ast.Constant)}
    return set()


def reexports(trees: dict[Path, ast.Module]) -> list[str]:
    """Names a module imports at its top and hands on (in ``__all__``, used
    there or not) or never uses at all, and ``A = B`` renames of an imported
    class; package faces (``__init__.py``) may hand on their public API."""
    found = []
    for path, tree in trees.items():
        if path.name == "__init__.py":
            continue
        imported = _imported_names(tree)
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        listed = _listed_in_all(tree)
        for name, line in imported.items():
            if name not in used or name in listed:
                found.append(f"{_rel(path)}:{line}: {name}")
        for node in tree.body:
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Name)
                    and node.value.id in imported and node.value.id[:1].isupper()):
                target = node.targets[0]
                name = target.id if isinstance(target, ast.Name) else "?"
                found.append(f"{_rel(path)}:{node.lineno}: {name} = {node.value.id}")
    return found


def classes_defined_twice(trees: dict[Path, ast.Module]) -> list[str]:
    where: dict[str, list[str]] = defaultdict(list)
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                where[node.name].append(_rel(path))
    return sorted(f"{name}: {', '.join(paths)}" for name, paths in where.items()
                  if len(set(paths)) > 1)


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _top_level(tree: ast.Module) -> list[ast.stmt]:
    """Statements at the top, those under a top-level ``if`` or ``try`` too."""
    out: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, (ast.If, ast.Try)):
            out += node.body + node.orelse
        else:
            out.append(node)
    return out


def import_paths(trees: dict[Path, ast.Module]) -> list[str]:
    """Names imported from outside their package by more than one path."""
    defined: dict[str, set[str]] = {}
    handed: dict[str, dict[str, str]] = {}
    for path, tree in trees.items():
        module, names, imported = _module_name(path), set(), {}
        for node in _top_level(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.update({a.asname or a.name: node.module for a in node.names})
        defined[module], handed[module] = names, imported

    def origin(module: str, name: str, depth: int = 0) -> str:
        if depth > 10 or module not in defined or name in defined[module]:
            return module
        source = handed[module].get(name)
        return origin(source, name, depth + 1) if source else module

    faces = {_module_name(path) for path in trees if path.name == "__init__.py"}

    def outer_face(home: str, name: str) -> str:
        """The outermost package whose face hands ``name`` on from ``home``
        (``home``'s own package when none does)."""
        handing = [face for face in faces if home.startswith(face + ".")
                   and name in handed[face] and origin(face, name) == home]
        return min(handing, key=len, default=home.rsplit(".", 1)[0])

    def inside(here: str, package: str) -> bool:
        return package != "mlxchat" and (here == package or here.startswith(package + "."))

    paths: dict[tuple[str, str], set[str]] = defaultdict(set)
    for path, tree in trees.items():
        here = _module_name(path)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.ImportFrom) and node.module and not node.level
                    and node.module.startswith("mlxchat")):
                continue
            for alias in node.names:
                if f"{node.module}.{alias.name}" in defined:
                    continue  # a submodule
                home = origin(node.module, alias.name)
                if inside(here, home.rsplit(".", 1)[0]):
                    continue  # inside its package: the module that defines it
                if node.module == home and inside(here, outer_face(home, alias.name)):
                    continue  # inside the package whose face hands it on (not the face: a cycle)
                paths[(home, alias.name)].add(node.module)
    return sorted(f"{name} (from {home}): {', '.join(sorted(via))}"
                  for (home, name), via in paths.items() if len(via) > 1)


CONVERSATION_NAMES = {"conv", "conversation", "chat"}
"""What the code calls a Conversation it holds."""


def reached_through(trees: dict[Path, ast.Module]) -> list[str]:
    """``X.store`` / ``X.engine`` where X names a conversation, outside session/."""
    found = []
    for path, tree in trees.items():
        if _module_name(path).startswith("mlxchat.session"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("store", "engine"):
                chain = _attribute_chain(node.value)
                if chain and chain[-1] in CONVERSATION_NAMES:
                    found.append(f"{_rel(path)}:{node.lineno}: {'.'.join(chain)}.{node.attr}")
    return found


def long_modules(root: Path = PACKAGE_ROOT) -> list[str]:
    return sorted(f"{_rel(p)}: {n}" for p in root.rglob("*.py")
                  if (n := len(p.read_text(encoding="utf-8").splitlines())) > MODULE_MAX_LINES)


def cache_classes() -> set[str]:
    """mlx-lm's cache layer classes: those of ``mlx_lm.models.cache`` built on
    its ``_BaseCache``, read from its source."""
    source = Path(importlib.util.find_spec("mlx_lm.models.cache").origin)
    tree = ast.parse(source.read_text(encoding="utf-8"))
    bases = {n.name: {_attribute_chain(b)[-1] for b in n.bases if _attribute_chain(b)}
             for n in tree.body if isinstance(n, ast.ClassDef)}
    found = {"_BaseCache"}
    while grown := {name for name, of in bases.items() if of & found} - found:
        found |= grown
    return found - {"_BaseCache"}


def _names_in(node: ast.AST) -> set[str]:
    return {n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(node)
            if isinstance(n, (ast.Name, ast.Attribute))}


def cache_class_checks(trees: dict[Path, ast.Module], classes: set[str]) -> list[str]:
    """Places outside the cache-layer table that ask a layer's class: an
    ``isinstance``/``issubclass`` call, a comparison or a ``case`` naming a
    cache class (or a module-level name holding some)."""
    found: list[tuple[str, int, str]] = []
    for path, tree in trees.items():
        if path == CACHE_TABLE:
            continue
        held = {t.id for n in tree.body if isinstance(n, ast.Assign)
                and _names_in(n.value) & classes for t in n.targets if isinstance(t, ast.Name)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("isinstance", "issubclass") and len(node.args) == 2):
                asked = node.args[1]
            elif isinstance(node, ast.Compare):
                asked = node
            elif isinstance(node, ast.MatchClass):
                asked = node.cls
            else:
                continue
            named = _names_in(asked) & (classes | held)
            if named:
                found.append((_rel(path), node.lineno, ", ".join(sorted(named))))
    return [f"{where}:{line}: {named}" for where, line, named in sorted(found)]


# -- the tests -----------------------------------------------------------------------

def test_engine_root_holds_only_its_face():
    assert engine_root_extras() == []


def test_conversation_forwards_nothing_and_stays_small():
    tree = ast.parse(CONVERSATION.read_text(encoding="utf-8"))
    assert forwarding_methods(tree, "Conversation") == []
    assert len(CONVERSATION.read_text(encoding="utf-8").splitlines()) <= CONVERSATION_MAX_LINES


def test_no_mixins():
    assert mixin_classes(_modules(PACKAGE_ROOT)) == []


def test_no_reexport_shims():
    assert reexports(_modules(PACKAGE_ROOT)) == []


def test_one_class_per_name():
    assert classes_defined_twice(_modules(PACKAGE_ROOT)) == []


def test_one_import_path_per_name():
    assert import_paths(_modules(PACKAGE_ROOT)) == []


def test_nobody_reaches_through_the_conversation():
    assert reached_through(_modules(PACKAGE_ROOT)) == []


def test_no_module_over_400_lines():
    assert long_modules() == []


def test_only_the_cache_table_asks_a_layers_class():
    classes = cache_classes()
    assert {"KVCache", "RotatingKVCache", "QuantizedKVCache", "ChunkedKVCache", "ArraysCache",
            "CacheList"} <= classes
    assert cache_class_checks(_modules(PACKAGE_ROOT), classes) == []


def test_the_checks_see_what_they_look_for():
    # Each check finds its case in a small made-up module, so none passes by
    # looking at nothing.
    tree = ast.parse(
        "from x import A, B, C, E\n"
        "__all__ = ['B', 'E']\n"
        "D = A\n"
        "F = E()\n"
        "class Conversation(A, C):\n"
        "    def f(self, a, *, b):\n        '''doc'''\n        return self._p.f(a, b=b)\n"
        "    @property\n    def g(self):\n        return self._p.g\n"
        "    def h(self, a):\n        return self._p.h(a + 1)\n"
        "    def i(self):\n        self._p.i()\n"
        "class C: pass\nclass A: pass\n")
    assert forwarding_methods(tree, "Conversation") == [
        "Conversation.f", "Conversation.g", "Conversation.i"]
    here = PACKAGE_ROOT / "made_up.py"
    assert mixin_classes({here: tree}) == ["mlxchat/made_up.py: Conversation"]
    assert reexports({here: tree}) == [
        "mlxchat/made_up.py:1: B", "mlxchat/made_up.py:1: E", "mlxchat/made_up.py:3: D = A"]
    there = PACKAGE_ROOT / "other.py"
    assert classes_defined_twice({here: tree, there: ast.parse("class C: pass\n")}) == [
        "C: mlxchat/made_up.py, mlxchat/other.py"]
    assert reached_through({here: ast.parse("x = self.conv.store.get(1)\ny = app.engine\n")}) == [
        "mlxchat/made_up.py:1: self.conv.store"]
    face = PACKAGE_ROOT / "pkg" / "__init__.py"
    inner = PACKAGE_ROOT / "pkg" / "inner.py"
    assert import_paths({
        face: ast.parse("from mlxchat.pkg.inner import Thing\n"),
        inner: ast.parse("class Thing: pass\n"),
        here: ast.parse("from mlxchat.pkg import Thing\n"),
        there: ast.parse("from mlxchat.pkg.inner import Thing\n"),
    }) == ["Thing (from mlxchat.pkg.inner): mlxchat.pkg, mlxchat.pkg.inner"]
    # A subpackage's name handed on by the outer face: a module beside the
    # subpackage takes it from its module; outside, two paths are two.
    deep = PACKAGE_ROOT / "pkg" / "sub" / "inner.py"
    sub_face = PACKAGE_ROOT / "pkg" / "sub" / "__init__.py"
    beside = PACKAGE_ROOT / "pkg" / "beside.py"
    trees = {face: ast.parse("from mlxchat.pkg.sub.inner import Thing\n"),
             sub_face: ast.parse(""), deep: ast.parse("class Thing: pass\n"),
             beside: ast.parse("from mlxchat.pkg.sub.inner import Thing\n"),
             here: ast.parse("from mlxchat.pkg import Thing\n")}
    assert import_paths(trees) == []
    trees[there] = ast.parse("from mlxchat.pkg.sub.inner import Thing\n")
    assert import_paths(trees) == [
        "Thing (from mlxchat.pkg.sub.inner): mlxchat.pkg, mlxchat.pkg.sub.inner"]
    asks = ast.parse(
        "from mlx_lm.models.cache import KVCache, ChunkedKVCache, RotatingKVCache\n"
        "JOINS = (KVCache, RotatingKVCache)\n"
        "def f(c, meta):\n"
        "    if isinstance(c, (cache.ArraysCache, int)):\n        return 1\n"
        "    if type(c) is KVCache or type(c) in JOINS:\n        return 2\n"
        "    if meta['type'] == ChunkedKVCache.__name__:\n        return 3\n"
        "    match c:\n        case RotatingKVCache():\n            return 4\n"
        "    return isinstance(c, dict) or len(c) == 0\n")
    classes = {"KVCache", "ChunkedKVCache", "RotatingKVCache", "ArraysCache"}
    assert cache_class_checks({here: asks, CACHE_TABLE: asks}, classes) == [
        "mlxchat/made_up.py:4: ArraysCache", "mlxchat/made_up.py:6: JOINS",
        "mlxchat/made_up.py:6: KVCache", "mlxchat/made_up.py:8: ChunkedKVCache",
        "mlxchat/made_up.py:11: RotatingKVCache"]


if __name__ == "__main__":
    trees = _modules(PACKAGE_ROOT)
    conv = CONVERSATION.read_text(encoding="utf-8")
    figures = {
        "engine root modules beyond the face": engine_root_extras(),
        "Conversation forwarding methods": forwarding_methods(ast.parse(conv), "Conversation"),
        "Conversation lines": len(conv.splitlines()),
        "classes with several project bases": mixin_classes(trees),
        "re-exported or unused imported names": reexports(trees),
        "class names defined twice": classes_defined_twice(trees),
        "names imported by several paths": import_paths(trees),
        "a conversation's store or engine reached from outside": reached_through(trees),
        "modules over 400 lines": long_modules(),
        "places outside the cache table that ask a layer's class":
            cache_class_checks(trees, cache_classes()),
    }
    for name, value in figures.items():
        count = value if isinstance(value, int) else len(value)
        print(f"{name}: {count}")
        for item in ([] if isinstance(value, int) else value):
            print(f"    {item}")
