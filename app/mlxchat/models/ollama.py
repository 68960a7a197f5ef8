"""Models Ollama already downloaded: ``ollama:NAME[:TAG]``.

Ollama keeps, under ``$OLLAMA_MODELS`` (default ``~/.ollama/models``), one
JSON manifest per model and tag in ``manifests/HOST/NAMESPACE/NAME/TAG`` and
content-addressed blobs in ``blobs/sha256-HEX``. The manifest's layers name
the GGUF (``application/vnd.ollama.image.model``), the chat template (a Go
template), the parameters (JSON: stop, num_ctx, ...) and a default system
prompt. We import the GGUF blob in place (no copy) with the template and the
parameters that map: stop strings that are single tokens, the context length.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from mlxchat.models.errors import ModelError

PREFIX = "ollama:"
DEFAULT_HOST = "registry.ollama.ai"
MEDIA = "application/vnd.ollama.image."


def models_dir() -> Path:
    """Ollama's store: $OLLAMA_MODELS, else ~/.ollama/models."""
    env = os.environ.get("OLLAMA_MODELS")
    return Path(env).expanduser() if env else Path.home() / ".ollama" / "models"


@dataclass
class OllamaModel:
    ref: str
    """NAME:TAG as Ollama shows it."""
    gguf: Path
    template: str | None = None
    """Ollama's Go template, as stored."""
    params: dict = field(default_factory=dict)
    system: str | None = None


def parse_ref(spec: str) -> tuple[str, str, str, str]:
    """'ollama:NAME[:TAG]' (NAME may be 'ns/name' or 'host/ns/name') -> host, ns, name, tag."""
    ref = spec.removeprefix(PREFIX).strip()
    name, _, tag = ref.partition(":")
    parts = [p for p in name.split("/") if p]
    if not parts or len(parts) > 3 or not re.fullmatch(r"[\w.-]*", tag or "latest") or any(
            p in (".", "..") or not re.fullmatch(r"[\w.-]+", p) for p in parts):
        raise ModelError(f"not an Ollama model name: '{spec}' (use ollama:NAME[:TAG])")
    host, ns = DEFAULT_HOST, "library"
    if len(parts) == 3:
        host, ns, name = parts
    elif len(parts) == 2:
        ns, name = parts
    else:
        name = parts[0]
    return host, ns, name, tag or "latest"


def _blob(store: Path, digest: str) -> Path:
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest or ""):
        raise ModelError(f"Ollama manifest has a bad digest '{digest}'")
    return store / "blobs" / digest.replace(":", "-")


def _read_text(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelError(f"cannot read the Ollama {what} {path}: "
                         f"{getattr(exc, 'strerror', None) or exc}") from None


def read_manifest(path: Path, store: Path, ref: str) -> OllamaModel:
    """The model a manifest file describes; ModelError if it or its GGUF blob is missing."""
    try:
        layers = json.loads(_read_text(path, "manifest"))["layers"]
        by_type = {layer["mediaType"].removeprefix(MEDIA).split(";")[0]: layer["digest"]
                   for layer in layers}
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ModelError(f"damaged Ollama manifest: {path}") from None
    if "model" not in by_type:
        raise ModelError(f"Ollama model {ref} has no GGUF layer (a safetensors model?)")
    gguf = _blob(store, by_type["model"])
    if not gguf.is_file():
        raise ModelError(f"Ollama model {ref}: its blob {gguf.name} is missing "
                         "(run ollama pull again)")
    model = OllamaModel(ref=ref, gguf=gguf)
    if "template" in by_type:
        model.template = _read_text(_blob(store, by_type["template"]), "template")
    if "system" in by_type:
        model.system = _read_text(_blob(store, by_type["system"]), "system prompt")
    if "params" in by_type:
        try:
            model.params = json.loads(_read_text(_blob(store, by_type["params"]), "params"))
        except ValueError:
            raise ModelError(f"Ollama model {ref} has damaged parameters") from None
    return model


def find(spec: str) -> OllamaModel:
    """Look ``ollama:NAME[:TAG]`` up in Ollama's local store."""
    host, ns, name, tag = parse_ref(spec)
    store = models_dir()
    manifest = store / "manifests" / host / ns / name / tag
    shown = f"{name}:{tag}" if (host, ns) == (DEFAULT_HOST, "library") else f"{ns}/{name}:{tag}"
    if not manifest.is_file():
        raise ModelError(f"Ollama has no model {shown} in {store} (see `ollama list`; "
                         "OLLAMA_MODELS sets the folder)")
    return read_manifest(manifest, store, shown)


def list_local() -> list[OllamaModel | tuple[str, str]]:
    """Every model in Ollama's store: an OllamaModel, or (ref, why it is unusable)."""
    store = models_dir()
    root = store / "manifests"
    found: list[OllamaModel | tuple[str, str]] = []
    for manifest in sorted(p for p in root.glob("*/*/*/*") if p.is_file()):
        host, ns, name, tag = manifest.relative_to(root).parts
        ref = f"{name}:{tag}" if (host, ns) == (DEFAULT_HOST, "library") else f"{ns}/{name}:{tag}"
        try:
            found.append(read_manifest(manifest, store, ref))
        except ModelError as exc:
            found.append((ref, str(exc)))
    return found


def stop_token_ids(params: dict, tokens: list[str]) -> list[int]:
    """Ollama stop strings that are whole tokens of the vocabulary, as ids."""
    stops = params.get("stop") or []
    stops = [stops] if isinstance(stops, str) else stops
    index = {t: i for i, t in enumerate(tokens)}
    return [index[s] for s in stops if isinstance(s, str) and s in index]


def customizer(model: OllamaModel):
    """convert_gguf's ``customize`` for an Ollama model: its template (when it
    translates to Jinja), its stop tokens and context length; notes say what did not map."""

    def customize(header, config: dict) -> tuple[str | None, list[str]]:
        from mlxchat.models.ollama_template import go_to_jinja, with_default_system

        notes: list[str] = []
        template = go_to_jinja(model.template) if model.template else None
        if model.template and template is None:
            notes.append("Ollama's template uses Go template features we do not translate: "
                         "using the GGUF's own")
        eos = config["eos_token_id"]
        eos = list(eos) if isinstance(eos, list) else [eos]
        tokens = header.metadata["tokenizer.ggml.tokens"]
        eos += [i for i in stop_token_ids(model.params, tokens) if i not in eos]
        config["eos_token_id"] = eos[0] if len(eos) == 1 else eos
        num_ctx = model.params.get("num_ctx")
        if isinstance(num_ctx, int) and 0 < num_ctx < config["max_position_embeddings"]:
            config["max_position_embeddings"] = num_ctx
        ignored = sorted(k for k in model.params if k not in ("stop", "num_ctx"))
        if ignored:
            notes.append(f"Ollama parameters not carried over: {', '.join(ignored)}")
        if model.system and template:
            template = with_default_system(template, model.system)
        elif model.system:
            notes.append("Ollama's default system prompt is not carried over")
        return template, notes

    variant = json.dumps([model.template, model.params, model.system], sort_keys=True)
    return customize, variant
