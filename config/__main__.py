"""``python -m config --sample-config`` / ``python -m config --verify-config FILE``."""

import sys

from .cli import main

sys.exit(main())
