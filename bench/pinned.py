"""TTFT of the first message in a new session that pins a ~2,000-token
document already in the prefix store, against the same message in a session
without the document: the ``pinned_ttft_ratio``. Also the first use, which
computes the document's KV (and stores it): ``pinned_recompute_ratio``.

Every session gets a fresh engine (a cold cache) and its own store row; TTFT is
wall time from the send to the first streamed text, so loading the prefix
counts. Runs alternate so machine noise spreads over all three.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

from common import median

from mlxchat.config import Settings
from mlxchat.conversation import Conversation, TextDelta, TurnDone
from mlxchat.engine import ChatEngine
from mlxchat.models.info import LoadedModel
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
    conv = Conversation(settings=settings, store=open_store(db), engine=ChatEngine(loaded),
                        model_spec="bench")
    if doc is not None and text is not None:
        conv.pin(doc, text)
    start, first, done = time.perf_counter(), None, None
    for event in conv.send(QUESTION):
        if isinstance(event, TextDelta) and first is None:
            first = time.perf_counter() - start
        elif isinstance(event, TurnDone):
            done = event
    assert done is not None
    return (first if first is not None else done.stats.ttft_s), done, conv


def measure(loaded: LoadedModel, *, doc_tokens: int = 2000, repeats: int = 3
            ) -> dict[str, float]:
    folder = Path(tempfile.mkdtemp(prefix="mlxchat-bench-pinned-"))
    home = os.environ.get("MLXCHAT_HOME")
    os.environ["MLXCHAT_HOME"] = str(folder)  # the prefix store of this run only
    try:
        text = _document(loaded, doc_tokens)
        doc = folder / "harbour.txt"
        db = folder / "b.db"
        seed_s, seed, conv = _first_message(loaded, db, doc, text)  # stores the prefix
        conv.close()
        plain, pinned, computed = [], [], []
        for k in range(repeats):
            runs = [("plain", None), ("pinned", text), ("computed", f"{text}(edition {k})")]
            for name, body in (runs if k % 2 == 0 else runs[::-1]):
                ttft, done, conv = _first_message(loaded, db, doc if body else None, body)
                {"plain": plain, "pinned": pinned, "computed": computed}[name].append(ttft)
                if name == "pinned":
                    assert conv.last_prefix.how == "loaded", conv.last_prefix
                    loaded_done = done
                elif name == "computed":
                    assert conv.last_prefix.how == "computed", conv.last_prefix
                    conv.delete_session()  # its prefix file goes with it
                conv.close()
        n = seed.stats.reused_tokens + seed.stats.prefilled_tokens
        print(f"pinned: a {len(conv.prefix_tokens()) or loaded_done.stats.reused_tokens}-token "
              f"system part ({doc_tokens}-token document); first message ttft without it "
              f"{median(plain):.3f} s, pinned from the prefix store {median(pinned):.3f} s "
              f"(reused {loaded_done.stats.reused_tokens}, prefilled "
              f"{loaded_done.stats.prefilled_tokens}), computed {median(computed):.3f} s "
              f"(first ever {seed_s:.3f} s, {n} prompt tokens)")
    finally:
        if home is None:
            os.environ.pop("MLXCHAT_HOME", None)
        else:
            os.environ["MLXCHAT_HOME"] = home
        shutil.rmtree(folder, ignore_errors=True)
    return {"pinned_ttft_ratio": median(pinned) / median(plain),
            "pinned_recompute_ratio": median(computed) / median(plain)}


if __name__ == "__main__":
    import sys

    from common import pick_model

    quick = "--quick" in sys.argv
    model = pick_model("small-llama" if quick else "smollm2-135m")
    print("ratios: " + " ".join(f"{k}={v:.3f}" for k, v in
                                measure(model, repeats=2 if quick else 3).items()))
