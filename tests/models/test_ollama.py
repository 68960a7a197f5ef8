"""Ollama's store (manifests + content-addressed blobs, laid out as Ollama does) and
the scan of Ollama's and LM Studio's folders."""

from __future__ import annotations

import hashlib
import json

import pytest

from mlxchat.cli import main
from mlxchat.models import ModelError, import_gguf, list_models, load_model
from mlxchat.models.ollama_template import go_to_jinja

from tests.models.gguf_files import random_params, write_model
from tests.models.test_gguf_arch import BASE, metadata
from tests.models.test_gguf_import import TOKENS

CONFIG = {**BASE, "model_type": "llama", "rope_theta": 10000.0}
# Ollama's ChatML template (as in its qwen2 / smollm2 library models)
GO_CHATML = ("{{- if .System }}<|im_start|>system\n{{ .System }}<|im_end|>\n{{ end }}"
             "{{- range .Messages }}{{- if ne .Role \"system\" }}<|im_start|>{{ .Role }}\n"
             "{{ .Content }}<|im_end|>\n{{ end }}{{- end }}<|im_start|>assistant\n")
# The same format as a Hugging Face (Jinja) template: what the GGUF itself carries.
JINJA_CHATML = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
                "{{ message['content'] }}<|im_end|>\n{% endfor %}"
                "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
CONVERSATION = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello"}, {"role": "user", "content": "and?"}]


def put_blob(store, data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    (store / "blobs").mkdir(parents=True, exist_ok=True)
    (store / "blobs" / digest.replace(":", "-")).write_bytes(data)
    return digest


def ollama_store(tmp_path, monkeypatch, *, template=GO_CHATML, params=None, system=None,
                 name="tiny", tag="q8"):
    store = tmp_path / "ollama-models"
    gguf_path = tmp_path / "model.gguf"
    meta = metadata("llama", CONFIG, **{"tokenizer.chat_template": JINJA_CHATML})
    write_model(gguf_path, "llama", random_params("llama", CONFIG), CONFIG, meta, kind="Q8_0")
    layers = [("model", gguf_path.read_bytes())]
    if template is not None:
        layers.append(("template", template.encode()))
    if params is not None:
        layers.append(("params", json.dumps(params).encode()))
    if system is not None:
        layers.append(("system", system.encode()))
    manifest = {"schemaVersion": 2,
                "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                           "digest": put_blob(store, b"{}"), "size": 2},
                "layers": [{"mediaType": f"application/vnd.ollama.image.{kind}",
                            "digest": put_blob(store, data), "size": len(data)}
                           for kind, data in layers]}
    folder = store / "manifests" / "registry.ollama.ai" / "library" / name
    folder.mkdir(parents=True)
    (folder / tag).write_text(json.dumps(manifest))
    monkeypatch.setenv("OLLAMA_MODELS", str(store))
    return store


def render(tok, messages, generation=True) -> str:
    return tok.apply_chat_template(messages, add_generation_prompt=generation, tokenize=False)


def test_import_by_name_keeps_template_and_parameters(tmp_path, monkeypatch):
    ollama_store(tmp_path, monkeypatch, system="You are terse.",
                 params={"stop": ["<|im_start|>", "<|im_end|>", "User:"], "num_ctx": 512,
                         "temperature": 0.6})
    loaded = load_model("ollama:tiny:q8")
    assert loaded.info.context_window == 512  # num_ctx
    assert {TOKENS.index("<|im_start|>"), 2} <= set(loaded.tokenizer.eos_token_ids)
    tok = loaded.tokenizer
    # Ollama's Go template, translated, renders what the HF form of ChatML renders.
    from jinja2 import Template

    reference = Template(JINJA_CHATML)
    assert render(tok, CONVERSATION) == reference.render(messages=CONVERSATION,
                                                         add_generation_prompt=True)
    assert render(tok, CONVERSATION, False) == reference.render(messages=CONVERSATION,
                                                                add_generation_prompt=False)
    # ... and Ollama's default system prompt comes first when the chat has none.
    plain = [{"role": "user", "content": "hi"}]
    assert render(tok, plain) == reference.render(
        messages=[{"role": "system", "content": "You are terse."}] + plain,
        add_generation_prompt=True)

    folder = import_gguf("ollama:tiny:q8", name="tiny-local")
    notes = json.loads((folder / "mlxchat-import.json").read_text())["notes"]
    assert notes == ["Ollama parameters not carried over: temperature"]
    entry = next(e for e in list_models() if e.alias == "tiny-local")
    assert entry.kind == "ollama" and entry.available_offline and entry.context_window == 512


def test_untranslatable_template_falls_back_to_the_gguf_one(tmp_path, monkeypatch):
    tools = "{{ range $i, $m := .Messages }}{{ $last := eq (len (slice $.Messages $i)) 1 }}{{ end }}"
    assert go_to_jinja(tools) is None
    ollama_store(tmp_path, monkeypatch, template=tools)
    folder = import_gguf("ollama:tiny:q8")
    notes = json.loads((folder / "mlxchat-import.json").read_text())["notes"]
    assert any("Go template features" in n for n in notes)
    from jinja2 import Template

    tok = load_model("ollama:tiny:q8").tokenizer
    assert render(tok, CONVERSATION) == Template(JINJA_CHATML).render(
        messages=CONVERSATION, add_generation_prompt=True)


def test_missing_model_and_blob_are_one_line_errors(tmp_path, monkeypatch):
    store = ollama_store(tmp_path, monkeypatch)
    with pytest.raises(ModelError) as info:
        load_model("ollama:nothere")
    assert str(info.value) == (f"Ollama has no model nothere:latest in {store} (see `ollama "
                               "list`; OLLAMA_MODELS sets the folder)")
    with pytest.raises(ModelError, match="not an Ollama model name"):
        load_model("ollama:../../etc:x")
    for blob in (store / "blobs").iterdir():
        if blob.stat().st_size > 10_000:
            blob.unlink()
    with pytest.raises(ModelError, match=r"Ollama model tiny:q8: its blob sha256-\w+ is missing"):
        load_model("ollama:tiny:q8")


def test_scan_lists_ollama_and_lm_studio(tmp_path, monkeypatch, capsys):
    ollama_store(tmp_path, monkeypatch)
    lms = tmp_path / "lmstudio" / "someone" / "repo"
    lms.mkdir(parents=True)
    meta = metadata("qwen2", {**CONFIG, "model_type": "qwen2"})
    write_model(lms / "good.gguf", "qwen2",
                random_params("qwen2", {**CONFIG, "model_type": "qwen2"}), CONFIG, meta)
    (lms / "broken.gguf").write_bytes(b"GGUF\x03\x00\x00\x00garbage")
    monkeypatch.setenv("LMSTUDIO_MODELS", str(tmp_path / "lmstudio"))
    assert main(["models", "--scan", "--json"]) == 0
    found = {f["spec"].rsplit("/", 1)[-1]: f for f in json.loads(capsys.readouterr().out)}
    assert found["ollama:tiny:q8"]["importable"] and found["ollama:tiny:q8"]["quantization"] == "Q8_0"
    assert found["good.gguf"]["importable"] and found["good.gguf"]["quantization"] == "F32"
    assert not found["broken.gguf"]["importable"]
    assert "truncated or damaged GGUF" in found["broken.gguf"]["why"]
    assert main(["models", "--scan"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["STORE", "IMPORT", "WITH", "SIZE", "QUANT", "IMPORTABLE"]
    assert len(lines) == 4


def test_cli_import_prints_what_each_type_became(tmp_path, monkeypatch, capsys):
    ollama_store(tmp_path, monkeypatch)
    assert main(["import", "ollama:tiny:q8"]) == 0
    captured = capsys.readouterr()
    out = captured.out
    # Not a terminal: a line as each stage starts, the vocabulary's too (seconds on a
    # large one), never silence.
    assert captured.err.splitlines()[:3] == ["checking model…", "converting model…",
                                             "writing model…"]
    assert "reading the vocabulary of the model…" in captured.err.splitlines()
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line[:2] in ("Q8", "F3")}
    assert rows["Q8_0"][2:4] == ["int8", "g32"] and float(rows["Q8_0"][-1]) == 8 + 32 / 32
    assert rows["F32"][2] == "float32"


def test_go_whitespace_survives_chat_template_rendering():
    """Chat templates render with trim_blocks/lstrip_blocks; Go has neither. The
    translation must give the same text either way, Go's '-' markers aside."""
    import jinja2

    go = ("{{ if .System }}\n  SYS {{ .System }}\n{{ end }}\n"
          "{{- range .Messages }}\n  {{ if eq .Role \"user\" }}\nU: {{ .Content }}\n"
          "  {{ else }}\nA {% not jinja %} {# nor this #}: {{ .Content }}\n  {{ end }}\n"
          "{{ end }}\nA:")
    jinja = go_to_jinja(go)
    chat = jinja2.Environment(trim_blocks=True, lstrip_blocks=True).from_string(jinja)
    plain = jinja2.Environment().from_string(jinja)
    for generation in (True, False):
        a = chat.render(messages=CONVERSATION, add_generation_prompt=generation)
        assert a == plain.render(messages=CONVERSATION, add_generation_prompt=generation)
    text = chat.render(messages=CONVERSATION, add_generation_prompt=True)
    assert text.startswith("\n  SYS Be brief.\n\n  \nA {% not jinja %} {# nor this #}: Be brief.")
    assert text.endswith("\nU: and?\n  \n\nA:")
    assert not chat.render(messages=CONVERSATION, add_generation_prompt=False).endswith("A:")
