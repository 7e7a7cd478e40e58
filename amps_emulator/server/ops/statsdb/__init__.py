"""The statistics database in a file (``Admin/FileName``): AMPS's layout of STATIC and
DYNAMIC tables (:mod:`.schema`), the file (:mod:`.store`) and the thread that writes it
(:mod:`.writer`). :func:`read_history` reads the file's samples back into the history the
``t0``/``t1`` queries answer from, so that it survives a restart."""

from __future__ import annotations

import sqlite3
import threading

from amps_emulator.server.ops.stats_history import KEEP, StatsHistory, format_time
from amps_emulator.server.ops.statsdb.schema import TABLES, from_amps_time, to_amps_time, tree_of
from amps_emulator.server.ops.statsdb.store import StatsFile, StatsFileError, read_samples
from amps_emulator.server.ops.statsdb.writer import StatsWriter

__all__ = ["TABLES", "StatsFile", "StatsFileError", "StatsWriter", "from_amps_time",
           "read_history", "to_amps_time"]


def read_history(path: str, upto: int, keep: int = KEEP,
                 stop: threading.Event | None = None) -> StatsHistory:
    """A history holding the last ``keep`` samples of the statistics database at ``path``
    up to ``upto`` (a statistics timestamp), read on a connection of its own (the writer
    may write meanwhile); ``stop`` set: what was read so far. ``StatsFileError`` when the
    file cannot be read. Blocks on the disk: run it off the loop."""
    history = StatsHistory(keep)
    try:
        db = sqlite3.connect(path)
    except sqlite3.Error as exc:
        raise StatsFileError(f"{path}: cannot open: {exc}") from None
    try:
        for at_us, rows in read_samples(db, keep, upto):
            if stop is not None and stop.is_set():
                break
            tree = tree_of(rows)
            tree["amps"].setdefault("instance", {})["timestamp"] = format_time(at_us)
            history.record(at_us, tree)
    except sqlite3.Error as exc:
        raise StatsFileError(f"{path}: cannot read its samples back: {exc}") from None
    finally:
        db.close()
    return history
