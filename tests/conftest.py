"""Fixtures shared by every test folder.

Each test gets its own empty MLXCHAT_HOME and no network. The bundled model is
converted once per session; later tests find it in their own models cache
(a link), so `load_model("smollm2-135m")` there is a cache hit too.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import mlxchat  # noqa: F401 - first: the optimized BLAS under MLX, the open-file limit kept

_bundled: dict[str, Path] = {}

LONGEST_FILES = ("tests/distributed/test_split.py", "tests/e2e/test_cli.py",
                 "tests/models/test_bundled_model.py", "tests/e2e/test_quit_stress.py",
                 "tests/unit/test_boundary.py", "tests/tui/test_serve_beside.py",
                 "tests/tui/test_app.py", "tests/e2e/test_compaction_kill.py",
                 "tests/distributed/test_hosts_cli.py", "tests/e2e/test_concurrency.py",
                 "tests/families/test_conformance.py")
"""The files that took longest in `make test` (20-115 s each, measured), longest
first. `--dist loadfile` hands out files in collection order; xdist's default
reorder (most tests first) left a one-test 50 s file for the end while the
other worker idled, so these run first and the short files fill the end."""


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist: keep the order below
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return LONGEST_FILES.index(path) if path in LONGEST_FILES else len(LONGEST_FILES)

    items.sort(key=rank)  # stable: every file's own tests keep their order


def seed_models_cache(home: Path) -> None:
    """Link the bundled model (once converted) into ``home``'s models cache."""
    if not _bundled:
        return
    models = home / "cache" / "models"
    models.mkdir(parents=True, exist_ok=True)
    folder = _bundled["folder"]
    (models / folder.name).symlink_to(folder, target_is_directory=True)
    shutil.copy(_bundled["hashes"], models / "hashes.json")


@pytest.fixture(autouse=True)
def mlxchat_home(tmp_path_factory: pytest.TempPathFactory,
                 monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh MLXCHAT_HOME per test, and the Hugging Face Hub kept offline."""
    home = tmp_path_factory.mktemp("mlxchat-home")
    monkeypatch.setenv("MLXCHAT_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    seed_models_cache(home)
    return home


@pytest.fixture(scope="session")
def bundled_model_dir(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """The bundled SmolLM2 GGUF converted to an MLX folder, once per run: the
    xdist workers share one conversion (the first converts, under a lock; the
    others find it in the shared home's cache, as a restarted app does)."""
    from filelock import FileLock

    from mlxchat.models import ModelError, resolve_folder

    # Each worker's basetemp lies in this run's own folder; without xdist, in pytest's.
    root = tmp_path_factory.getbasetemp()
    root = root.parent if worker_id != "master" else root
    home = root / "bundled-home"
    with FileLock(str(root / "bundled-home.lock")), pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLXCHAT_HOME", str(home))
        try:
            folder = resolve_folder("smollm2-135m")
        except ModelError as exc:
            # `make test` installs the bundled model; without it these tests must fail.
            pytest.fail(f"the bundled model is needed: {exc}")
    _bundled.update(folder=folder, hashes=home / "cache" / "models" / "hashes.json")
    return folder


@pytest.fixture(scope="session")
def bundled_model(bundled_model_dir: Path):
    """The bundled model loaded once via load_model("smollm2-135m") (a LoadedModel)."""
    from mlxchat.models import load_model

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLXCHAT_HOME", str(bundled_model_dir.parents[2]))
        return load_model("smollm2-135m")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random float32 llama folder with a byte-level tokenizer (loads in ms)."""
    from mlxchat.models.testing.text import write_tiny_model

    return write_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory):
    """A tiny model loaded once, a LoadedModel named and specified "tiny": float32,
    head_dim 16, a turn in milliseconds. Engine, command and app tests share it."""
    from mlxchat.models import load_folder
    from mlxchat.models.testing.text import write_tiny_model

    return load_folder(write_tiny_model(tmp_path_factory.mktemp("tiny")), name="tiny",
                       spec="tiny")


@pytest.fixture(scope="session")
def tiny64(tmp_path_factory: pytest.TempPathFactory):
    """A tiny llama with head_dim 64, so the KV cache can be quantized."""
    from mlxchat.models import load_folder
    from mlxchat.models.testing.text import write_tiny_model

    return load_folder(write_tiny_model(tmp_path_factory.mktemp("tiny64"), hidden_size=128,
                                        num_heads=2, num_kv_heads=1, intermediate_size=128))
