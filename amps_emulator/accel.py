"""Which implementation of the publish hot path runs: compiled or pure Python.

The compiled half is ``amps_emulator._speedups`` (``_speedups.c``): the journal frame encoder
(``journal.record.append_record``, and ``journal.base.publish_run`` for a run of plain
publishes), the framing loop (``protocol.codec.scan_frames``), the
SowKey of a one-field Key (``sow.keys.sow_key``), a fan-out delivery's frame
(``protocol.codec.frame_parts``) and a plain replay's frames from the journal's stored ones
(``server.delivery.replay_frames``). It is
built when the package is installed on a machine with a C compiler (``hatch_build.py``; in a
source checkout ``python hatch_build.py --inplace``), and is optional: without it, or with
``AMPS_EMULATOR_PURE=1`` in the environment, the pure-Python twins run, which give the same
results (the unit tests run both on the same inputs). The server names the one in use in an
INFO line at start (:data:`DESCRIPTION`).
"""

from __future__ import annotations

import importlib
import os

#: set (to anything but ``0``) to run the pure-Python hot path even when the extension is built
PURE_ENV = "AMPS_EMULATOR_PURE"


def _choose() -> tuple[bool, str]:
    if os.environ.get(PURE_ENV, "0") not in ("", "0"):
        return False, f"pure Python ({PURE_ENV} is set)"
    try:
        importlib.import_module("amps_emulator._speedups")
    except ImportError as exc:
        return False, f"pure Python (the compiled extension is not available: {exc})"
    return True, "compiled (amps_emulator._speedups)"


#: True when the compiled extension runs the hot path
COMPILED, DESCRIPTION = _choose()
