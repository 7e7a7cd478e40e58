"""A dry start-up, so ``--verify-config`` and start-up agree.

Some rules are only checked where a definition is turned into a working engine (a queue's
limits, a view's projection, a filter's syntax). :func:`dry_start` builds every engine of a
configuration exactly as :meth:`Server.start` does, but against a throw-away directory (the
journal, the SOW files) and without binding any transport or running any action, then stops
it again. Whatever would stop the real start-up is returned as located
:class:`~amps_emulator.config.ConfigIssue` records; nothing the configuration names on disk is
touched.

What it does not try: binding the transports' ports and opening the configured directories,
which depend on the machine at the time of start-up (the server reports those as one line,
``cannot start: ...``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
import threading
from typing import Any

import msgspec

from amps_emulator.config import ConfigError, ConfigIssue

log = logging.getLogger("amps_emulator.preflight")


def sandboxed(config: Any, directory: str) -> Any:
    """``config`` with every file it names moved under ``directory`` and no transport."""
    replace = msgspec.structs.replace
    sow_dir = os.path.join(directory, "sow")
    changes: dict[str, Any] = {"transports": (), "sow_directory": sow_dir}
    if config.transaction_log is not None:
        changes["transaction_log"] = replace(
            config.transaction_log, journal_directory=os.path.join(directory, "journal"),
            journal_archive_directory=None, journal_size=64 * 1024, preallocated_journal_files=1)
    changes["sow_topics"] = tuple(
        replace(t, resolved_file_name=os.path.join(sow_dir, "topic.sow") if t.resolved_file_name else None)
        for t in config.sow_topics)
    return replace(config, **changes)


def startup_failure(exc: BaseException, config: Any) -> list[ConfigIssue]:
    """The located issues a start-up exception stands for."""
    if isinstance(exc, ConfigError):
        return list(exc.errors)
    return [ConfigIssue(getattr(config, "source", "") or "<config>", 0,
                        f"the server cannot start with this configuration: {type(exc).__name__}: {exc}")]


async def _start_stop(config: Any) -> None:
    from amps_emulator.server.app import Server

    server = Server(config)  # (the actions are read, so their errors show, but never run)
    server.actions.enabled = False
    try:
        await server.start()
    finally:
        await server.stop()


class WarningCollector(logging.Handler):
    """Keeps the message of every WARNING-or-above record it is handed."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def dry_start(config: Any) -> tuple[list[ConfigIssue], list[str]]:
    """Every issue that would stop :meth:`Server.start` on ``config`` (none: it starts), and
    the warnings start-up would log (e.g. an action it skips)."""
    issues: list[ConfigIssue] = []
    collect = WarningCollector()

    def run() -> None:
        with tempfile.TemporaryDirectory(prefix="amps-verify-") as d:
            quiet = logging.getLogger("amps_emulator")
            saved = quiet.level, quiet.propagate, quiet.handlers[:]
            quiet.handlers[:] = [collect]  # the engines' start-up chatter is not the point here
            quiet.setLevel(logging.WARNING)
            quiet.propagate = False
            try:
                asyncio.run(_start_stop(sandboxed(config, d)))
            except Exception as exc:  # noqa: BLE001 - every failure is reported, located
                log.debug("dry start-up failed", exc_info=True)
                issues.extend(startup_failure(exc, config))
            finally:
                quiet.setLevel(saved[0])
                quiet.propagate = saved[1]
                quiet.handlers[:] = saved[2]

    # a thread of its own: the caller may already run an event loop
    t = threading.Thread(target=run, name="amps-verify", daemon=True)
    t.start()
    t.join()
    return issues, [] if issues else collect.messages
