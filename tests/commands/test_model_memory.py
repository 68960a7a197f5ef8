"""/model says what the process holds for the model: its weights and the
float32 copies the CPU's matmuls keep beside them."""

from __future__ import annotations

from mlxchat.chat import human_bytes
from mlxchat.commands import CommandContext
from mlxchat.models import cpu_matmul as cm
from mlxchat.models import load_folder
from mlxchat.models.testing.text import write_tiny_model

from tests.commands.conftest import NOW, make_conversation, send


def test_model_counts_the_float32_copies_beside_the_weights(tmp_path, home, registry):
    loaded = load_folder(write_tiny_model(tmp_path / "m", quantize_bits=4), name="tiny",
                         spec="tiny", available=None)
    conv = make_conversation(tmp_path, loaded)
    ctx = CommandContext(conv, clipboard=lambda _: None, config_path=tmp_path / "c.toml",
                         now=lambda: NOW, cwd=lambda: tmp_path, exports_dir=tmp_path / "x",
                         interactive=False)
    try:
        weights = loaded.info.weights_bytes
        assert registry.run("/set cpu_matmul quantized", ctx).ok
        send(conv, "hello there")
        rows = dict(registry.run("/model", ctx).rows)
        assert rows["weights in memory"] == human_bytes(weights)
        assert registry.run("/set cpu_matmul dequantized", ctx).ok
        send(conv, "and again")
        copies = sum(layer.__dict__["_cpu_kept"].nbytes
                     for _, layer in cm.quantized_layers(loaded.model)
                     if layer.__dict__.get("_cpu_kept") is not None)
        assert copies
        rows = dict(registry.run("/model", ctx).rows)
        assert rows["weights in memory"] == (
            f"{human_bytes(weights)} + {human_bytes(copies)} of float32 copies for the CPU's "
            f"matmuls ({human_bytes(weights + copies)} in all)")
    finally:
        conv.close()
        conv.store.close()
        cm.clear(loaded.model)


def test_model_names_the_native_kernel_and_native_takes_no_copies(tmp_path, home, registry):
    from mlxchat import native

    loaded = load_folder(write_tiny_model(tmp_path / "m", quantize_bits=4), name="tiny",
                         spec="tiny", available=None)
    conv = make_conversation(tmp_path, loaded)
    ctx = CommandContext(conv, clipboard=lambda _: None, config_path=tmp_path / "c.toml",
                         now=lambda: NOW, cwd=lambda: tmp_path, exports_dir=tmp_path / "x",
                         interactive=False)
    try:
        assert registry.run("/set cpu_matmul native", ctx).ok
        send(conv, "hello there")
        rows = dict(registry.run("/model", ctx).rows)
        status = native.status()
        assert rows["native kernel"].startswith(status.words())
        assert "native" in rows["cpu matmul"]
        taken = [layer for _, layer in cm.quantized_layers(loaded.model)
                 if layer.__dict__.get("_cpu_native")]
        assert bool(taken) == status.available
        assert not any(layer.__dict__.get("_cpu_kept") is not None
                       for _, layer in cm.quantized_layers(loaded.model))
        if status.available:
            assert "native kernel for decode in" in rows["cpu matmul"]
    finally:
        conv.close()
        conv.store.close()
        cm.clear(loaded.model)
