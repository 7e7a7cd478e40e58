"""One LMDB environment with a batched write transaction (its tables: :mod:`sow.storage.lmdb_tables`).

Modelled on synapse ``lib/lmdbslab.py``:

* **One write transaction per batch.**  The first mutation opens it (lazily); ``commit()``
  commits it.  The server calls ``commit()`` once per event-loop turn, so every record, its
  index rows, its expiry row and the topic's last-applied journal position change in the same
  transaction: after a crash the SOW is exactly as of some past commit.
* **Read your own writes.**  While the write transaction is open every read uses it; otherwise a
  short read-only transaction is opened for the duration of one read operation
  (:meth:`LmdbEnv.reading`).  Values are read as buffers and copied before they are kept.
* **Map growth.**  Every mutation of the open transaction is also appended to a replay log.
  On ``MapFullError`` (from a put or from the commit) the transaction is aborted, the map size
  doubled (``set_mapsize``) and the log replayed into a fresh transaction, then the operation
  retried.  The log is cleared at commit.  The initial map size is at least the data file size.
  After a commit that leaves the map more than half used it is grown at once (so a batch
  rarely meets a full map).
* **Allocated blocks.**  LMDB writes through a shared writable mapping of ``data.mdb``, a
  sparse file the size of the map.  Storing into a mapped page whose block the file system
  cannot allocate (disk full) kills the process with ``SIGBUS``.  So the blocks under the whole
  map are allocated (``posix_fallocate``) when the environment opens and *before* the map
  grows.  When the file system refuses (``ENOSPC``, ``EIO``, ...) the map does not grow and
  :attr:`LmdbEnv.full` holds the error: the owner must stop writing (the server refuses
  publishes to the topics here with ``tx store failure``) and call :meth:`LmdbEnv.ensure_room`
  now and then; the map keeps up to half of it allocated and free for the batches already
  accepted.  At open, a file system without room for the whole map gets a smaller map (what
  it can allocate, at least what is used).  A file system without ``fallocate`` keeps the old
  behaviour, with one warning.  Allocated blocks count as used disk space, so a new
  environment starts with a small map (4 MiB) and grows by doubling.
* **Durability** (``sync=``): ``True`` -> LMDB fsyncs at every commit (a committed batch survives
  a machine crash).  ``False`` -> no fsync (``MDB_NOSYNC``, ``MDB_NOMETASYNC``): a committed batch
  survives a crash of the process but maybe not of the machine; the server then relies on the
  transaction log to replay what the SOW lost (the last-applied position is stored in the
  same transaction as the records, so recovery replays exactly the missing suffix).
  ``sync()`` forces a flush.
* Keys are big-endian where they are numbers, so range scans follow numeric order.

Named databases are opened in a write transaction that is committed at once (a DBI only
becomes visible to other transactions after its creating transaction commits), so opening a
topic commits any pending batch first.

**Compaction** (:mod:`sow.storage.lmdb_compact`) replaces the files with a compacted copy
and reopens the environment (:meth:`LmdbEnv.reopen`): the owners of database handles open
them again (:attr:`LmdbEnv.on_reopen`). While the copy is taken in another thread the map
is not grown ahead and a growth or a close waits for the copy (:attr:`LmdbEnv.map_lock`);
every committed batch is also written to :attr:`LmdbEnv.log` by database name, to be
replayed into the copy. A compaction
cut short by a crash is settled when the environment is next opened
(:func:`sow.storage.lmdb_swap.recover`).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import repeat
from operator import length_hint
from typing import Protocol

import lmdb

from amps_emulator.sow.storage.lmdb_swap import recover, write_state

__all__ = ["LmdbEnv", "SowDamagedError", "move_aside"]

log = logging.getLogger("amps_emulator.sow.lmdb")

_PUT, _DEL, _DROP, _CREATE = 0, 1, 2, 3  # (_CREATE: only in a compaction's log)
_MAX_DOUBLE = 64 << 30
#: a put of this many bytes of values (or more) makes room first when the map may not hold
#: them: a put that finds the map full is done again once it has grown (the whole batch)
ROOM_FIRST = 1 << 20
#: errors of posix_fallocate that mean "this file system cannot do it" (not "no space")
_NO_FALLOCATE = (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)


_STATE_FILE = "emulator-state.json"


class SowDamagedError(Exception):
    """A damaged SOW environment that may not be replaced (its topics cannot be rebuilt)."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.path = path


def move_aside(path: str, why: str) -> str:
    """Move a damaged environment to ``<path>.damaged-<time>`` (kept for inspection) and leave
    an empty directory in its place; returns where it went."""
    aside = f"{path.rstrip(os.sep)}.damaged-{time.strftime('%Y%m%dT%H%M%S')}"
    n = 1
    while os.path.exists(aside):
        n += 1
        aside = f"{path.rstrip(os.sep)}.damaged-{time.strftime('%Y%m%dT%H%M%S')}-{n}"
    log.warning("SOW LMDB %s is damaged (%s): moved to %s; its topics start empty "
                "and are rebuilt from the transaction log where it records them", path, why, aside)
    os.replace(path, aside)
    os.makedirs(path)
    return aside


def boot_id() -> str:
    """This boot of the machine (Linux ``boot_id``; ``""`` where there is none)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


class CommitLogLike(Protocol):
    """What the environment tells a compaction's log (:class:`.lmdb_compact.CommitLog`)."""

    def add(self, ops: list[tuple], names: dict) -> None: ...

    def create(self, name: str) -> None: ...


class LmdbEnv:
    """One LMDB environment (see the module docstring).

    Damage: an environment LMDB cannot open (not an LMDB file, a bad header) is damaged.
    Without ``sync`` a *machine* crash can also leave damaged pages (a process crash cannot:
    the OS still has them), so an environment that was not closed cleanly and was last
    written in another boot of the machine is read through once at open, every database and
    value.  A damaged environment is moved aside (``<dir>.damaged-<time>``, kept for
    inspection) with a warning, and a new empty one takes its place: the topics then catch
    up from the transaction log, like a missing SOW file.  :attr:`replaced` tells.
    ``boot``: this boot's id (tests pass another to play a machine crash).  ``on_damage(path,
    why)`` is called before a damaged environment is moved aside; it may raise (typically
    :class:`SowDamagedError`) to refuse that."""

    def __init__(self, path: str, *, map_size: int = 4 << 20, sync: bool = True,
                 max_dbs: int = 4096, max_map_size: int | None = None,
                 boot: str | None = None, on_damage=None) -> None:
        recover(path)  # a compaction cut short: the complete environment it left
        os.makedirs(path, exist_ok=True)
        self.path = path
        self._init_map_size = map_size
        self._max_dbs = max_dbs
        self.sync_commits = sync
        self.max_map_size = max_map_size
        self.boot = boot_id() if boot is None else boot
        self.on_damage = on_damage
        #: why the environment found at open was moved aside (None: it was fine)
        self.replaced: str | None = None
        #: why the file system refused to allocate the map's blocks (None: it did not)
        self.full: OSError | None = None
        self._allocated = 0  # bytes of data.mdb known to have their blocks allocated
        self._fallocate = True
        #: every named database opened: handle -> name (to log writes by name)
        self._names: dict = {}
        #: called (no arguments) once the environment was reopened on new files
        #: (:meth:`reopen`): every handle opened before must be opened again
        self.on_reopen: list = []
        #: while a compaction's copy is current: told of every committed batch
        #: (``add(ops, names)``) and database created (``create(name)``)
        self.log: CommitLogLike | None = None
        #: a compaction's copy is to be made or under way: the map is not grown ahead
        self.copying = False
        #: held while the map is resized or closed, and by a compaction's copy: LMDB's
        #: binding ends every transaction of the environment then, the copy's too
        self.map_lock = threading.Lock()
        self.closed = False
        self.env = self._open(map_size, max_dbs)
        self.map_size = self.env.info()["map_size"]
        self._psize = self.env.stat()["psize"]
        self._wtxn: lmdb.Transaction | None = None
        self._ops: list[tuple] = []
        self._rtxn: lmdb.Transaction | None = None
        self._rdepth = 0
        self.commits = 0
        self.grows = 0
        self.snapshots = 0  # open snapshot() read transactions
        #: called (no arguments) before every commit; may write into the batch
        self.before_commit: list = []
        #: called (no arguments) after a batch was discarded (aborted, or no room to grow)
        self.on_discard: list = []
        self._fit_map()
        self.ensure_room()

    def _lmdb(self, map_size: int, max_dbs: int) -> lmdb.Environment:
        data = os.path.join(self.path, "data.mdb")
        if os.path.exists(data):
            map_size = max(map_size, os.path.getsize(data))
        sync = self.sync_commits
        return lmdb.open(self.path, map_size=map_size, max_dbs=max_dbs, sync=sync,
                         max_spare_txns=4, metasync=sync, writemap=True, map_async=not sync,
                         readahead=False, subdir=True)

    def _open(self, map_size: int, max_dbs: int) -> lmdb.Environment:
        existed = os.path.exists(os.path.join(self.path, "data.mdb"))
        state = self._read_state()
        env = None
        try:
            if existed and state and os.path.getsize(os.path.join(self.path, "data.mdb")) < 8192:
                # opened before, so it had its two meta pages: cut short (LMDB would start over)
                raise lmdb.InvalidError(f"{self.path}/data.mdb: truncated to "
                                        f"{os.path.getsize(os.path.join(self.path, 'data.mdb'))} bytes")
            env = self._lmdb(map_size, max_dbs)
            if existed and not self.sync_commits and not (
                    state.get("clean") or state.get("boot") == self.boot):
                _verify(env)  # may have been cut short by a machine crash: read it all
        except lmdb.Error as exc:
            if env is not None:
                env.close()
            self.replaced = f"{type(exc).__name__}: {exc}"
            if self.on_damage is not None:
                self.on_damage(self.path, self.replaced)
            move_aside(self.path, self.replaced)
            env = self._lmdb(map_size, max_dbs)
        self._write_state(clean=False)
        return env

    def reopen(self) -> None:
        """Open the environment again, on the files now at :attr:`path` (a compacted copy,
        after the old ones were closed): the map sized for them and its blocks allocated as
        at open; then :attr:`on_reopen`."""
        self._allocated = 0
        self.full = None
        self._names = {}
        self.env = self._open(self._init_map_size, self._max_dbs)
        self.map_size = self.env.info()["map_size"]
        self._psize = self.env.stat()["psize"]
        self.closed = False
        self._fit_map()
        self.ensure_room()
        for hook in self.on_reopen:
            hook()

    def used_bytes(self) -> int:
        """The bytes of ``data.mdb`` in use (up to its last page)."""
        return (self.env.info()["last_pgno"] + 1) * self._psize

    def _read_state(self) -> dict:
        try:
            with open(os.path.join(self.path, _STATE_FILE), "rb") as f:
                state = json.loads(f.read())
            return state if isinstance(state, dict) else {}
        except (OSError, ValueError):
            return {}

    def _write_state(self, clean: bool) -> None:
        """Record whether the environment is closed cleanly (flushed), and in which boot it
        was last written; replaced atomically."""
        write_state(self.path, {"boot": self.boot, "clean": clean})

    # ---- transactions -----------------------------------------------------------------------

    @property
    def in_write(self) -> bool:
        return self._wtxn is not None

    @property
    def reading_open(self) -> bool:
        """A read transaction is open: a :meth:`snapshot`, or a :meth:`reading` block."""
        return bool(self.snapshots) or self._rtxn is not None

    def _write_txn(self) -> lmdb.Transaction:
        t = self._wtxn
        if t is None:
            if self._rtxn is not None:
                raise RuntimeError("cannot write to the SOW while a read is in progress")
            t = self._wtxn = self.env.begin(write=True, buffers=True)
        return t

    @contextmanager
    def reading(self) -> Iterator[lmdb.Transaction]:
        """The transaction reads should use: the open write transaction, else a read txn."""
        if self._wtxn is not None:
            yield self._wtxn
            return
        if self._rtxn is None:
            self._rtxn = self.env.begin(write=False, buffers=True)
        self._rdepth += 1
        try:
            yield self._rtxn
        finally:
            self._rdepth -= 1
            if self._rdepth == 0:
                t, self._rtxn = self._rtxn, None
                t.abort()

    def read_txn(self) -> lmdb.Transaction:
        """The transaction of the enclosing :meth:`reading` block (or the write txn)."""
        t = self._wtxn or self._rtxn
        if t is None:
            raise RuntimeError("read outside of a reading() block")
        return t

    def snapshot(self, buffers: bool = True) -> lmdb.Transaction:
        """A read transaction of the caller's own, for a read that spans several loop steps
        while writes go on: commits the open batch first, so it sees everything written so
        far; the caller must ``abort()`` it.  Map growth invalidates open snapshots (py-lmdb
        then raises ``lmdb.Error`` on their next use), so the map is grown here first when it
        is more than half full and no other snapshot is open. ``buffers``: it reads buffers
        into the map (valid until the next read), else ``bytes`` (one copy each, made by
        LMDB's binding: the cheaper way to keep every value read)."""
        if self._wtxn is not None:
            self.commit()
        else:
            self.ensure_room()
        self.snapshots += 1
        if buffers:
            return self.env.begin(write=False, buffers=True)
        return self.env.begin(write=False)

    def release(self, snapshot: lmdb.Transaction) -> None:
        """End a :meth:`snapshot`."""
        self.snapshots -= 1
        try:
            snapshot.abort()
        except lmdb.Error:
            pass  # already invalidated by map growth

    def put(self, db, key: bytes, value: bytes) -> None:
        txn = self._wtxn
        if txn is None:
            txn = self._write_txn()
        if len(value) >= ROOM_FIRST:
            txn = self._room_for(len(value), txn)
        self._ops.append((_PUT, db, key, value))
        try:
            txn.put(key, value, db=db)
        except lmdb.MapFullError:
            self._grow()

    def replace(self, db, key: bytes, value: bytes):
        """Put and return the previous value (a buffer valid until the next write)."""
        txn = self._wtxn
        if txn is None:
            txn = self._write_txn()
        if len(value) >= ROOM_FIRST:
            txn = self._room_for(len(value), txn)
        self._ops.append((_PUT, db, key, value))
        try:
            return txn.replace(key, value, db=db)
        except lmdb.MapFullError:
            return self._replaced_after_growth(db, key)

    def replace_run(self, db, keys: list[bytes], values: list[bytes]
                    ) -> list[bytes | memoryview | None]:
        """:meth:`replace` of each key with its value, in order (one cursor, one call): the
        previous values (``bytes``; None where there was none)."""
        if len(keys) != len(values):
            raise ValueError("replace_run: keys and values of different lengths")
        txn = self._room_first(values)
        ops = self._ops
        base = len(ops)
        ops.extend(zip(repeat(_PUT), repeat(db), keys, values))
        rest = iter(keys)
        try:  # the common case, looped in C: the map has room for the whole run
            return list(map(txn.cursor(db).replace, rest, values))
        except lmdb.MapFullError:
            del ops[base:]  # the transaction is spoilt: grow, replaying the batch before the
        except BaseException:  # run, then the run one by one (below)
            del ops[len(ops) - length_hint(rest):]  # (the ops up to the failing one, as
            raise  # one by one)
        # each put's old value as the batch before it left it
        cur = self._grow().cursor(db)
        out: list[bytes | memoryview | None] = []
        for key, value in zip(keys, values, strict=True):
            ops.append((_PUT, db, key, value))
            try:
                out.append(cur.replace(key, value))
            except lmdb.MapFullError:
                out.append(self._replaced_after_growth(db, key))
                cur = self._write_txn().cursor(db)
        return out

    def put_run(self, db, keys: list[bytes], value: bytes = b"") -> None:
        """:meth:`put` of each key with ``value`` (one cursor, one call)."""
        txn = self._wtxn
        if txn is None:
            txn = self._write_txn()
        self._ops.extend(zip(repeat(_PUT), repeat(db), keys, repeat(value)))
        try:
            txn.cursor(db).putmulti(zip(keys, repeat(value)))
        except lmdb.MapFullError:
            self._grow()  # replays the whole batch, this run too

    def put_many(self, db, keys: list[bytes], values: list[bytes], append: bool = False
                 ) -> None:
        """:meth:`put` of each key with its value, in order (one cursor, one call), not
        reading what each replaces. ``append``: every key is greater than any ``db`` holds
        and than the one before it (LMDB's append: no search)."""
        if len(keys) != len(values):
            raise ValueError("put_many: keys and values of different lengths")
        txn = self._room_first(values)
        ops = self._ops
        ops.extend(zip(repeat(_PUT), repeat(db), keys, values))
        rest = iter(keys)
        try:
            txn.cursor(db).putmulti(zip(rest, values, strict=True), append=append)
        except lmdb.MapFullError:
            self._grow()  # replays the whole batch, this run too
        except BaseException:  # the ops up to the failing put, as one by one
            del ops[len(ops) - length_hint(rest):]
            raise

    def _room_first(self, values: list[bytes]) -> lmdb.Transaction:
        """The open write transaction (begun if none is), after :meth:`_room_for` a few large
        ``values`` (a large body: put once, not again after a growth)."""
        txn = self._wtxn
        if txn is None:
            txn = self._write_txn()
        if len(values) <= 4 and (size := sum(map(len, values))) >= ROOM_FIRST:
            txn = self._room_for(size, txn)
        return txn

    def _room_for(self, size: int, txn: lmdb.Transaction) -> lmdb.Transaction:
        """Grow the map (replaying the batch so far) while what it holds and twice ``size``
        (the values' pages and the tree's copies) would not fit; the write transaction then
        open. A map that cannot grow is left as it is (the put finds out)."""
        while self.used_bytes() + 2 * size > self.map_size and self._next_map_size() > self.map_size:
            txn = self._grow()
        return txn

    def _replaced_after_growth(self, db, key: bytes) -> bytes | None:
        """After a put of ``key`` (the batch's last op) found the map full: grow (which
        replays the batch, that put too) and say what the key held before that put."""
        self._grow()  # fetch the old value from before the batch...
        with self.env.begin(buffers=False) as rt:
            old = rt.get(key, db=db)
        for op, d, a, b in self._ops[:-1]:  # ...as modified by this batch
            if d is not db:
                continue
            if op == _DROP:
                old = None
            elif a == key:
                old = b if op == _PUT else None
        return old

    def delete(self, db, key: bytes) -> None:
        txn = self._wtxn
        if txn is None:
            txn = self._write_txn()
        self._ops.append((_DEL, db, key, None))
        try:
            txn.delete(key, db=db)
        except lmdb.MapFullError:
            self._grow()

    def drop(self, db, delete: bool = False) -> None:
        """Empty ``db`` (``delete=True``: remove it; commit before using the name again)."""
        txn = self._write_txn()
        self._ops.append((_DROP, db, delete, None))
        try:
            txn.drop(db, delete=delete)
        except lmdb.MapFullError:
            self._grow()

    def commit(self) -> bool:
        """Commit the open write transaction; ``False`` if there was none."""
        for hook in self.before_commit:
            hook()
        t = self._wtxn
        if t is None:
            return False
        while True:
            try:
                t.commit()
                break
            except lmdb.MapFullError:
                t = self._grow()  # aborts, grows, replays into a new txn
        self._wtxn = None
        if self.log is not None:
            self.log.add(self._ops, self._names)
        self._ops.clear()
        self.commits += 1
        self.ensure_room()
        return True

    def ensure_room(self) -> bool:
        """Grow the map when it is more than half used (unless a snapshot or a batch is
        open: growth would invalidate it), its blocks allocated first. ``False`` (and
        :attr:`full` set) while the file system refuses them, else ``True`` (cleared)."""
        err = self._allocate(self.map_size)  # nothing to do unless refused at open
        if err is None:
            if self.snapshots or self._wtxn is not None or self.copying:
                return self.full is None  # cannot grow now: no change
            used = (self.env.info()["last_pgno"] + 1) * self._psize
            new = self._next_map_size()
            if used * 2 > self.map_size and new > self.map_size:
                err = self._allocate(new)
                if err is None:
                    self._set_map_size(new)
        self.full = err
        return err is None

    def _fit_map(self) -> None:
        """At open: allocate the blocks under the map; where the file system has not that
        much room, shrink the map (halving, never below what is used, whose blocks are
        written) to what it can allocate, so LMDB never maps a hole."""
        err = first = self._allocate(self.map_size)
        if err is None:
            return
        used = (self.env.info()["last_pgno"] + 1) * self._psize
        size = self.map_size
        while err is not None and size // 2 >= max(used, 1 << 20):
            size //= 2
            err = self._allocate(size)
        if err is not None:
            size = used
        log.warning("SOW LMDB %s: no room for a %d MiB map (%s); using %d KiB",
                    self.path, self.map_size >> 20, first, size >> 10)
        self.env.set_mapsize(size)
        self.map_size = size

    def _allocate(self, size: int) -> OSError | None:
        """Allocate the blocks of ``data.mdb`` up to ``size`` bytes; the error if the file
        system refuses (no space), None when done or when it cannot (no ``fallocate``:
        warned once, then the sparse file as before)."""
        if size <= self._allocated or not self._fallocate:
            return None
        try:
            fd = os.open(os.path.join(self.path, "data.mdb"), os.O_RDWR)
            try:
                os.posix_fallocate(fd, self._allocated, size - self._allocated)
            finally:
                os.close(fd)
        except OSError as exc:
            if exc.errno not in _NO_FALLOCATE:
                return exc
            self._fallocate = False
            log.warning("SOW LMDB %s: the file system cannot preallocate (%s); a full disk "
                        "there may kill the server (SIGBUS) instead of failing publishes",
                        self.path, exc)
            return None
        self._allocated = size
        return None

    def abort(self) -> None:
        """Discard the open write transaction (the caller must drop its cached state)."""
        t, self._wtxn = self._wtxn, None
        self._ops.clear()
        if t is not None:
            t.abort()
        self._discarded()

    def _discarded(self) -> None:
        for hook in self.on_discard:
            hook()

    def _next_map_size(self) -> int:
        """The size the map grows to next (the current size: it cannot grow)."""
        size = self.map_size
        new = size * 2 if size < _MAX_DOUBLE else size + _MAX_DOUBLE
        return new if self.max_map_size is None else min(new, self.max_map_size)

    def _set_map_size(self, new: int) -> None:
        log.info("SOW LMDB %s: growing map to %d MiB", self.path, new >> 20)
        with self.map_lock:  # (waits for a compaction's copy)
            self.env.set_mapsize(new)
        self.map_size = new
        self.grows += 1

    def _grow(self) -> lmdb.Transaction:
        """Abort, enlarge the map and replay the batch into a new write transaction (the
        open write transaction from now on, returned)."""
        while True:
            if self._wtxn is not None:
                self._wtxn.abort()
                self._wtxn = None
            new = self._next_map_size()
            if new <= self.map_size:
                self._ops.clear()
                self._discarded()
                raise lmdb.MapFullError("SOW map at its maximum size; batch discarded")
            self.full = self._allocate(new)
            if self.full is not None:
                self._ops.clear()
                self._discarded()
                raise lmdb.MapFullError(f"SOW map cannot grow ({self.full}); batch discarded")
            self._set_map_size(new)
            t = self._wtxn = self.env.begin(write=True, buffers=True)
            try:
                for op, db, a, b in self._ops:
                    if op == _PUT:
                        t.put(a, b, db=db)
                    elif op == _DEL:
                        t.delete(a, db=db)
                    else:
                        t.drop(db, delete=a)
                return t
            except lmdb.MapFullError:
                continue

    def open_db(self, name: str, *, create: bool = True):
        """Open (creating) a named database; commits the pending batch and the creation."""
        self.commit()
        txn = self.env.begin(write=True)
        try:
            db = self.env.open_db(name.encode("utf-8"), txn=txn, create=create)
            txn.commit()
        except BaseException:
            txn.abort()
            raise
        self._names[db] = name
        if self.log is not None:
            self.log.create(name)
        return db

    def find_db(self, name: str):
        """The named database if it exists, else None (nothing created)."""
        self.commit()
        try:
            db = self.env.open_db(name.encode("utf-8"), create=False)
        except lmdb.NotFoundError:
            return None
        self._names[db] = name
        return db

    def db_names(self) -> list[str]:
        with self.env.begin() as txn:
            out = []
            for k, _ in txn.cursor():
                out.append(bytes(k).decode("utf-8", "replace"))
            return out

    def sync(self) -> None:
        self.env.sync(True)

    def close(self, flush: bool = True) -> None:
        """Commit and close. ``flush=False`` (a compaction replacing the files): without
        ``sync`` the pages are not flushed, so the environment is not marked clean."""
        if self.closed:
            return
        if self._rtxn is not None:
            self._rtxn.abort()
            self._rtxn = None
        self.commit()
        flush = flush or self.sync_commits
        if flush and not self.sync_commits:
            self.env.sync(True)
        with self.map_lock:  # (waits for a compaction's copy)
            self.env.close()
        self.closed = True
        if flush:
            self._write_state(clean=True)


def _verify(env: lmdb.Environment) -> None:
    """Read every database and every value once (raises ``lmdb.Error`` on damage)."""
    with env.begin(buffers=True) as txn:
        names = [bytes(k) for k, _ in txn.cursor()]
        for name in names:
            db = env.open_db(name, txn=txn, create=False)
            for _, v in txn.cursor(db):
                len(v)

