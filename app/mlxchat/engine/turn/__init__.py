"""One turn on the engine thread: prefill in chunks and decode (``pipeline``),
the reply sampled and split into reasoning and answer (``decode``,
``reasoning``), live figures (``progress``) and prefill while the user types
(``typing_prefill``)."""
