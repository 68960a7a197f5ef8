"""mlxchat: a private chat app for the terminal on local MLX models."""

from mlxchat import blas as _blas

_blas.ensure()  # before anything imports mlx.core: an optimized BLAS serves its matmuls

__version__ = "0.1.0"
