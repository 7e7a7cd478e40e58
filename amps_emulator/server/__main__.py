"""``python -m amps_emulator.server``: the command line in :mod:`amps_emulator.server.ops.cli`."""

import sys

from amps_emulator.server.ops.cli import main

if __name__ == "__main__":
    sys.exit(main())
