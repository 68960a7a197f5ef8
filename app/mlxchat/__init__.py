"""mlxchat: a private chat app for the terminal on local MLX models."""

__version__ = "0.1.0"

from mlxchat import open_files as _open_files

_open_files.keep_at_import()  # before anything imports mlx-lm, which would lower the limit
