"""The statistics database file (``Admin/FileName``): opening and checking it, writing a
sample, removing old samples, reading the samples back at start-up.

A :class:`StatsFile` is used by one thread at a time: the Admin interface opens it (and reads
the history back) in a worker thread before the first sample, then hands it to the writer
thread (:mod:`.writer`), the only one to touch it from then on. The file is in WAL mode, so
``sqlite3`` and the ``amps-sqlite3`` tools can read it while the server writes, and one
sample is one transaction. Layout and values: :mod:`.schema`.
"""

from __future__ import annotations

import os
import re
import sqlite3
import time
from collections.abc import Iterator
from typing import Any

from amps_emulator.server.ops.statsdb.schema import TABLES, Table, from_amps_time, rows_of

__all__ = ["StatsFile", "StatsFileError", "read_samples"]

_OURS = re.compile(r"[HI][A-Z_]+_(STATIC|DYNAMIC)")
_SQL_TYPE = {int: "integer", float: "real", str: "text"}


class StatsFileError(Exception):
    """The file cannot be the statistics database (the message names it and says why)."""


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class StatsFile:
    """An open statistics database (see the module docstring); ``index``: an index on
    ``static_id`` of every DYNAMIC table (AMPS's ``Statistics/Indexing/Enabled``)."""

    def __init__(self, path: str, index: bool = False) -> None:
        self.path = path
        directory = os.path.dirname(os.path.abspath(path))
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as exc:
            raise StatsFileError(f"{path}: cannot create its directory {directory}: "
                                 f"{exc.strerror or exc}") from None
        if os.path.isdir(path):
            raise StatsFileError(f"{path}: is a directory")
        if not os.access(directory, os.W_OK | os.X_OK):
            raise StatsFileError(f"{path}: its directory {directory} cannot be written")
        try:
            self.db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        except sqlite3.Error as exc:
            raise StatsFileError(f"{path}: cannot open: {exc}") from None
        #: each table's columns, in order
        self.columns: dict[str, list[str]] = {}
        #: each STATIC table's objects: identity -> static_id
        self.identities: dict[str, dict[tuple, int]] = {}
        self._inserts: dict[tuple[str, tuple[str, ...]], str] = {}
        #: figures for ``/amps/instance/statistics``
        self.file_size = 0
        self.disk_per_sample = 0
        self.total_commit_time = 0.0
        try:
            self._open(index)
        except sqlite3.Error as exc:
            self.db.close()
            raise StatsFileError(f"{path}: not a statistics database AMPS can use: {exc}") from None
        self.file_size = self._size()

    def _open(self, index: bool) -> None:
        db = self.db
        names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        if names and not any(_OURS.fullmatch(n) for n in names):  # (left untouched)
            raise sqlite3.DatabaseError(f"it holds other tables ({', '.join(sorted(names)[:3])}"
                                        f"{', ...' if len(names) > 3 else ''})")
        db.execute("PRAGMA journal_mode=WAL").fetchone()
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("BEGIN")
        try:
            for t in TABLES:
                db.execute(f"CREATE TABLE IF NOT EXISTS {_q(t.static)} "
                           "(static_id integer PRIMARY KEY, oid text)")
                db.execute(f"CREATE TABLE IF NOT EXISTS {_q(t.dynamic)} (timestamp integer, "
                           "static_id integer, PRIMARY KEY (timestamp, static_id))")
                if index:
                    db.execute(f"CREATE INDEX IF NOT EXISTS {_q(t.dynamic + '_static_id')} "
                               f"ON {_q(t.dynamic)} (static_id)")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        for t in TABLES:
            for name in (t.static, t.dynamic):
                self.columns[name] = [r[1] for r in db.execute(f"PRAGMA table_info({_q(name)})")]
            known: dict[tuple, int] = {}
            cur = db.execute(f"SELECT * FROM {_q(t.static)}")
            cols = [c[0] for c in cur.description]
            for row in cur:
                fields = dict(zip(cols, row, strict=True))
                sid = fields.pop("static_id")
                known[_identity(str(fields.pop("oid") or ""),
                                {k: v for k, v in fields.items() if v is not None})] = sid
            self.identities[t.static] = known

    def _size(self) -> int:
        size = 0
        for name in (self.path, self.path + "-wal"):
            try:
                size += os.path.getsize(name)
            except OSError:
                pass
        return size

    def close(self) -> None:
        self.db.close()

    # -- writing ---------------------------------------------------------------------------
    def write(self, at: int, tree: dict[str, Any]) -> int:
        """Record the ``/amps`` ``tree`` sampled at ``at`` (a statistics timestamp), in one
        transaction; the rows written."""
        started = time.perf_counter()
        db = self.db
        n = 0
        db.execute("BEGIN")
        try:
            for t in TABLES:
                for oid, fixed, figures in rows_of(tree, t):
                    sid = self._static_id(t, oid, fixed)
                    self._insert(t.dynamic, {"timestamp": at, "static_id": sid, **figures})
                    n += 1
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        self.total_commit_time += time.perf_counter() - started
        size = self._size()
        self.disk_per_sample, self.file_size = max(0, size - self.file_size), size
        return n

    def _static_id(self, t: Table, oid: str, fixed: dict[str, str]) -> int:
        known = self.identities[t.static]
        key = _identity(oid, fixed)
        sid = known.get(key)
        if sid is None:
            cur = self._insert(t.static, {"oid": oid, **fixed})
            sid = known[key] = int(cur.lastrowid or 0)
        return sid

    def _insert(self, table: str, values: dict[str, Any]) -> sqlite3.Cursor:
        cols = tuple(values)
        sql = self._inserts.get((table, cols))
        if sql is None:
            have = self.columns[table]
            for c in cols:
                if c not in have:
                    kind = "text" if table.endswith("_STATIC") else _SQL_TYPE[type(values[c])]
                    self.db.execute(f"ALTER TABLE {_q(table)} ADD COLUMN {_q(c)} {kind}")
                    have.append(c)
            sql = self._inserts[(table, cols)] = (
                f"INSERT OR REPLACE INTO {_q(table)} ({', '.join(map(_q, cols))}) "
                f"VALUES ({', '.join('?' * len(cols))})")
        return self.db.execute(sql, tuple(values.values()))

    def truncate(self, before: int) -> int:
        """Remove the samples older than ``before`` (a statistics timestamp), and the objects
        no sample refers to any more; the DYNAMIC rows removed."""
        db = self.db
        removed = 0
        db.execute("BEGIN")
        try:
            for t in TABLES:
                removed += db.execute(f"DELETE FROM {_q(t.dynamic)} WHERE timestamp < ?",
                                      (before,)).rowcount
                gone = {r[0] for r in db.execute(
                    f"SELECT static_id FROM {_q(t.static)} WHERE static_id NOT IN "
                    f"(SELECT static_id FROM {_q(t.dynamic)})")}
                if gone:
                    db.executemany(f"DELETE FROM {_q(t.static)} WHERE static_id = ?",
                                   [(sid,) for sid in gone])
                    known = self.identities[t.static]
                    for key in [k for k, sid in known.items() if sid in gone]:
                        del known[key]
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        self.file_size = self._size()
        return removed

    @property
    def last(self) -> int | None:
        """The time of the last sample in the file (a statistics timestamp), if any."""
        got = [self.db.execute(f"SELECT max(timestamp) FROM {_q(t.dynamic)}").fetchone()[0]
               for t in TABLES]
        return max((g for g in got if g is not None), default=None)


def read_samples(db: sqlite3.Connection, keep: int, upto: int
                 ) -> Iterator[tuple[int, dict[Table, list[dict[str, Any]]]]]:
    """The last ``keep`` samples of the database ``db`` up to ``upto`` (a statistics
    timestamp, included), oldest first: ``(microseconds since the epoch, each table's rows
    at that sample)``."""
    union = " UNION ".join(f"SELECT timestamp FROM {_q(t.dynamic)} WHERE timestamp <= ?"
                           for t in TABLES)
    stamps = [r[0] for r in db.execute(
        f"SELECT timestamp FROM ({union}) ORDER BY timestamp DESC LIMIT ?",
        (*[upto] * len(TABLES), keep))]
    if not stamps:
        return
    stamps.reverse()
    readers = [_Rows(db, t, stamps[0], upto) for t in TABLES]
    for at in stamps:
        yield from_amps_time(at), {r.table: r.take(at) for r in readers}


class _Rows:
    """A table's rows from a time on, in time order (STATIC joined with DYNAMIC)."""

    def __init__(self, db: sqlite3.Connection, t: Table, since: int, upto: int) -> None:
        self.table = t
        self._cur = db.execute(
            f"SELECT * FROM {_q(t.dynamic)} JOIN {_q(t.static)} USING (static_id) "
            "WHERE timestamp BETWEEN ? AND ? ORDER BY timestamp", (since, upto))
        self._cols = [c[0] for c in self._cur.description]
        self._next = self._cur.fetchone()

    def take(self, at: int) -> list[dict[str, Any]]:
        out = []
        while self._next is not None and self._next[0] <= at:
            if self._next[0] == at:
                out.append(dict(zip(self._cols, self._next, strict=True)))
            self._next = self._cur.fetchone()
        return out


def _identity(oid: str, fixed: dict[str, Any]) -> tuple:
    return oid, tuple(sorted((k, str(v)) for k, v in fixed.items()))
