"""``python -m amps_emulator.config --sample-config`` / ``... --verify-config FILE``.

The one file in ``config/`` that names the server: a launcher that nothing imports (so it is
in no import cycle), like the console scripts. Verifying needs the server's dry start-up,
which :mod:`amps_emulator.config.cli` takes as an argument instead of importing it.
"""

import sys

from amps_emulator.server.verify import main

sys.exit(main())
