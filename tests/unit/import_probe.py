"""Which banned packages importing each module loads, each module imported as
if in a fresh interpreter. Run as a script by tests/unit/test_boundary.py:

    python import_probe.py '{"groups": [{"modules": [...], "banned": [...], "exercise": {...}}]}'

prints one JSON line per module: {"module", "found": [...], "error": str|None}.

Importing mlx_lm costs ~1 s of CPU (it pulls in transformers), which one
interpreter per module paid ~90 times. Here the third-party packages are
imported once, in order, and each module is imported in a forked child: no
mlxchat module is loaded before the child imports its module, and no banned
package is loaded before it either, so what the child finds is exactly what a
fresh interpreter would load. A group whose banned packages the next preload
would load is probed before that preload, so one process serves every group
(one interpreter and one import of each package, not one per group). Where
fork is unsafe after loading frameworks (macOS), every module gets a fresh
interpreter as before.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import traceback

PRELOAD = ("jinja2", "numpy", "transformers", "mlx.core", "mlx.nn", "mlx_lm")
"""Heavy packages the app imports, in the order they are preloaded (the ones
the fewest groups ban first)."""


def loaded_of(names: list[str], banned: list[str]) -> list[str]:
    return [m for m in names if any(m == b or m.startswith(b + ".") for b in banned)]


def loaded(banned: list[str]) -> list[str]:
    return sorted(loaded_of(list(sys.modules), banned))


def probe(module: str, banned: list[str], exercise: str) -> dict:
    """In this process: import ``module``, run ``exercise``, list the banned ones loaded."""
    try:
        namespace = {"module": importlib.import_module(module)}
        exec(exercise, namespace)
    except BaseException:  # noqa: BLE001 - reported as the module's failure
        return {"module": module, "found": [], "error": traceback.format_exc()}
    return {"module": module, "found": loaded(banned), "error": None}


def in_child(module: str, banned: list[str], exercise: str) -> dict:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never return into the parent's code
        os.close(read)
        try:
            os.write(write, json.dumps(probe(module, banned, exercise)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    if not data:
        return {"module": module, "found": [], "error": f"child died: wait status {status}"}
    return json.loads(data)


def in_fresh_interpreter(module: str, banned: list[str], exercise: str) -> dict:
    spec = json.dumps({"modules": [module], "banned": banned, "exercise": {module: exercise},
                       "fresh": True})
    proc = subprocess.run([sys.executable, __file__, spec], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=120, check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        return {"module": module, "found": [], "error": proc.stderr or f"exit {proc.returncode}"}
    return json.loads(proc.stdout)


def probe_group(group: dict, fork: bool, fresh: bool = False) -> None:
    """Print each of the group's modules' result (in this process when ``fresh``)."""
    banned, exercise = group["banned"], group.get("exercise", {})
    if fork:
        assert not loaded(banned) and not loaded(["mlxchat"]), "a preload loaded too much"
    for module in group["modules"]:
        code = exercise.get(module, "")
        if fresh:
            result = probe(module, banned, code)
        elif fork:
            result = in_child(module, banned, code)
        else:
            result = in_fresh_interpreter(module, banned, code)
        print(json.dumps(result), flush=True)


def main(spec: dict) -> None:
    groups = spec["groups"] if "groups" in spec else [spec]
    fork = hasattr(os, "fork") and sys.platform != "darwin" and not spec.get("fresh")
    pending = list(groups)
    if fork:
        for name in PRELOAD:  # what it would load is tried in a child first
            everything = sorted({b for group in pending for b in group["banned"]})
            tried = in_child(name, everything, "")
            if tried["error"] is not None:
                continue
            for group in [g for g in pending if loaded_of(tried["found"], g["banned"])]:
                probe_group(group, fork)  # before ``name`` loads what it bans
                pending.remove(group)
            importlib.import_module(name)
    for group in pending:
        probe_group(group, fork, fresh=bool(spec.get("fresh")))


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
