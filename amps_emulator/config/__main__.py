"""``python -m amps_emulator.config --sample-config`` / ``python -m amps_emulator.config --verify-config FILE``."""

import sys

from .cli import main

sys.exit(main())
