"""User settings: one typed object, read from ``config.toml`` and ``MLXCHAT_*``."""

from __future__ import annotations

import json
import os
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from mlxchat import paths
from mlxchat.errors import MlxchatError
from mlxchat.files import write_private_text
from mlxchat.generation import GenerationSettings

DEFAULT_MODEL = "smollm2-135m"
IMAGE_MODES = ("auto", "kitty", "sixel", "halfblock", "label")
"""How the transcript draws an image: 'auto' asks the terminal; the others force one way."""


class ConfigError(MlxchatError, ValueError):
    """The config file or an environment variable holds a bad value."""


@dataclass
class Settings:
    model: str = DEFAULT_MODEL
    """Model spec used for new sessions: catalog alias, HF repo, folder or .gguf."""
    system_prompt: str | None = None
    """System prompt for new sessions; None keeps the model template's default."""
    generation: GenerationSettings = field(default_factory=GenerationSettings)
    """Default sampling and cache options for new sessions."""
    memory_budget_bytes: int | None = None
    """Memory the KV cache may grow into, for the gauge; None uses 75% of RAM."""
    theme: str = "textual-dark"
    """Textual theme, remembered when changed in the app."""
    images: str = "auto"
    """How images are drawn (IMAGE_MODES): the real picture where the terminal
    answers for Kitty graphics or Sixel, half-blocks elsewhere, the label alone
    without colours; or one way forced."""


_ENV_FIELDS = {
    "MLXCHAT_MODEL": "model",
    "MLXCHAT_SYSTEM_PROMPT": "system_prompt",
    "MLXCHAT_MEMORY_BUDGET_BYTES": "memory_budget_bytes",
    "MLXCHAT_THEME": "theme",
    "MLXCHAT_IMAGES": "images",
}


def _coerce(name: str, value: Any, default: Any) -> Any:
    if value is None or default is None or isinstance(value, type(default)):
        if isinstance(default, int) and isinstance(value, str):
            return int(value)
        return value
    try:
        return type(default)(value)
    except (TypeError, ValueError):
        raise ConfigError(f"setting {name!r}: {value!r} is not a {type(default).__name__}")


def load_settings(path: Path | None = None, *, env: bool = True) -> Settings:
    """Settings from the TOML file (if any), then ``MLXCHAT_*`` variables on top
    (unless ``env`` is False: what the file alone says)."""
    path = path or paths.config_file()
    data: dict[str, Any] = {}
    if path.exists():
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    settings = Settings()
    gen = GenerationSettings()
    for f in fields(GenerationSettings):
        if f.name in data.get("generation", {}):
            value = data["generation"][f.name]
            setattr(gen, f.name, _coerce(f.name, value, getattr(gen, f.name)))
    try:
        gen.check()
    except ValueError as exc:
        raise ConfigError(f"{path}: [generation] {exc}") from None
    settings.generation = gen
    for f in fields(Settings):
        if f.name != "generation" and f.name in data:
            setattr(settings, f.name, _coerce(f.name, data[f.name], getattr(settings, f.name)))
    for var, name in _ENV_FIELDS.items() if env else ():
        if os.environ.get(var):
            raw = os.environ[var]
            try:
                value = int(raw) if name == "memory_budget_bytes" else raw
            except ValueError:
                raise ConfigError(f"{var}={raw!r} is not a number of bytes") from None
            setattr(settings, name, value)
    if settings.images not in IMAGE_MODES:
        raise ConfigError(f"images = {settings.images!r}: choose one of {', '.join(IMAGE_MODES)}")
    return settings


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    # A JSON string is a valid TOML basic string (same escapes, control characters too).
    return json.dumps(str(value), ensure_ascii=False)


def save_settings(settings: Settings, path: Path | None = None) -> Path:
    """Write the settings as TOML (None values are left out), atomically."""
    path = path or paths.config_file()
    paths.ensure_private_dir(path.parent)
    lines = []
    for f in fields(Settings):
        value = getattr(settings, f.name)
        if f.name != "generation" and value is not None:
            lines.append(f"{f.name} = {_toml_value(value)}")
    lines.append("\n[generation]")
    for name, value in settings.generation.to_dict().items():
        if value is not None:
            lines.append(f"{name} = {_toml_value(value)}")
    return write_private_text(path, "\n".join(lines) + "\n")


def remember(key: str, value: Any, path: Path | None = None) -> Path:
    """Change one setting in the file ('theme' or 'generation.temperature'),
    leaving the rest of the file as it is and environment overrides out of it."""
    saved = load_settings(path, env=False)
    target: Any = saved
    name = key
    if key.startswith("generation."):
        target, name = saved.generation, key.split(".", 1)[1]
    if not hasattr(target, name):
        raise ConfigError(f"unknown setting {key!r}")
    setattr(target, name, value)
    return save_settings(saved, path)
