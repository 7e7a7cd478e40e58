"""The tables of an LMDB environment: each one named database of a :class:`sow.storage.lmdbenv.LmdbEnv`.

:class:`LmdbOrderedSet` (the memo and expiry indexes), :class:`LmdbHashTable` (the hash
indexes) and :class:`LmdbKVTable` (the history).  Their writes go into the environment's
batch like every other SOW write; their reads use its :meth:`~sow.storage.lmdbenv.LmdbEnv.reading`
transaction.  :mod:`sow.storage.memory_tables` mirrors them method for method in memory.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from itertools import islice

import lmdb

from amps_emulator.sow.storage.lmdbenv import LmdbEnv

__all__ = ["LmdbHashTable", "LmdbKVTable", "LmdbOrderedSet"]

_RANGE_RUN = 256  # index keys LmdbOrderedSet.range reads at a time


def _prefix_keys(env: LmdbEnv, db, prefix: bytes) -> list[bytes]:
    """The keys of ``db`` that start with ``prefix``, ascending."""
    n = len(prefix)
    with env.reading() as txn:
        cur = txn.cursor(db)
        if not cur.set_range(prefix):
            return []
        out = []
        for k in cur.iternext(keys=True, values=False):
            k = bytes(k)
            if k[:n] != prefix:
                break
            out.append(k)
        return out


def _prefix_items(env: LmdbEnv, db, prefix: bytes) -> list[tuple[bytes, bytes]]:
    """The rows of ``db`` whose key starts with ``prefix``, ascending."""
    n = len(prefix)
    with env.reading() as txn:
        cur = txn.cursor(db)
        if not cur.set_range(prefix):
            return []
        out = []
        for k, v in cur.iternext():
            k = bytes(k)
            if k[:n] != prefix:
                break
            out.append((k, bytes(v)))
        return out



class LmdbOrderedSet:
    """Ordered set of byte keys stored as the keys of one named database."""

    __slots__ = ("env", "db")

    def __init__(self, env: LmdbEnv, db) -> None:
        self.env = env
        self.db = db

    def add(self, k: bytes) -> None:
        self.env.put(self.db, k, b"")

    def discard(self, k: bytes) -> None:
        self.env.delete(self.db, k)

    def range(self, lo: bytes | None, hi: bytes | None, limit: int | None = None) -> list[bytes] | None:
        with self.env.reading() as txn:
            cur = txn.cursor(self.db)
            if lo is None:
                if not cur.first():
                    return []
            elif not cur.set_range(lo):
                return []
            # read in runs of keys (one C-level copy each), the run that passes ``hi`` cut
            # where it does: the same keys as one key at a time, a tenth of the time
            keys = cur.iternext(keys=True, values=False)
            out: list[bytes] = []
            while True:
                run = list(map(bytes, islice(keys, _RANGE_RUN)))
                done = len(run) < _RANGE_RUN
                if hi is not None and run and run[-1] >= hi:
                    run = run[:bisect_left(run, hi)]
                    done = True
                out.extend(run)
                if limit is not None and len(out) > limit:
                    return None
                if done:
                    return out

    def first(self) -> bytes | None:
        with self.env.reading() as txn:
            cur = txn.cursor(self.db)
            return bytes(cur.key()) if cur.first() else None

    def __len__(self) -> int:
        with self.env.reading() as txn:
            return txn.stat(self.db)["entries"]

    def clear(self) -> None:
        self.env.drop(self.db)


class LmdbHashTable:
    """token -> SowKeys, stored as ``len(token) (1 byte) + token + SowKey`` keys of one named
    database (tokens are at most 255 bytes; see :func:`sow.index._composite`)."""

    __slots__ = ("env", "db")

    def __init__(self, env: LmdbEnv, db) -> None:
        self.env = env
        self.db = db

    def add(self, token: bytes, skey: str) -> None:
        self.env.put(self.db, bytes((len(token),)) + token + skey.encode(), b"")

    def discard(self, token: bytes, skey: str) -> None:
        self.env.delete(self.db, bytes((len(token),)) + token + skey.encode())

    def add_rows(self, rows: list[tuple[bytes, str]]) -> None:
        """:meth:`add` of each (token, SowKey), in one call."""
        self.env.put_run(self.db, [bytes((len(t),)) + t + k.encode() for t, k in rows])

    def get(self, token: bytes) -> list[str]:
        prefix = bytes((len(token),)) + token
        n = len(prefix)
        return [k[n:].decode() for k in _prefix_keys(self.env, self.db, prefix)]

    def __len__(self) -> int:
        with self.env.reading() as txn:
            return txn.stat(self.db)["entries"]

    def clear(self) -> None:
        self.env.drop(self.db)


class LmdbKVTable:
    """Ordered ``bytes -> bytes`` table: one named database (the history of persistent
    topics).  Writes go into the environment's batch like every other SOW write."""

    __slots__ = ("env", "db")

    def __init__(self, env: LmdbEnv, db) -> None:
        self.env = env
        self.db = db

    def put(self, k: bytes, v: bytes) -> None:
        self.env.put(self.db, k, v)

    def delete(self, k: bytes) -> None:
        self.env.delete(self.db, k)

    def prefix_items(self, prefix: bytes) -> list[tuple[bytes, bytes]]:
        """The rows whose key starts with ``prefix``, ascending."""
        return _prefix_items(self.env, self.db, prefix)

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """Every row, ascending (read now: the caller may write while iterating)."""
        with self.env.reading() as txn:
            return iter([(bytes(k), bytes(v)) for k, v in txn.cursor(self.db).iternext()])

    def rows_from(self, start: bytes | None, limit: int | None) -> list[tuple[bytes, bytes]]:
        """Up to ``limit`` rows from the key ``start`` on (None: the first), ascending."""
        with self.env.reading() as txn:
            cur = txn.cursor(self.db)
            if not (cur.first() if start is None else cur.set_range(start)):
                return []
            out = []
            for k, v in cur.iternext():
                out.append((bytes(k), bytes(v)))
                if limit is not None and len(out) >= limit:
                    break
            return out

    def snapshot_rows(self, snap: lmdb.Transaction) -> Iterator[tuple[bytes, bytes]]:
        """Every row in the snapshot ``snap`` (:meth:`LmdbEnv.snapshot`), ascending, read
        as the caller iterates (over several steps, while writes go on)."""
        for k, v in snap.cursor(self.db).iternext():
            yield bytes(k), bytes(v)

    def __len__(self) -> int:
        with self.env.reading() as txn:
            return txn.stat(self.db)["entries"]

    def clear(self) -> None:
        self.env.drop(self.db)
