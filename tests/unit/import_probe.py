"""Which banned packages importing each module loads, each module imported as
if in a fresh interpreter. Run as a script by tests/unit/test_boundary.py:

    python import_probe.py '{"modules": [...], "banned": [...], "exercise": {...}}'

prints one JSON line per module: {"module", "found": [...], "error": str|None}.

Importing mlx_lm costs ~1 s of CPU (it pulls in transformers), which one
interpreter per module paid ~90 times. Here the third-party packages that are
not banned are imported once and each module is imported in a forked child:
no mlxchat module is loaded before the child imports its module, and no banned
package is loaded before it either, so what the child finds is exactly what a
fresh interpreter would load. Where fork is unsafe after loading frameworks
(macOS), every module gets a fresh interpreter as before.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import traceback

PRELOAD = ("numpy", "jinja2", "transformers", "mlx.core", "mlx.nn", "mlx_lm")
"""Heavy packages the app imports; each is preloaded only when it loads nothing banned."""


def loaded(banned: list[str]) -> list[str]:
    return sorted(m for m in sys.modules if any(m == b or m.startswith(b + ".") for b in banned))


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


def main(spec: dict) -> None:
    banned, exercise = spec["banned"], spec.get("exercise", {})
    fork = hasattr(os, "fork") and sys.platform != "darwin" and not spec.get("fresh")
    if fork:
        for name in PRELOAD:  # each tried in a child first: kept only if it loads nothing banned
            tried = in_child(name, banned, "")
            if tried["error"] is None and not tried["found"]:
                importlib.import_module(name)
        assert not loaded(banned) and not loaded(["mlxchat"]), "a preload loaded too much"
    for module in spec["modules"]:
        code = exercise.get(module, "")
        if spec.get("fresh"):
            result = probe(module, banned, code)
        elif fork:
            result = in_child(module, banned, code)
        else:
            result = in_fresh_interpreter(module, banned, code)
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
