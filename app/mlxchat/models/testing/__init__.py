"""Tiny random models, for tests and benchmarks only: no module of the app
imports this package (tests/unit/test_import_graph.py holds it).

``text``: a tiny llama with a byte-level tokenizer (``write_tiny_model``);
``vision``: a tiny Qwen-VL and the writer the other vision families share;
``gemma3``, ``smolvlm``, ``mistral3``: one tiny model per vision family. Each
writes a folder the app loads like a downloaded one.
"""
