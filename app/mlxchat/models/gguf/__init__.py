"""GGUF files (llama.cpp's format): read a header (``header``, or ``summary``
without its arrays), map an architecture's tensors and config to mlx-lm's
(``arch``), its tensor types to MLX arrays (``quants``), its vocabulary to a
tokenizer (``vocab``), and turn the whole file into a cached MLX model folder
(``importer``).

Imports the models package's root modules (errors, precision, tokenizer),
never ``vision`` or ``testing``.
"""
