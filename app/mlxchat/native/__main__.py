"""``python -m mlxchat.native [--force]``: build the native kernels (make model)."""

import sys

from mlxchat.native.build import main

sys.exit(main())
