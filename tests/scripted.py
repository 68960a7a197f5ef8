"""A reply forced to a text: tiny random models cannot choose to call a tool,
so a test steers the model's next reply with a logits processor, as mlx-lm
applies one. The model still runs and its cache holds what it wrote; only
the choice of each token is the script's."""

from __future__ import annotations

import mlx.core as mx

from mlxchat.engine.turn import decode


class Scripted:
    """The model's next reply steered to ``text`` (then its end token). Where
    the reply is comes from the tokens so far."""

    def __init__(self, tokenizer, monkeypatch):
        self.tok, self.script = tokenizer, []
        self.queue: list[list[int]] = []
        self.vocab = tokenizer.get_vocab()
        real = decode.sampling
        monkeypatch.setattr(decode, "sampling", lambda settings, **kw: {
            **real(settings, **kw), "processors": [self._force]})

    def reply(self, text: str, *, end: str | None = None) -> None:
        """The next reply: ``text``, then ``end`` (default ``<|im_end|>``, else
        the tokenizer's first end token)."""
        self.script = self._ids(text, end)

    def replies(self, *texts: str) -> None:
        """The next replies, one after another (each moves on once the last ended)."""
        self.script, self.queue = self._ids(texts[0]), [self._ids(t) for t in texts[1:]]

    def _ids(self, text: str, end: str | None = None) -> list[int]:
        vocab = self.vocab
        end_id = vocab[end] if end else vocab.get("<|im_end|>", min(self.tok.eos_token_ids))
        return self.tok.encode(text, add_special_tokens=False) + [end_id]

    def _force(self, tokens, logits):
        seen = tokens.tolist()
        done = next(k for k in range(min(len(seen), len(self.script)), -1, -1)
                    if k == 0 or seen[-k:] == self.script[:k])
        wanted = self.script[min(done, len(self.script) - 1)]
        if done >= len(self.script) - 1 and self.queue:  # this reply ends here
            self.script = self.queue.pop(0)
        return mx.where(mx.arange(logits.shape[-1]) == wanted, 0.0, -1e9) + 0 * logits
