"""Command-line helpers the server wires to ``--sample-config`` and ``--verify-config FILE``.

:func:`run_sample_config` prints the sample and returns exit status 0.
:func:`run_verify_config` loads a file and returns 0 when it is valid (warnings are printed
to ``err`` but do not fail) or 1 after printing every error, one ``file:line: reason`` per line.
A file that loads is then started dry by the ``dry_start`` it is given (the server's
:func:`amps_emulator.server.ops.preflight.dry_start`: every engine built in a scratch directory, no
port bound), so verify refuses exactly what start-up would refuse.

``dry_start`` is passed in rather than imported: configuration sits below the server and
imports nothing from it. :mod:`amps_emulator.server.ops.verify` binds the server's dry start-up
for ``amps-emulator --verify-config``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TextIO

from .errors import ConfigError, ConfigIssue
from .loader import load_config
from .model import Config
from .sample import sample_config

#: builds every engine of a configuration without serving it: (the issues that would stop
#: start-up, the warnings start-up would log)
DryStart = Callable[[Config], tuple[list[ConfigIssue], list[str]]]



def run_sample_config(out: TextIO | None = None) -> int:
    (out or sys.stdout).write(sample_config())
    return 0


def run_verify_config(path: str, out: TextIO | None = None, err: TextIO | None = None, *,
                      dry_start: DryStart) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        cfg = load_config(path)
        # the rules only the engines check: build them as start-up would, in a scratch directory
        issues, startup_warnings = dry_start(cfg)
        if issues:
            raise ConfigError(issues)
    except ConfigError as e:
        for issue in e.errors:
            err.write(f"error: {issue}\n")
        err.write(f"{path}: {len(e.errors)} error(s); configuration rejected\n")
        return 1
    for issue in cfg.warnings:
        err.write(f"warning: {issue}\n")
    for message in startup_warnings:  # what the engines warn about when they start
        err.write(f"warning: {message}\n")
    out.write(
        f"{path}: configuration OK ({len(cfg.transports)} transport(s), {len(cfg.sow_topics)} SOW "
        f"topic(s), {len(cfg.queues)} queue(s), {len(cfg.views)} view(s), "
        f"{len(cfg.conflated_topics)} conflated topic(s), {len(cfg.actions)} action(s), "
        f"{len(cfg.warnings) + len(startup_warnings)} warning(s))\n"
    )
    return 0
