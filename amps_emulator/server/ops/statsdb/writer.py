"""The thread that writes the statistics database, so that the event loop never waits on the
disk.

The loop hands each sample over (:meth:`StatsWriter.submit`) and goes on: the jobs wait in a
queue the writer thread empties in order, one transaction per sample. The queue holds at
most ``limit`` samples: when the disk stalls that long, a new sample is dropped and counted
(``dropped``) rather than held in memory or waited for; a removal of old samples
(:meth:`StatsWriter.truncate`) is never dropped. A write that fails (a full disk, a file
damaged under the server) is counted in ``failed`` and logged, and the next sample is tried.
"""

from __future__ import annotations

import collections
import logging
import sqlite3
import threading
import time
from typing import Any

from amps_emulator.server.ops.statsdb.store import StatsFile

__all__ = ["LIMIT", "StatsWriter"]

#: samples that may wait for the disk (about 10 minutes at the default 10 s Interval)
LIMIT = 64

log = logging.getLogger("amps_emulator.admin")


class StatsWriter:
    def __init__(self, file: StatsFile, limit: int = LIMIT) -> None:
        self.file = file
        self.limit = limit
        self.dropped = 0  # samples not written: the queue was full
        self.failed = 0  # samples or removals the database refused
        self.written = 0  # samples written
        self._jobs: collections.deque[tuple[str, Any, Any]] = collections.deque()
        self._pending = 0  # samples in the queue
        self._cond = threading.Condition()
        self._logged_drop = self._logged_failure = -60.0
        self._thread = threading.Thread(target=self._run, name="amps-stats-writer", daemon=True)

    def start(self) -> StatsWriter:
        self._thread.start()
        return self

    # -- from the loop (never waits on the disk) -------------------------------------------
    def submit(self, at: int, tree: dict[str, Any]) -> bool:
        """Queue the sample ``tree`` taken at ``at`` (a statistics timestamp); False when it
        was dropped. ``tree`` must not change afterwards."""
        with self._cond:
            if self._pending >= self.limit:
                self.dropped += 1
                dropped = self.dropped
            else:
                self._pending += 1
                self._jobs.append(("sample", at, tree))
                self._cond.notify()
                return True
        if self._once_a_minute("_logged_drop"):
            log.warning("statistics database %s: the disk is %d samples behind: a sample was "
                        "dropped (%d so far)", self.file.path, self.limit, dropped)
        return False

    def truncate(self, before: int) -> None:
        """Queue the removal of the samples older than ``before`` (a statistics timestamp)."""
        self._put(("truncate", before, None))

    def barrier(self) -> threading.Event:
        """An event set once every job queued before it is done."""
        done = threading.Event()
        self._put(("barrier", done, None))
        return done

    def close(self, timeout: float = 5.0) -> bool:
        """Write what is queued, close the file and end the thread (within ``timeout``
        seconds); whether it ended."""
        if not self._thread.is_alive():
            return True
        self._put(("stop", None, None))
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning("statistics database %s: not closed within %.0fs (the disk is slow); "
                        "the samples still queued are lost", self.file.path, timeout)
            return False
        return True

    def _once_a_minute(self, what: str) -> bool:
        now = time.monotonic()
        if now - getattr(self, what) < 60.0:
            return False
        setattr(self, what, now)
        return True

    def _put(self, job: tuple[str, Any, Any]) -> None:
        with self._cond:
            self._jobs.append(job)
            self._cond.notify()

    # -- the writer thread -----------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._jobs:
                    self._cond.wait()
                kind, arg, tree = self._jobs.popleft()
                if kind == "sample":
                    self._pending -= 1
            if kind == "stop":
                self.file.close()
                return
            if kind == "barrier":
                arg.set()
                continue
            self._do(kind, arg, tree)

    def _do(self, kind: str, arg: int, tree: Any) -> None:
        try:
            if kind == "sample":
                self.file.write(arg, tree)
                self.written += 1
            else:
                removed = self.file.truncate(arg)
                log.info("statistics database %s: removed %d sample rows older than the "
                         "cut-off", self.file.path, removed)
        except (sqlite3.Error, OSError) as exc:
            self.failed += 1
            if self._once_a_minute("_logged_failure"):
                log.error("statistics database %s: cannot %s: %s (%d failures so far)",
                          self.file.path, "record a sample" if kind == "sample"
                          else "remove old samples", exc, self.failed)
        except Exception:  # a bug must not end the thread: the next sample is tried
            self.failed += 1
            log.exception("statistics database %s: %s failed", self.file.path, kind)
