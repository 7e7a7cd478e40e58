"""``--verify-config FILE``: :mod:`amps_emulator.config.cli`'s check, with the dry start-up.

Configuration imports nothing from the server, so the check takes the engines' dry start-up
(:func:`.preflight.dry_start`) as an argument; these bind it. ``amps-emulator
--verify-config`` calls them.
"""

from __future__ import annotations

from typing import TextIO

from amps_emulator.config import cli
from amps_emulator.server.ops.preflight import dry_start

__all__ = ["run_sample_config", "run_verify_config"]

run_sample_config = cli.run_sample_config


def run_verify_config(path: str, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """:func:`amps_emulator.config.cli.run_verify_config` with the server's dry start-up."""
    return cli.run_verify_config(path, out, err, dry_start=dry_start)
