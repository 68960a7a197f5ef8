"""The chat engine: a model, its live KV cache and one generation thread
(``core.ChatEngine``), in subpackages by concept, bottom to top: ``thread``,
``prompt``, ``kv``, ``disk``, ``speculative``, ``turn``, ``distributed``.
``events`` holds the plain data a turn reports (no MLX) and ``interface`` what
a conversation needs of an engine. Nothing is handed on from here: import a
name from the module that defines it. No UI imports.
"""
