"""The process's open-file limit: kept when mlx-lm is imported, raised for a server.

Importing ``mlx_lm.utils`` sets ``RLIMIT_NOFILE`` to (2048, 4096), meant to
raise macOS's default of 256; on a machine whose limit is higher it lowers
it, the hard limit for good. ``keep_at_import`` lets that import raise the
soft limit only; a server then raises its soft limit to the hard one
(``raise_soft_limit``), since every connection holds a descriptor.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from typing import Any

try:
    import resource
except ImportError:  # not a POSIX system: no limit to keep
    resource = None  # type: ignore[assignment]

WATCHED = "mlx_lm.utils"
MACOS_OPEN_MAX = 10240
"""What macOS takes at most for a soft limit whatever the hard one says (OPEN_MAX)."""


def _raising_only(real: Any) -> Any:
    """``resource.setrlimit`` as mlx-lm's import may call it: the open-file
    limit only ever goes up, within the hard limit as it is."""
    def setrlimit(which: int, limits: tuple[int, int]) -> None:
        if which != resource.RLIMIT_NOFILE:
            real(which, limits)
            return
        soft, hard = resource.getrlimit(which)
        wanted = limits[0] if hard == resource.RLIM_INFINITY else min(limits[0], hard)
        if soft != resource.RLIM_INFINITY and wanted > soft:
            real(which, (wanted, hard))
    return setrlimit


class _KeepLimit(importlib.abc.MetaPathFinder):
    """Finds ``mlx_lm.utils`` as the path finder does, and runs its import
    with ``_raising_only`` standing in for ``resource.setrlimit``."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != WATCHED:
            return None
        sys.meta_path.remove(self)  # once is enough
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        def exec_keeping(module: Any) -> None:
            real = resource.setrlimit
            resource.setrlimit = _raising_only(real)
            try:
                run(module)
            finally:
                resource.setrlimit = real
        loader.exec_module = exec_keeping
        return spec


def keep_at_import() -> None:
    """From now on, importing mlx-lm never lowers the open-file limit."""
    if resource is None or WATCHED in sys.modules:
        return
    if not any(isinstance(f, _KeepLimit) for f in sys.meta_path):
        sys.meta_path.insert(0, _KeepLimit())


def raise_soft_limit() -> int:
    """Raise the soft open-file limit as far as the hard one lets it; the soft
    limit now (a large number where there is none)."""
    if resource is None:
        return 1 << 20
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    for wanted in (hard, MACOS_OPEN_MAX):
        if wanted == resource.RLIM_INFINITY or soft == resource.RLIM_INFINITY:
            continue
        if wanted > soft:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
                break
            except (ValueError, OSError):
                continue
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return 1 << 20 if soft == resource.RLIM_INFINITY else soft
