"""Build mlxchat's native CPU kernels (``src/``) into an MLX extension module.

``python -m mlxchat.native`` (``make model`` runs it) configures and
builds ``src/`` with CMake and Ninja against the installed MLX's headers and
CMake package and nanobind (its ABI must match MLX's: pyproject's ``native``
extra pins it), into a folder keyed by the MLX version, the platform and the
sources (``key()``): another MLX or changed sources build anew, and a build
never lands in the source tree. The compiler is recorded with the build: a
changed compiler builds again. On macOS nothing is built (Metal and
Accelerate serve there). Failing is never fatal: the app runs without it and
says why (``mlxchat.native.status()``).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from mlxchat.paths import cache_dir

SOURCES = Path(__file__).parent / "src"
MODULE = "_mlxchat_native"
RECORD = "build.json"
FORMAT = 1


def mlx_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mlx")
    except PackageNotFoundError:
        return "none"


def sources_hash() -> str:
    digest = hashlib.sha256()
    for path in sorted(SOURCES.iterdir()):
        if path.is_file():
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def key(mlx: str | None = None) -> str:
    """The build's folder name: MLX's version, the platform, the sources."""
    parts = (f"mlx{mlx or mlx_version()}", f"py{sys.version_info[0]}{sys.version_info[1]}",
             f"{sys.platform}-{platform.machine()}", sources_hash(), f"f{FORMAT}")
    return "-".join(parts)


def roots() -> list[Path]:
    """Where builds live, searched in order: beside the Python environment
    (every MLXCHAT_HOME of that environment shares its MLX, so its build), then
    the cache folder where the environment is read-only."""
    return [Path(sys.prefix) / "var" / "mlxchat" / "native", cache_dir() / "native"]


def compiler() -> str | None:
    """The C++ compiler CMake will use, as its first ``--version`` line."""
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") \
        or shutil.which("clang++")
    if not cxx:
        return None
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.splitlines()[0].strip() if out.returncode == 0 and out.stdout else None


def tool(name: str) -> str | None:
    """``cmake``/``ninja`` from this environment (the pinned wheels), else the PATH."""
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else shutil.which(name)


def find_built(build_key: str | None = None) -> Path | None:
    """The built module's file for ``build_key`` (default: this environment's), if any."""
    wanted = build_key or key()
    for root in roots():
        folder = root / wanted
        record = folder / RECORD
        try:
            data = json.loads(record.read_text())
        except (OSError, ValueError):
            continue
        module = folder / data.get("module", "")
        if data.get("key") == wanted and module.is_file():
            return module
    return None


def other_builds() -> list[str]:
    """Keys of builds present for another MLX version or other sources."""
    found = []
    for root in roots():
        if root.is_dir():
            found += [p.name for p in root.iterdir() if (p / RECORD).is_file()]
    return sorted(set(found) - {key()})


def _cmake_dirs() -> tuple[str, str]:
    import mlx
    import nanobind

    mlx_dir = Path(mlx.__file__).parent if getattr(mlx, "__file__", None) else \
        Path(next(iter(mlx.__path__)))
    return str(mlx_dir), str(Path(nanobind.__file__).parent / "cmake")


def _writable_root() -> Path:
    for root in roots():
        try:
            root.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=root):
                return root
        except OSError:
            continue
    raise OSError("no writable folder for the native build")


def build(force: bool = False, log=None) -> Path:
    """Build the module for this environment (a no-op when built with the same
    compiler); its file. Raises ``RuntimeError`` with a one-line reason."""
    if sys.platform == "darwin":
        raise RuntimeError("not built on macOS (Metal and Accelerate serve MLX there)")
    cxx = compiler()
    if cxx is None:
        raise RuntimeError("no C++ compiler found (install g++)")
    built = find_built()
    if built is not None and not force:
        record = json.loads((built.parent / RECORD).read_text())
        if record.get("compiler") == cxx:
            return built
    cmake, ninja = tool("cmake"), tool("ninja")
    if cmake is None or ninja is None:
        raise RuntimeError("cmake and ninja are needed (pip install -e '.[native]')")
    root = _writable_root()
    from filelock import FileLock

    with FileLock(str(root / f"{key()}.lock")):
        return _build_locked(root / key(), cmake, ninja, cxx, log, force)


def _build_locked(folder: Path, cmake: str, ninja: str, cxx: str, log, force: bool) -> Path:
    built = find_built()
    if (built is not None and not force
            and json.loads((built.parent / RECORD).read_text()).get("compiler") == cxx):
        return built  # another process built it meanwhile
    try:
        mlx_dir, nb_dir = _cmake_dirs()
    except ImportError as exc:
        raise RuntimeError(f"nanobind is needed (pip install -e '.[native]'): {exc}") from exc
    work = folder / "build"
    shutil.rmtree(folder, ignore_errors=True)
    work.mkdir(parents=True)
    steps = ([cmake, "-S", str(SOURCES), "-B", str(work), "-G", "Ninja",
              f"-DCMAKE_MAKE_PROGRAM={ninja}", f"-DPython_EXECUTABLE={sys.executable}",
              f"-DCMAKE_PREFIX_PATH={mlx_dir}", f"-Dnanobind_DIR={nb_dir}",
              "-DCMAKE_BUILD_TYPE=Release"],
             [cmake, "--build", str(work)])
    for step in steps:
        out = subprocess.run(step, capture_output=True, text=True)
        if log is not None:
            log.write(out.stdout + out.stderr)
        if out.returncode != 0:
            last = [x for x in (out.stdout + out.stderr).splitlines() if "error" in x.lower()]
            raise RuntimeError(f"the build failed: {(last or ['see the log'])[0][:200]}")
    module = next(work.glob(f"{MODULE}*.so"))
    shutil.copy2(module, folder / module.name)
    (folder / RECORD).write_text(json.dumps({"key": key(), "module": module.name,
                                             "compiler": cxx, "mlx": mlx_version()}))
    shutil.rmtree(work, ignore_errors=True)
    return folder / module.name


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        path = build(force="--force" in args)
    except (RuntimeError, OSError) as exc:
        print(f"mlxchat: the native CPU kernel was not built: {exc}", file=sys.stderr)
        return 0  # never fatal: the app runs without it and says so
    print(f"mlxchat: native CPU kernel: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
