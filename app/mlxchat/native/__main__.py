"""``python -m mlxchat.native [--force]``: build the native kernels (make model)."""

import sys

from mlxchat.native.build import main

if __name__ == "__main__":  # importing it (the import probes do) builds nothing
    sys.exit(main())
