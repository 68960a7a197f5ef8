"""The session layer's tests run the real conversation over real engines on
the tiny random models the engine tests use."""

from tests.engine.conftest import engine, tiny_small_window  # noqa: F401 (fixtures)
