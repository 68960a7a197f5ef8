"""A rank other than 0: holds its shard of the model and of the KV cache and
does, step for step, what rank 0's ``SplitRanks`` sends it."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable

import mlx.core as mx
from mlx_lm.models.cache import trim_prompt_cache

from mlxchat.engine.distributed.channel import GO_ON, JOB, STOP, Channel
from mlxchat.engine.kv import prompt_cache
from mlxchat.engine.kv.live import LiveCache
from mlxchat.engine.results import SpeculationFigures
from mlxchat.engine.speculative.streams import plain_stream
from mlxchat.engine.turn.decode import sampling
from mlxchat.generation import GenerationSettings
from mlxchat.models import LoadedModel

log = logging.getLogger(__name__)


@dataclass
class WorkerStats:
    """What a rank did until rank 0 closed it."""

    jobs: int = 0
    fed_tokens: int = 0
    decoded_tokens: int = 0


def own_figures(loaded: LoadedModel, live: LiveCache) -> dict[str, int]:
    """This rank's weights, KV bytes and peak memory, for rank 0's gauges."""
    return {"weights": loaded.info.weights_bytes, "kv": live.nbytes,
            "peak": mx.get_peak_memory()}


class RankWorker:
    """The job loop of one rank other than 0 (see ``engine.distributed``)."""

    def __init__(self, loaded: LoadedModel, channel: Channel, *,
                 segment_jobs: dict[str, Callable[["RankWorker", dict], None]] | None = None):
        self.loaded, self.channel = loaded, channel
        self.live = LiveCache(loaded.model)
        self.stats = WorkerStats()
        mx.reset_peak_memory()  # loading is not a turn
        self._extra = segment_jobs or {}

    def run(self) -> WorkerStats:
        """Do rank 0's jobs until it says close (or a rank is lost: RankLost)."""
        while True:
            message = self.channel.receive()
            if message.kind != JOB or message.job is None:
                raise RuntimeError(f"rank {self.channel.rank}: a decode flag outside a decode")
            job = message.job
            self.stats.jobs += 1
            if job["op"] == "close":
                return self.stats
            self.do(job)

    def do(self, job: dict[str, Any]) -> None:
        op, live, model = job["op"], self.live, self.loaded.model
        if op == "reset":
            live.reset()
        elif op == "trim":
            trim_prompt_cache(live.layers, int(job["by"]))
        elif op == "quantize":
            live.layers = prompt_cache.quantize(live.layers, int(job["bits"]),
                                                int(job["head_dim"]))
        elif op == "feed":
            model(mx.array(job["tokens"])[None], cache=live.layers)
            mx.eval([c.state for c in live.layers])
            self.stats.fed_tokens += len(job["tokens"])
        elif op == "decode":
            self._decode(job)
        elif op == "probe":
            prompt_cache.probe_bytes_per_token(model, job["bits"], int(job["head_dim"]))
        elif op == "figures":
            self.channel.gather(own_figures(self.loaded, self.live))
            mx.reset_peak_memory()  # the next report is the next turn's, as rank 0's is
        elif op in self._extra:
            self._extra[op](self, job)
        else:
            raise RuntimeError(f"rank {self.channel.rank}: unknown job {op!r}")

    def _decode(self, job: dict[str, Any]) -> None:
        """Sample as rank 0 does (same seed, same logits) until it says stop
        or the stream ends by itself on both ranks alike."""
        settings = GenerationSettings(temperature=job["temperature"], top_p=job["top_p"],
                                      min_p=job["min_p"], top_k=job.get("top_k"),
                                      repetition_penalty=job["repetition_penalty"],
                                      repetition_context=int(job.get("repetition_context", 20)))
        mx.random.seed(int(job["seed"]))
        stream = plain_stream(self.loaded.model, self.live, job["tail"], budget=int(job["budget"]),
                              count=SpeculationFigures(),
                              **sampling(settings, before=job.get("before", ())))
        try:
            for _ in stream:
                self.stats.decoded_tokens += 1
                flag = self.channel.receive().kind
                if flag == STOP:
                    return
                if flag != GO_ON:
                    raise RuntimeError(f"rank {self.channel.rank}: a job inside a decode")
        finally:
            stream.close()
