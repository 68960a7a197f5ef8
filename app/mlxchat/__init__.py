"""mlxchat: a private chat app for the terminal on local MLX models."""

__version__ = "0.1.0"
