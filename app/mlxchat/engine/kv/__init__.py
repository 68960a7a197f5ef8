"""The KV cache in memory: the one table of cache layer kinds (``layers``; each
row's interface: ``row``),
figures of a list of layers (``prompt_cache``), the live cache and what it
reuses (``live``, ``reuse``), and a frozen picture of it for tests (``view``)."""
