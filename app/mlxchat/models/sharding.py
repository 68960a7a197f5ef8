"""Can a model be split over N ranks, and how: decided from its config.json
before any weight is read, so a model mlx-lm cannot split is refused in one
line with the numbers instead of crashing inside ``Model.shard``.

Tensor parallel (``Model.shard``) splits every layer's heads and feed-forward
widths across the ranks; pipeline parallel (``PipelineMixin.pipeline``) gives
each rank a run of whole layers. Tensor is preferred where mlx-lm has both.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Literal

from mlxchat.models.errors import ModelError

Mode = Literal["tensor", "pipeline"]

_TENSOR_WIDTHS = (("num_attention_heads", "attention heads"),
                  ("num_key_value_heads", "KV heads"),
                  ("intermediate_size", "feed-forward width"),
                  ("moe_intermediate_size", "expert feed-forward width"),
                  ("shared_expert_intermediate_size", "shared-expert width"))


@dataclass(frozen=True)
class ShardPlan:
    """How a model is split: ``mode`` over ``ranks`` ranks."""

    mode: Mode
    ranks: int
    model_type: str

    @property
    def label(self) -> str:
        """'2 ranks · tensor' (the gauges add the bytes per rank)."""
        return f"{self.ranks} ranks · {self.mode}"


@dataclass(frozen=True)
class Support:
    """What mlx-lm can do with a model type."""

    tensor: bool
    pipeline: bool


def support(model_type: str) -> Support:
    """Whether mlx-lm's module for ``model_type`` has ``Model.shard`` and a
    pipeline-capable inner model (a ``PipelineMixin``)."""
    from mlx_lm.models.pipeline import PipelineMixin

    try:
        module = importlib.import_module(f"mlx_lm.models.{model_type}")
    except ImportError:
        return Support(False, False)
    model_class = getattr(module, "Model", None)
    tensor = model_class is not None and callable(getattr(model_class, "shard", None))
    pipeline = any(isinstance(v, type) and issubclass(v, PipelineMixin) and v is not PipelineMixin
                   for v in vars(module).values())
    return Support(tensor, pipeline)


def _text(config: dict) -> dict:
    return config.get("text_config", config)


def tensor_problems(config: dict, ranks: int) -> list[str]:
    """What stops ``config``'s model from being split tensor-parallel on ``ranks``
    ranks: each width that does not divide, with its number; [] when it splits."""
    cfg = _text(config)
    problems = [f"{label} {int(cfg[key])} % {ranks} = {int(cfg[key]) % ranks}"
                for key, label in _TENSOR_WIDTHS
                if isinstance(cfg.get(key), int) and int(cfg[key]) % ranks]
    group = (config.get("quantization") or {}).get("group_size")
    if group and not problems:
        # A sharded-to-all layer splits its input: each rank's part must hold whole groups.
        heads, hidden = int(cfg.get("num_attention_heads") or 0), int(cfg.get("hidden_size") or 0)
        head_dim = int(cfg.get("head_dim") or (hidden // heads if heads else 0))
        inputs = (("attention output", heads * head_dim), *(
            (label, int(cfg[key])) for key, label in _TENSOR_WIDTHS[2:]
            if isinstance(cfg.get(key), int)))
        problems = [f"{label} {n} / {ranks} = {n // ranks} is not a multiple of the "
                    f"quantization group {group}" for label, n in inputs
                    if n and (n // ranks) % group]
    return problems


def plan_split(config: dict, ranks: int, *, name: str = "the model",
               mode: Mode | None = None) -> ShardPlan:
    """How to split ``config``'s model over ``ranks`` ranks, or ModelError in one
    line that says why it cannot be (with the numbers). ``mode`` forces one."""
    model_type = str(config.get("model_type", "unknown"))
    if ranks < 2:
        raise ModelError(f"splitting {name} needs at least 2 ranks, not {ranks}")
    can = support(model_type)
    if not (can.tensor or can.pipeline):
        raise ModelError(f"{name} ({model_type}) cannot be split across ranks: mlx-lm has "
                         "neither Model.shard nor pipeline support for it")
    want = mode or ("tensor" if can.tensor else "pipeline")
    if want == "tensor":
        if not can.tensor:
            raise ModelError(f"{name} ({model_type}) has no tensor-parallel Model.shard in "
                             "mlx-lm; pipeline parallel is available")
        problems = tensor_problems(config, ranks)
        if problems and can.pipeline and mode is None:
            want = "pipeline"
        elif problems:
            raise ModelError(f"{name} cannot be split across {ranks} ranks: "
                             + "; ".join(problems))
    if want == "pipeline":
        if not can.pipeline:
            raise ModelError(f"{name} ({model_type}) has no pipeline support in mlx-lm")
        layers = int(_text(config).get("num_hidden_layers") or 0)
        if layers < ranks:
            raise ModelError(f"{name} cannot be split across {ranks} ranks: "
                             f"{layers} layers for {ranks} pipeline stages")
    return ShardPlan(want, ranks, model_type)


def split_fingerprint(fingerprint: str, plan: ShardPlan, rank: int) -> str:
    """The fingerprint of one rank's shard: its KV files are kept apart from
    the whole model's and other layouts' (``engine.snapshot.layout_problem``)."""
    return f"{fingerprint}@{plan.mode}{plan.ranks}r{rank}"


def apply_plan(model: Any, plan: ShardPlan, group: Any) -> None:
    """Split a (lazily loaded) model over ``group`` as ``plan`` says."""
    if plan.mode == "tensor":
        model.shard(group)
    else:
        model.model.pipeline(group)
