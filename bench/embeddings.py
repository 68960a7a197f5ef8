"""Which embedder the server's embedding routes use: the documents' all-MiniLM-L6-v2
(a sentence encoder trained for similarity) or the loaded chat model's hidden
state, mean pooled (what a server gets for free from the model it already holds).

Quality on a fixed set of paraphrase pairs written here (no download): for each
sentence, is its paraphrase the nearest of all the other pairs' second
sentences (accuracy at 1), the mean reciprocal rank, and the gap between the
mean cosine of paraphrases and of unrelated pairs. Speed: sentences embedded
per second, one at a time and in one batch. Prints the figures side by side and
the ratios, with the machine's load.

    .venv/bin/python bench/embeddings.py [--model smollm2-135m] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

import mlxchat  # noqa: F401  (before MLX: it picks the BLAS MLX uses on Linux)
import mlx.core as mx  # noqa: E402

PAIRS = [
    ("How do I reset my password?", "What are the steps to change a forgotten password?"),
    ("The cat is sleeping on the sofa.", "A cat naps on the couch."),
    ("Where is the nearest train station?", "How far is the closest railway station?"),
    ("The meeting was moved to Thursday.", "They rescheduled the meeting for Thursday."),
    ("I can't connect to the wifi.", "My wireless internet connection is not working."),
    ("The soup is too salty.", "There is far too much salt in this soup."),
    ("She won the chess tournament.", "The chess championship was won by her."),
    ("Please close the window, it's cold.", "Shut the window, the room is freezing."),
    ("The stock market fell sharply today.", "Share prices dropped steeply this afternoon."),
    ("How many calories are in a banana?", "What is the energy content of one banana?"),
    ("My flight was cancelled because of the storm.",
     "The storm caused the airline to cancel my flight."),
    ("Python lists can grow as you append items.",
     "You can add elements to a Python list and it expands."),
    ("The library opens at nine in the morning.", "Doors open at 9 a.m. at the library."),
    ("He forgot his umbrella and got wet.", "Without his umbrella, he was soaked by the rain."),
    ("The printer is out of paper.", "There's no paper left in the printer."),
    ("What time does the concert start?", "When does the show begin tonight?"),
    ("Water boils at 100 degrees Celsius at sea level.",
     "At sea level, the boiling point of water is 100 °C."),
    ("The new phone has a better camera.", "The camera on the latest phone is improved."),
    ("Can you recommend a good Italian restaurant?",
     "Do you know a nice place to eat Italian food?"),
    ("The bridge is closed for repairs.", "Repairs have shut the bridge to traffic."),
    ("Exercise improves your mood.", "Working out makes people feel happier."),
    ("The invoice must be paid within thirty days.", "Payment of the bill is due in 30 days."),
    ("The museum is free on Sundays.", "There is no entrance fee at the museum on Sunday."),
    ("Turn left at the second traffic light.", "At the second set of lights, go left."),
]


def cosine_figures(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    """Rows of ``a`` against rows of ``b`` (unit vectors): the paraphrase of a[i] is b[i]."""
    sims = a @ b.T
    n = len(a)
    ranks = [1 + int((sims[i] > sims[i, i]).sum()) for i in range(n)]
    off = sims[~np.eye(n, dtype=bool)]
    return {"acc_at_1": sum(r == 1 for r in ranks) / n,
            "mrr": float(np.mean([1 / r for r in ranks])),
            "gap": float(np.mean(np.diag(sims)) - np.mean(off))}


def unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.maximum(np.linalg.norm(rows, axis=-1, keepdims=True), 1e-12)


class PooledHidden:
    """The chat model's last hidden state (after its final norm), mean over the tokens."""

    def __init__(self, loaded) -> None:
        from mlxchat.engine.turn.cpu_choice import apply

        apply(loaded, "auto")  # the quantized layers computed as the engine computes them
        self.model = loaded.model
        self.tokenizer = loaded.tokenizer

    def embed(self, texts: list[str]) -> np.ndarray:
        rows = []
        for text in texts:
            ids = mx.array(self.tokenizer.encode(text))[None]
            hidden = self.model.model(ids)
            rows.append(np.array(hidden[0].astype(mx.float32).mean(axis=0)))
        return unit(np.stack(rows))


def timed(embed, texts: list[str], rounds: int) -> tuple[np.ndarray, float, float]:
    """(vectors, sentences/s one at a time, sentences/s in one call), best of ``rounds``."""
    single, batch = [], []
    vectors = embed(texts)  # warm up
    for _ in range(rounds):
        start = time.perf_counter()
        for text in texts:
            embed([text])
        single.append(len(texts) / (time.perf_counter() - start))
        start = time.perf_counter()
        vectors = embed(texts)
        batch.append(len(texts) / (time.perf_counter() - start))
    return vectors, max(single), max(batch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="the chat model to pool")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from mlxchat.docs.embedder import default_embedder
    from mlxchat.models import load_model

    firsts = [a for a, _ in PAIRS]
    seconds = [b for _, b in PAIRS]
    texts = firsts + seconds
    print(f"load: {os.getloadavg()[0]:.1f} (1-minute average), {len(PAIRS)} paraphrase pairs")
    results = {}
    for name, embedder in (("all-MiniLM-L6-v2", default_embedder()),
                           (f"{args.model} pooled", PooledHidden(load_model(args.model)))):
        vectors, single, batch = timed(embedder.embed, texts, args.rounds)
        figures = cosine_figures(vectors[:len(PAIRS)], vectors[len(PAIRS):])
        results[name] = {**figures, "single_per_s": single, "batch_per_s": batch,
                         "dims": vectors.shape[1]}
        print(f"{name:>24}: dims {vectors.shape[1]}, acc@1 {figures['acc_at_1']:.3f}, "
              f"MRR {figures['mrr']:.3f}, cosine gap {figures['gap']:.3f}; "
              f"{single:.1f} sentences/s one by one, {batch:.1f}/s batched")
    mini, pooled = results.values()
    print("ratios (MiniLM / pooled): "
          f"embed_acc_ratio={mini['acc_at_1'] / max(pooled['acc_at_1'], 1e-9):.2f} "
          f"embed_gap_ratio={mini['gap'] / max(pooled['gap'], 1e-9):.2f} "
          f"embed_speed_ratio={mini['single_per_s'] / pooled['single_per_s']:.2f}")
    print(f"load after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
