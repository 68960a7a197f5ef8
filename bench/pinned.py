"""TTFT of the first message in a new session that pins a ~2,000-token
document already in the prefix store, against the same message in a session
without the document: the ``pinned_ttft_ratio``. Also the first use, which
computes the document's KV (and stores it): ``pinned_recompute_ratio``.

Every session gets a fresh engine (a cold cache) and its own store row; TTFT is
wall time from the send to the first streamed text, so loading the prefix
counts. Runs alternate so machine noise spreads over both.
"""

from __future__ import annotations

from pathlib import Path

from common import median, temporary_home, wall_ttft

from mlxchat.config import Settings
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.events import TurnDone
from mlxchat.models import LoadedModel
from mlxchat.session.conversation import Conversation
from mlxchat.store import open_store

FACT = ("Harbour rule {i}: boats of class {c} moor at pier {p} and pay {f} coins a night; "
        "the harbour master checks them at dawn. ")
QUESTION = "Where do class B boats moor, and what do they pay?"


def _document(loaded: LoadedModel, tokens: int) -> str:
    tok, text, i = loaded.tokenizer, "", 0
    while len(tok.encode(text)) < tokens:
        text += FACT.format(i=i, c="ABCD"[i % 4], p=i % 9 + 1, f=3 + i % 7)
        i += 1
    return text


def _first_message(loaded: LoadedModel, db: Path, doc: Path | None, text: str | None
                   ) -> tuple[float, TurnDone, Conversation]:
    settings = Settings()
    settings.generation.temperature = 0.0
    settings.generation.max_tokens = 4
    settings.generation.speculative = "off"  # auto's one-off timing pass would delay a turn
    conv = Conversation(settings=settings, store=open_store(db), engine=ChatEngine(loaded),
                        model_spec="bench")
    if doc is not None and text is not None:
        conv.pins.pin(doc, text)
    ttft, done = wall_ttft(conv, QUESTION)
    return ttft, done, conv


def measure(loaded: LoadedModel, *, doc_tokens: int = 2000, repeats: int = 3
            ) -> dict[str, float]:
    with temporary_home("mlxchat-bench-pinned-") as folder:  # this run's prefix store only
        text = _document(loaded, doc_tokens)
        doc = folder / "harbour.txt"
        db = folder / "b.db"
        # The first session computes the document's KV (on the bundled model at
        # ~10 tok/s, minutes: measured once) and stores it.
        computed, first, conv = _first_message(loaded, db, doc, text)
        assert conv.pins.last_prefix is not None and conv.pins.last_prefix.how == "computed"
        conv.close()
        plain, pinned = [], []
        for k in range(repeats):
            for body in ((None, text) if k % 2 == 0 else (text, None)):
                ttft, done, conv = _first_message(loaded, db, doc if body else None, body)
                if body:
                    assert conv.pins.last_prefix is not None and conv.pins.last_prefix.how == "loaded"
                    pinned.append(ttft)
                    shared = done
                else:
                    plain.append(ttft)
                    alone = done
                conv.close()
        print(f"pinned: a {doc_tokens}-token document ({shared.stats.reused_tokens}-token "
              f"system part); first message ttft without it {median(plain):.3f} s "
              f"(prefilled {alone.stats.prefilled_tokens}), pinned from "
              f"the prefix store {median(pinned):.3f} s (prefilled "
              f"{shared.stats.prefilled_tokens}), computed {computed:.3f} s (prefilled "
              f"{first.stats.prefilled_tokens})")
    return {"pinned_ttft_ratio": median(pinned) / median(plain),
            "pinned_recompute_ratio": computed / median(plain)}


if __name__ == "__main__":
    import sys

    from common import pick_model

    quick = "--quick" in sys.argv
    model = pick_model("small-llama" if quick else "smollm2-135m")
    print("ratios: " + " ".join(f"{k}={v:.3f}" for k, v in
                                measure(model, repeats=2 if quick else 3).items()))
