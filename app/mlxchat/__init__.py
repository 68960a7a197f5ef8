"""mlxchat: a private chat app for the terminal on local MLX models."""

import os

# mlx-lm imports transformers for its tokenizers only: its advice that PyTorch
# is missing (printed at import) is noise here.
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

from mlxchat import blas as _blas  # noqa: E402

_blas.ensure()  # before anything imports mlx.core: an optimized BLAS serves its matmuls

__version__ = "0.1.0"

from mlxchat import open_files as _open_files

_open_files.keep_at_import()  # before anything imports mlx-lm, which would lower the limit
