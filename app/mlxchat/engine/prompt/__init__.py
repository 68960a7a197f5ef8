"""A conversation as prompt tokens: the chat template rendered as transformers
renders it (``jinja``), message text kept out of control tokens (``control``),
the render itself (``render``), the ledger's per-message deltas (``delta``) and
fitting the window (``fit``)."""
