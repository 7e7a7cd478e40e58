"""Compaction of an LMDB environment (:class:`sow.storage.lmdbenv.LmdbEnv`) while it serves.

LMDB reuses the pages deletes free but never gives them back to the file system: after
most records are gone ``data.mdb`` keeps its size. A compacting copy (LMDB's
``MDB_CP_COMPACT``) writes only the pages in use. :class:`Compaction` makes one and puts
it in place of the environment's files without losing a committed write and without holding
the caller (the event loop) for long:

1. :meth:`Compaction.start` (caller's thread): the pending batch is committed, a read
   transaction fixes the state to copy, and from then on every committed batch is logged
   by database name (:class:`CommitLog`, bounded in bytes: past :data:`LOG_LIMIT` it gives
   up and the copy is stale).
2. :meth:`Compaction.copy` (a worker thread): the compacting copy of that read transaction
   into ``<env>.compact-tmp/stage``. The map must not move meanwhile: the environment does
   not grow it ahead, and a batch that finds it full waits for the copy
   (:attr:`LmdbEnv.map_lock`). Had it grown between ``start`` and ``copy`` (which ends the
   read transaction), ``copy`` raises :class:`MapMoved`: the copy must be started again
   (any other error of the copy, a full disk say, is the copy's own: no reason to retry). A
   compacting copy keeps each page as it was, so after scattered deletes its pages stay
   mostly empty (several times the live data): the stage is then rewritten, every database
   in key order, into ``<env>.compact-tmp`` (:func:`rewrite`: full pages) and removed. Both
   are private to the compaction (no handle of the live environment is opened).
3. :meth:`Compaction.catch_up` (a worker thread, any number of times): the logged batches
   so far are written into the copy.
4. :meth:`Compaction.finish` (caller's thread; no snapshot of the environment may be open):
   the pending batch is committed, the rest of the log written into the copy, which is
   flushed and marked complete (``-compact-new``); the environment is closed, the
   directories swapped (:mod:`sow.storage.lmdb_swap`: a crash at any point leaves one
   complete environment) and the environment reopened on the copy
   (:meth:`LmdbEnv.reopen`: map sized and allocated for the smaller file, handles opened
   again by their owners).

:meth:`Compaction.abandon` undoes 1-3 (the environment is as if nothing happened).
``crash_at``: tests stop :meth:`finish` at one of :data:`POINTS` as a crash would.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass

import lmdb

from amps_emulator.journal.atomic import fsync_path
from amps_emulator.sow.storage import lmdb_swap
from amps_emulator.sow.storage.lmdb_swap import NEW, OLD, TMP
from amps_emulator.sow.storage.lmdbenv import _CREATE, _DEL, _DROP, _PUT, LmdbEnv

__all__ = ["Compaction", "CommitLog", "Compacted", "MapMoved", "SimulatedCrash", "LOG_LIMIT", "POINTS",
           "rewrite"]

#: bytes of keys and values written since the copy's read transaction past which the log
#: gives up (the copy is then made again, or the compaction given up)
LOG_LIMIT = 64 << 20
#: where ``crash_at`` stops :meth:`Compaction.finish`: the copy complete but not in place;
#: the old environment moved out but the copy not in; the copy in place, the old not removed
POINTS = ("copied", "moved-out", "swapped")


class SimulatedCrash(Exception):
    """Raised by :meth:`Compaction.finish` at its ``crash_at`` point (tests)."""


class MapMoved(lmdb.Error):
    """The environment's map grew between :meth:`Compaction.start` and
    :meth:`Compaction.copy` (which ended the read transaction): the copy is to be made again."""


class CommitLog:
    """The batches committed since a compaction's read transaction, by database name."""

    def __init__(self, limit: int = LOG_LIMIT) -> None:
        self.ops: list[tuple] = []
        self.size = 0
        self.limit = limit
        #: the log went past its limit: the copy cannot be brought up to date
        self.overflow = False

    def add(self, ops: list[tuple], names: dict) -> None:
        if self.overflow:
            return
        out = self.ops
        size = self.size
        for op, db, a, b in ops:
            out.append((op, names[db], a, b))
            if op == _PUT:
                size += len(a) + len(b) + 16
            elif op == _DEL:
                size += len(a) + 16
        self.size = size
        if size > self.limit:
            self.overflow = True
            self.ops = []

    def create(self, name: str) -> None:
        if not self.overflow:
            self.ops.append((_CREATE, name, None, None))


def _apply(env: lmdb.Environment, ops: list[tuple]) -> None:
    """Write ``ops`` (a :class:`CommitLog`'s) into ``env`` in one transaction, growing its
    map as needed."""
    if not ops:
        return
    while True:
        dbs: dict[str, lmdb._Database] = {}
        txn = env.begin(write=True)
        try:
            for op, name, a, b in ops:
                db = dbs.get(name)
                if db is None:
                    db = dbs[name] = env.open_db(name.encode("utf-8"), txn=txn, create=True)
                if op == _PUT:
                    txn.put(a, b, db=db)
                elif op == _DEL:
                    txn.delete(a, db=db)
                elif op == _DROP:
                    txn.drop(db, delete=a)
                    if a:
                        del dbs[name]
            txn.commit()
            return
        except lmdb.MapFullError:
            txn.abort()
            env.set_mapsize(env.info()["map_size"] * 2)
        except BaseException:
            txn.abort()
            raise


#: the subdirectory of ``<env>.compact-tmp`` that LMDB's compacting copy is made in
STAGE = "stage"
#: rows written into the rewritten copy per transaction (bounds a transaction's dirty pages)
REWRITE_ROWS = 50_000


def rewrite(source: str, dest: str, max_dbs: int) -> lmdb.Environment:
    """Write every named database of the environment at ``source`` (closed, private) into a
    new one at ``dest``, in key order with LMDB's append mode: its pages are full. Returns
    ``dest`` open (synchronous commits) for the log's writes."""
    src = lmdb.open(source, readonly=True, lock=False, max_dbs=max_dbs, subdir=True)
    try:
        size = os.path.getsize(os.path.join(source, "data.mdb"))
        dst = lmdb.open(dest, map_size=max(size * 2, 1 << 20), max_dbs=max_dbs, sync=True,
                        writemap=False, readahead=False, subdir=True)
        try:
            with src.begin(buffers=True) as rtxn:
                for name in [bytes(k) for k, _ in rtxn.cursor()]:
                    sdb = src.open_db(name, txn=rtxn, create=False)
                    _rewrite_db(dst, name, sdb.flags(), rtxn.cursor(sdb))
        except BaseException:
            dst.close()
            raise
    finally:
        src.close()
    return dst


def _rewrite_db(dst: lmdb.Environment, name: bytes, flags: Mapping[str, object],
                rows: lmdb.Cursor) -> None:
    """One database's ``rows`` (a cursor at its first) into ``dst``, created with ``flags``,
    :data:`REWRITE_ROWS` a transaction; the map doubles when it is full (the rows of the
    transaction that found it full are written again)."""
    dups = bool(flags["dupsort"])
    more = rows.first()
    db = None
    while True:
        txn = dst.begin(write=True)
        created = db is None  # (a handle opened in a transaction aborted is gone with it)
        at = (bytes(rows.key()), bytes(rows.value())) if more else None
        try:
            if db is None:
                db = dst.open_db(name, txn=txn, create=True, dupsort=dups,
                                 reverse_key=bool(flags["reverse_key"]),
                                 integerkey=bool(flags["integerkey"]),
                                 integerdup=bool(flags["integerdup"]),
                                 dupfixed=bool(flags["dupfixed"]))
            cur = txn.cursor(db)
            n = 0
            while more and n < REWRITE_ROWS:
                cur.put(rows.key(), rows.value(), dupdata=dups, append=not dups)
                more = rows.next()
                n += 1
            txn.commit()
        except lmdb.MapFullError:
            txn.abort()
            if created:
                db = None
            dst.set_mapsize(dst.info()["map_size"] * 2)
            if at is not None:
                more = rows.set_key_dup(*at) if dups else rows.set_key(at[0])
            continue
        except BaseException:
            txn.abort()
            raise
        if not more:
            return


@dataclass
class Compacted:
    """What a compaction did."""

    path: str
    file_before: int  # bytes of data.mdb
    file_after: int
    used_before: int  # bytes in use (up to the last page)
    used_after: int
    seconds: float
    replayed: int  # logged writes replayed into the copy


class Compaction:
    """One compaction of ``env`` (see the module docstring)."""

    def __init__(self, env: LmdbEnv, *, log_limit: int = LOG_LIMIT,
                 crash_at: str | None = None, pack: bool = True) -> None:
        if crash_at is not None and crash_at not in POINTS:
            raise ValueError(f"crash_at: one of {POINTS}")
        self.env = env
        base = env.path.rstrip(os.sep)
        self.base, self.tmp, self.new, self.old = base, base + TMP, base + NEW, base + OLD
        self.log = CommitLog(log_limit)
        self.crash_at = crash_at
        #: the compacting copy is rewritten with full pages (:func:`rewrite`); False: kept
        #: as LMDB made it (quicker: for a copy made with the caller held)
        self.pack = pack
        self.started = 0.0
        self.file_before = self.used_before = 0
        self._txn: lmdb.Transaction | None = None
        self._target: lmdb.Environment | None = None
        self._applied = 0  # log entries written into the copy
        self.error: BaseException | None = None  # what stopped the copy

    @property
    def stale(self) -> bool:
        """The copy can no longer be brought up to date (the log gave up)."""
        return self.log.overflow

    @property
    def behind(self) -> int:
        """Logged writes not yet in the copy."""
        return len(self.log.ops) - self._applied

    def start(self) -> None:
        env = self.env
        if env.log is not None or env.copying:
            raise RuntimeError(f"{env.path} is already being compacted")
        env.commit()
        for leftover in (self.tmp, self.new, self.old):  # (-old: an earlier one's)
            lmdb_swap.remove_tree(leftover)
        os.makedirs(self.tmp)
        self.started = time.monotonic()
        self.file_before = os.path.getsize(os.path.join(self.base, "data.mdb"))
        self.used_before = env.used_bytes()
        self._txn = env.env.begin(write=False)
        env.log = self.log
        env.copying = True

    def copy(self) -> None:
        """The compacting copy (in a worker thread), then open it to write the log into."""
        env, txn = self.env, self._txn
        if txn is None:
            raise RuntimeError("copy() before start(), or after abandon()")
        stage = os.path.join(self.tmp, STAGE) if self.pack else self.tmp
        try:
            os.makedirs(stage, exist_ok=True)
            with env.map_lock:  # the map cannot move (nor the txn end) while LMDB copies
                try:
                    txn.id()
                except lmdb.Error as exc:  # (py-lmdb invalidates it when the map grows)
                    raise MapMoved(f"{env.path}: the map grew before the copy began") from exc
                env.env.copy(stage, compact=True, txn=txn)
                self._txn = None
                txn.abort()
        except BaseException as exc:
            self.error = exc
            raise
        finally:
            env.copying = False
        data = os.path.join(self.tmp, "data.mdb")
        if self.pack:
            try:
                target = rewrite(stage, self.tmp, env._max_dbs)
            except BaseException as exc:
                self.error = exc
                raise
            lmdb_swap.remove_tree(stage)
            fsync_path(data)  # the bulk of the flush, here rather than in finish()
        else:
            fsync_path(data)
            target = lmdb.open(self.tmp, map_size=max(os.path.getsize(data) * 2, 1 << 20),
                               max_dbs=env._max_dbs, sync=True, writemap=False,
                               readahead=False, subdir=True)
        self._target = target

    def catch_up(self) -> None:
        """Write the batches logged so far into the copy (in a worker thread)."""
        assert self._target is not None
        end = len(self.log.ops)
        _apply(self._target, self.log.ops[self._applied:end])
        self._applied = end

    def finish(self, remove_old: bool = True) -> Compacted | None:
        """Bring the copy up to date and put it in place (caller's thread; no snapshot or
        read of the environment open). None: the copy is stale (:attr:`stale`), nothing
        changed. ``remove_old=False``: the old environment, moved to ``-compact-old``, is
        left for :meth:`remove_old` (a worker thread: deleting a large file takes a while)."""
        env, target = self.env, self._target
        if target is None:
            raise RuntimeError("finish() before copy()")
        if env.reading_open:
            raise RuntimeError("finish() while a read of the environment is open")
        env.commit()
        if self.stale:
            self.abandon()
            return None
        # its last commit is logged too; its pages are not flushed (it may be chosen again
        # only after a crash before the swap: then as an environment not closed cleanly)
        env.close(flush=False)
        env.log = None
        try:
            replayed = len(self.log.ops)
            self._complete(target)
            parent = os.path.dirname(os.path.abspath(self.base))
            self._point("copied")
            os.replace(self.base, self.old)
            fsync_path(parent)
            self._point("moved-out")
            os.replace(self.new, self.base)
            fsync_path(parent)
            self._point("swapped")
        except SimulatedCrash:
            raise
        except BaseException:  # the old environment goes on
            self.abandon()
            lmdb_swap.recover(self.base)
            env.reopen()
            raise
        env.reopen()
        if remove_old:
            self.remove_old()
        return Compacted(self.base, self.file_before,
                         os.path.getsize(os.path.join(self.base, "data.mdb")),
                         self.used_before, env.used_bytes(), time.monotonic() - self.started,
                         replayed)

    def remove_old(self) -> None:
        """Delete the old environment (after :meth:`finish`; any thread)."""
        lmdb_swap.remove_tree(self.old)

    def _complete(self, target: lmdb.Environment) -> None:
        """The rest of the log into the copy (its commits are synchronous); flushed, marked
        clean, and renamed ``-compact-new`` (complete)."""
        _apply(target, self.log.ops[self._applied:])
        target.close()
        self._target = None
        env = self.env
        lmdb_swap.write_state(self.tmp, {"boot": env.boot, "clean": True})
        fsync_path(os.path.join(self.tmp, "data.mdb"))
        fsync_path(self.tmp)
        os.replace(self.tmp, self.new)
        fsync_path(os.path.dirname(os.path.abspath(self.base)))

    def _point(self, name: str) -> None:
        if self.crash_at == name:
            raise SimulatedCrash(name)

    def abandon(self) -> None:
        """Give the compaction up (after :meth:`start`; not while :meth:`copy` runs): the
        environment goes on as before, the copy is removed."""
        env = self.env
        if env.log is self.log:
            env.log = None
        env.copying = False
        if self._txn is not None:
            try:
                self._txn.abort()
            except lmdb.Error:
                pass
            self._txn = None
        if self._target is not None:
            self._target.close()
            self._target = None
        lmdb_swap.remove_tree(self.tmp)
        lmdb_swap.remove_tree(self.new)
