"""The statistics database in a file (``Admin/FileName``): AMPS's layout of STATIC and
DYNAMIC tables (:mod:`.schema`), the file (:mod:`.store`) and the thread that writes it
(:mod:`.writer`). :func:`open_history` opens the file and reads its samples back into the
history the ``t0``/``t1`` queries answer from, so that it survives a restart."""

from __future__ import annotations

import sqlite3

from amps_emulator.server.ops.stats_history import KEEP, StatsHistory, format_time
from amps_emulator.server.ops.statsdb.schema import TABLES, from_amps_time, to_amps_time, tree_of
from amps_emulator.server.ops.statsdb.store import StatsFile, StatsFileError
from amps_emulator.server.ops.statsdb.writer import StatsWriter

__all__ = ["TABLES", "StatsFile", "StatsFileError", "StatsWriter", "from_amps_time",
           "open_history", "to_amps_time"]


def open_history(path: str, keep: int = KEEP, index: bool = False
                 ) -> tuple[StatsFile, StatsHistory]:
    """The statistics database at ``path`` (created when missing), and a history holding its
    last ``keep`` samples; ``StatsFileError`` when the file cannot be one. Blocks on the
    disk: run it off the loop."""
    file = StatsFile(path, index=index)
    history = StatsHistory(keep)
    try:
        for at_us, rows in file.samples(keep):
            tree = tree_of(rows)
            tree["amps"].setdefault("instance", {})["timestamp"] = format_time(at_us)
            history.record(at_us, tree)
    except sqlite3.Error as exc:
        file.close()
        raise StatsFileError(f"{path}: cannot read its samples back: {exc}") from None
    return file, history
