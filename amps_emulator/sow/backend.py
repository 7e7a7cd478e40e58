"""Record storage for one topic: :class:`MemoryBackend` (transient) and :class:`LmdbBackend`
(persistent).  :class:`sow.topic.Topic` holds all SOW logic and talks only to this interface,
so both durabilities behave identically (one contract test suite runs against both).

Interface (both classes):

``get(skey) -> Record | None``, ``put(rec, old)``, ``delete(skey)``, ``count()``,
``get_many(keys) -> [Record]`` (natural order), ``scan(f, decoder, dead, ctx_of) -> [(Record,
doc)]`` (natural order; ``doc`` is what ``f`` saw, possibly only the fields the query reads),
``iter_docs(decoder) -> (skey, doc)`` (for index builds), ``clear()``,
``hash_table(name)`` / ``ordered_table(name)`` / ``drop_table(name)``,
``meta_get(name)`` / ``meta_put(name, value)`` (small JSON values), ``reading()``.

Natural order: the order a query without ``orderby`` returns records in: first-insert order
(an update keeps the record's place; a record deleted and published again goes last), in both
backends.  Index paths sort their candidates into the same order, so a query returns the same
list whichever path runs.

LMDB layout: a topic's records are one database (``<base>:s``) whose keys are an 8-byte
big-endian insert sequence followed by the SowKey, so a new record is appended at the end of
the B-tree instead of landing at a random place (SowKeys are digests): an insert then dirties
the pages it shares with the inserts before it, not a page of its own (about 4 us per insert
saved on a topic of 100k records).  The SowKey -> LMDB key map is kept in memory, read from
the keys at open (and again after a discarded batch).  A database of the earlier layout
(``<base>:r``, keyed by SowKey) is moved over once at open, in SowKey order.

Scans avoid full decoding where they can: the memory backend keeps every record's decoded
body; the LMDB backend decodes only the top-level fields the query reads (a ``TypedDict``
msgspec decoder built per set of field names) straight from the memory-mapped value, and
builds a :class:`Record` only for matching rows.  For a filter with a fields mode
(:func:`protocol.filter.fields.fields_filter`) the scan is one generated loop with the
filter inlined, decoding each body into a ``Struct`` of those fields instead; it matches
exactly the rows, and returns exactly the documents, of the general loop.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Iterator
from contextlib import nullcontext
from itertools import islice
from typing import Any, TypeAlias

import msgspec

from amps_emulator import accel
from amps_emulator.protocol.filter.fields import fields_filter

from .lmdbenv import LmdbEnv, LmdbHashTable, LmdbKVTable, LmdbOrderedSet
from .record import (
    KEY_SEQ,
    VERSION,
    Record,
    StoredRecords,
    body_of,
    decode_record,
    encode_record,
    sow_values,
)
from .tables import MemHashTable, MemKVTable, MemOrderedSet

__all__ = ["Backend", "MemoryBackend", "LmdbBackend", "db_base_name", "NEW"]

# RecursionError: a body nested deeper than msgspec decodes is no document (matches nothing)
_decode_errors = (msgspec.DecodeError, UnicodeDecodeError, TypeError, RecursionError)
_json = msgspec.json
_NO_EXPIRATION = bytes(8)  # the f64 0.0 of a record without expiration
log = logging.getLogger(__name__)


class _New:
    """The type of :data:`NEW`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NEW"


#: what ``swap_plain`` returns when the key held no record
NEW = _New()


class MemoryBackend:
    persistent = False

    def __init__(self) -> None:
        self.records: dict[str, Record] = {}
        self._meta: dict[str, Any] = {}
        self._tables: dict[str, Any] = {}
        self._seq = 0

    def reading(self):
        return nullcontext()

    def get(self, skey: str) -> Record | None:
        return self.records.get(skey)

    def put(self, rec: Record, old: Record | None) -> None:
        if old is None:
            self._seq += 1
            rec.seq = self._seq
        else:
            rec.seq = old.seq
        self.records[rec.sow_key] = rec

    def swap(self, rec: Record) -> Record | None:
        """Store ``rec`` and return the record it replaced."""
        old = self.records.get(rec.sow_key)
        self.put(rec, old)
        return old

    def swap_plain(self, keyed: list[tuple[Any, str]], bodies: list, bookmarks: list[str],
                   positions: list[int], timestamps: list[float], decoder: Any) -> list[Any]:
        """Store records without expiration or headers (the keyed publish hot path): body
        ``bodies[i]`` under the SowKey of ``keyed[i]`` (document, SowKey), in order, and say
        what each replaced: :data:`NEW` (nothing), the old :class:`Record` when it had an
        expiration (the caller's general bookkeeping runs), else the old record's document
        (as ``decoder`` reads it: what the indexes need; None without a decoder)."""
        recs = self.records
        seq = self._seq
        out: list[Any] = []
        for (doc, key), data, bookmark, position, timestamp in zip(
                keyed, bodies, bookmarks, positions, timestamps, strict=True):
            if data.__class__ is not bytes:  # kept: not a view of a buffer that changes
                data = bytes(data)
            # positional: (sow_key, data, bookmark, timestamp, expiration, position, headers,
            # doc)
            rec = Record(key, data, bookmark, timestamp, None, position, None, doc)
            old = recs.get(key)
            recs[key] = rec
            if old is None:
                seq += 1
                rec.seq = seq
                out.append(NEW)
                continue
            rec.seq = old.seq
            if old.expiration is not None:
                out.append(old)
            else:
                out.append(None if decoder is None else old.doc)  # (the indexes read it all)
        self._seq = seq
        return out

    def store_plain(self, keyed: list[tuple[Any, str]], bodies: list, bookmarks: list[str],
                    positions: list[int], timestamps: list[float]) -> int:
        """:meth:`swap_plain` when nothing reads what the records replace (no index does,
        and no stored record has an expiration): how many of their SowKeys were new."""
        return self.swap_plain(keyed, bodies, bookmarks, positions, timestamps, None).count(NEW)

    def delete(self, skey: str) -> None:
        self.records.pop(skey, None)

    def count(self) -> int:
        return len(self.records)

    def get_many(self, keys: Iterable[str]) -> list[Record]:
        g = self.records.get
        out = [r for r in map(g, keys) if r is not None]
        out.sort(key=lambda r: r.seq)
        return out

    def scan(self, f, decoder, dead: set, ctx_of, names=None) -> list[tuple[Record, Any]]:
        return self._scan(self.records.values(), f, dead, ctx_of)

    def snapshot(self, buffers: bool = True) -> dict[str, Record]:
        # Records are never changed in place (an update stores a new Record), so a copy of
        # the mapping is a consistent snapshot.
        return dict(self.records)

    def release(self, snap) -> None:
        pass

    def scan_steps(self, snap: dict[str, Record], chunk: int, f, decoder, dead: set, ctx_of,
                   names=None) -> Iterator[list[tuple[Record, Any]]]:
        recs = list(snap.values())
        for start in range(0, len(recs), chunk):
            yield self._scan(recs[start:start + chunk], f, dead, ctx_of)

    def get_many_in(self, snap: dict[str, Record], keys: list[str]) -> list[Record]:
        g = snap.get
        out = [r for r in map(g, keys) if r is not None]
        out.sort(key=lambda r: r.seq)
        return out

    @staticmethod
    def natural_order(rows: list[tuple[Record, Any]]) -> None:
        rows.sort(key=lambda rd: rd[0].seq)

    @staticmethod
    def _scan(recs: Iterable[Record], f, dead: set, ctx_of) -> list[tuple[Record, Any]]:
        if f is None:
            return [(r, r.doc) for r in recs if r.sow_key not in dead] if dead else \
                [(r, r.doc) for r in recs]
        out: list[tuple[Record, Any]] = []
        append = out.append
        if ctx_of is not None:
            for r in recs:
                d = r.doc
                if f(d, ctx_of(r)) and r.sow_key not in dead:
                    append((r, d))
        elif dead:
            for r in recs:
                d = r.doc
                if f(d) and r.sow_key not in dead:
                    append((r, d))
        else:
            for r in recs:
                d = r.doc
                if f(d):
                    append((r, d))
        return out

    def iter_docs(self, decoder=None) -> Iterator[tuple[str, Any]]:
        for k, r in list(self.records.items()):
            yield k, r.doc

    def doc_steps(self, step: int, decoder=None) -> Iterator[list[tuple[str, Any]]]:
        """(SowKey, document) of the records, ``step`` at a time, each read when its step
        runs (a record removed before then is left out; one added after the first step is
        not read)."""
        keys = list(self.records)
        recs = self.records
        for start in range(0, len(keys), step):
            rows = []
            for k in keys[start:start + step]:
                r = recs.get(k)
                if r is not None:
                    rows.append((k, r.doc))
            yield rows

    def old_doc(self, rec: Record, decoder=None) -> Any:
        return rec.doc

    def doc_for(self, rec: Record, decoder) -> Any:
        """The document a query evaluates for ``rec`` (memory: the cached full body)."""
        return rec.doc

    def clear(self) -> None:
        self.records.clear()
        for t in self._tables.values():
            t.clear()

    def hash_table(self, name: str) -> MemHashTable:
        t = self._tables.get(name)
        if t is None:
            t = self._tables[name] = MemHashTable()
        return t

    def ordered_table(self, name: str) -> MemOrderedSet:
        t = self._tables.get(name)
        if t is None:
            t = self._tables[name] = MemOrderedSet()
        return t

    def kv_table(self, name: str) -> MemKVTable:
        t = self._tables.get(name)
        if t is None:
            t = self._tables[name] = MemKVTable()
        return t

    def all_records(self) -> list[Record]:
        """Every stored record (expired ones too), in natural order."""
        return list(self.records.values())

    def records_in(self, snap: dict[str, Record]) -> Iterator[Record]:
        """Every record of the snapshot ``snap``."""
        return iter(list(snap.values()))

    def drop_table(self, name: str) -> None:
        self._tables.pop(name, None)

    def meta_get(self, name: str, default: Any = None) -> Any:
        return self._meta.get(name, default)

    def meta_put(self, name: str, value: Any) -> None:
        self._meta[name] = value


def db_base_name(topic: str) -> str:
    if len(topic.encode()) <= 200:
        return "sow:" + topic
    return "sow:#" + hashlib.blake2b(topic.encode(), digest_size=16).hexdigest()


class LmdbBackend:
    persistent = True

    def __init__(self, env: LmdbEnv, topic: str) -> None:
        self.env = env
        self.base = db_base_name(topic)
        self.rec_db = env.open_db(self.base + ":s")
        self.meta_db = env.open_db(self.base + ":m")
        self._tables: dict[str, Any] = {}
        self._full = _json.Decoder()
        #: SowKey -> the record's LMDB key (insert sequence + SowKey)
        self._lk: dict[str, bytes] = {}
        self._seq = 0  # the last insert sequence given
        #: SowKey -> LMDB keys it had, deleted while a snapshot was open (which may hold them)
        self._gone: dict[str, list[bytes]] = {}
        old = env.find_db(self.base + ":r")
        if old is not None:
            self._move_from(old)
        self.reload_keys()
        env.on_discard.append(self.reload_keys)

    def _move_from(self, old) -> None:
        """Move the records of the earlier layout (keyed by SowKey) into :attr:`rec_db`."""
        with self.env.reading() as txn:
            rows = [(bytes(k), bytes(v)) for k, v in txn.cursor(old).iternext()]
        seq = 0
        for k, v in rows:
            seq += 1
            self.env.put(self.rec_db, _lmdb_key(seq, k), v)
            if seq % 10_000 == 0:
                self.env.commit()
        self.env.drop(old, delete=True)
        self.env.commit()
        if seq:
            log.info("SOW %s: %d records moved to the insert-ordered layout", self.base, seq)

    def reload_keys(self) -> None:
        """Read the SowKey -> LMDB key map from the stored keys (at open, and after a
        discarded batch: the writes it had made to the map are gone)."""
        m: dict[str, bytes] = {}
        last = b""
        with self.env.reading() as txn:
            for k in txn.cursor(self.rec_db).iternext(values=False):
                last = bytes(k)
                m[str(last[KEY_SEQ:], "utf-8")] = last
        self._lk = m
        self._seq = int.from_bytes(last[:KEY_SEQ], "big")

    def _new_key(self, skey: str) -> bytes:
        """The LMDB key of a new record (appended: the next insert sequence)."""
        self._seq += 1
        lk = self._lk[skey] = _lmdb_key(self._seq, skey.encode())
        return lk

    def _keys_of(self, keys: Iterable[str]) -> list[bytes]:
        """The LMDB keys of the stored ones of ``keys``, in natural order."""
        g = self._lk.get
        return sorted(lk for lk in map(g, keys) if lk is not None)

    def snapshot_keys(self, keys: Iterable[str]) -> list[bytes]:
        """:meth:`_keys_of` for a read of a snapshot (:meth:`get_many_in`,
        :meth:`stored_in`): also the keys records had before they were deleted (a snapshot
        older than the delete still holds them; a key it does not hold is skipped by the
        read)."""
        gone = self._gone
        if not gone:
            return self._keys_of(keys)
        g = self._lk.get
        out = []
        for k in keys:
            lk = g(k)
            if lk is not None:
                out.append(lk)
            was = gone.get(k)
            if was is not None:
                out.extend(was)
        return sorted(set(out))

    def _bury(self, items: Iterable[tuple[str, bytes]]) -> None:
        """Keep the LMDB keys of deleted records for the open snapshots (see
        :meth:`snapshot_keys`); forgotten once none is open."""
        if not self.env.snapshots:
            self._gone.clear()
            return
        gone = self._gone
        for k, lk in items:
            was = gone.get(k)
            if was is None:
                gone[k] = [lk]
            else:
                was.append(lk)

    def reading(self):
        return self.env.reading()

    def get(self, skey: str) -> Record | None:
        lk = self._lk.get(skey)
        if lk is None:
            return None
        txn = self.env._wtxn  # fast path: inside the batch
        if txn is not None:
            v = txn.get(lk, db=self.rec_db)
            return None if v is None else decode_record(skey, v)
        with self.env.reading() as txn:
            v = txn.get(lk, db=self.rec_db)
            return None if v is None else decode_record(skey, v)

    def put(self, rec: Record, old: Record | None) -> None:
        k = rec.sow_key
        lk = self._lk.get(k) or self._new_key(k)
        self.env.put(self.rec_db, lk, encode_record(rec))

    def swap(self, rec: Record) -> Record | None:
        """Store ``rec`` and return the record it replaced (one B-tree descent)."""
        k = rec.sow_key
        lk = self._lk.get(k)
        if lk is None:
            self.env.put(self.rec_db, self._new_key(k), encode_record(rec))
            return None
        v = self.env.replace(self.rec_db, lk, encode_record(rec))
        return None if v is None else decode_record(k, v)

    def swap_plain(self, keyed: list[tuple[Any, str]], bodies: list, bookmarks: list[str],
                   positions: list[int], timestamps: list[float], decoder: Any) -> list[Any]:
        """:meth:`MemoryBackend.swap_plain`: one cursor descent per record; no
        :class:`Record` is built (unless the old one had an expiration), the old body is read
        only as ``decoder`` reads it (``None``: not at all)."""
        lks, values, new = self._plain_rows(keyed, bodies, bookmarks, positions, timestamps)
        if new == len(lks):  # every key new (and distinct): appended
            self.env.put_many(self.rec_db, lks, values, append=True)
            return [NEW] * len(lks)
        olds = self.env.replace_run(self.rec_db, lks, values)
        if olds.count(None) == len(olds):  # (a run of new keys: nothing to read)
            return [NEW] * len(olds)
        out: list[Any] = []
        for (_, key), old in zip(keyed, olds, strict=True):
            if old is None:
                out.append(NEW)
            elif old[24:32] != _NO_EXPIRATION:  # (expiration_of(old), inlined)
                out.append(decode_record(key, old))
            elif decoder is None:
                out.append(None)
            else:
                o = old[0]
                body = old[o:] if o else old[int.from_bytes(old[32:36], "big"):]
                try:
                    out.append(decoder.decode(body))
                except _decode_errors:
                    out.append(_any(body))  # (_partial's fallback: not a JSON object)
        return out

    def store_plain(self, keyed: list[tuple[Any, str]], bodies: list, bookmarks: list[str],
                    positions: list[int], timestamps: list[float]) -> int:
        """:meth:`MemoryBackend.store_plain`: one put per record, none read back."""
        lks, values, new = self._plain_rows(keyed, bodies, bookmarks, positions, timestamps)
        self.env.put_many(self.rec_db, lks, values, append=new == len(lks))
        return new

    def _plain_rows(self, keyed: list[tuple[Any, str]], bodies: list, bookmarks: list[str],
                    positions: list[int], timestamps: list[float]
                    ) -> tuple[list[bytes], list[bytes], int]:
        """The LMDB keys and values of records without expiration or headers, and how many
        of their SowKeys are new (given the next insert sequences)."""
        values = sow_values(VERSION, bodies, bookmarks, positions, timestamps)
        first = self._seq
        lks, self._seq = record_keys(self._lk, keyed, first)
        return lks, values, self._seq - first

    def delete(self, skey: str) -> None:
        lk = self._lk.pop(skey, None)
        if lk is not None:
            self.env.delete(self.rec_db, lk)
            self._bury(((skey, lk),))

    def count(self) -> int:
        with self.env.reading() as txn:
            return txn.stat(self.rec_db)["entries"]

    def get_many(self, keys: Iterable[str]) -> list[Record]:
        lks = self._keys_of(keys)
        with self.env.reading() as txn:
            rows = txn.cursor(self.rec_db).getmulti(lks)
            return [decode_record(str(k[KEY_SEQ:], "utf-8"), v) for k, v in rows]

    def scan(self, f, decoder, dead: set, ctx_of, names=None) -> list[tuple[Record, Any]]:
        """Rows whose body satisfies ``f``.  ``decoder``: a msgspec decoder for the fields the
        query reads (``None``: the query reads no field, don't decode); ``names``: the
        top-level field names ``decoder`` reads, if it reads only such fields."""
        with self.env.reading() as txn:
            return self._scan(txn.cursor(self.rec_db), None, f, decoder, dead, ctx_of, names)

    def snapshot(self, buffers: bool = True):
        """A read transaction of the query's own (see :meth:`LmdbEnv.snapshot`); ``buffers``:
        it reads buffers into the map (copied before they are kept), else ``bytes``."""
        return self.env.snapshot(buffers)

    def release(self, snap) -> None:
        self.env.release(snap)

    def scan_steps(self, snap, chunk: int, f, decoder, dead: set, ctx_of, names=None
                   ) -> Iterator[list[tuple[Record, Any]]]:
        """:meth:`scan` over the snapshot ``snap``, ``chunk`` records per step: yields each
        step's rows."""
        cur = snap.cursor(self.rec_db)
        if not cur.first():
            return
        while True:
            yield self._scan(cur, chunk, f, decoder, dead, ctx_of, names)
            if not cur.next():  # past the step's last record: the next step's first
                return

    def get_many_in(self, snap, keys: list[str]) -> list[Record]:
        """:meth:`get_many` in the snapshot ``snap``."""
        out = []
        for k, v in snap.cursor(self.rec_db).getmulti(self.snapshot_keys(keys)):
            rec = decode_record(str(k[KEY_SEQ:], "utf-8"), v)
            rec.seq = int.from_bytes(k[:KEY_SEQ], "big")  # (for natural_order)
            out.append(rec)
        return out

    @staticmethod
    def natural_order(rows: list[tuple[Record, Any]]) -> None:
        """Sort rows of :meth:`get_many_in` into natural order."""
        rows.sort(key=lambda rd: rd[0].seq)

    def scan_stored(self, f, decoder, dead: set, names=None) -> StoredRecords:
        """:meth:`scan` for a query that needs the matching records only (no document, no
        ``ctx_of``): the rows as they are stored (:class:`sow.record.StoredRecords`), no
        :class:`Record` built."""
        with self.env.reading() as txn:
            return self._scan_stored(txn.cursor(self.rec_db), None, f, decoder, dead, names,
                                     False)

    def scan_stored_steps(self, snap, chunk: int, f, decoder, dead: set, names=None,
                          as_bytes: bool = False) -> Iterator[StoredRecords]:
        """:meth:`scan_stored` over the snapshot ``snap``, ``chunk`` records per step.
        ``as_bytes``: ``snap`` reads ``bytes`` (``snapshot(buffers=False)``), kept as read."""
        cur = snap.cursor(self.rec_db)
        if not cur.first():
            return
        while True:
            yield self._scan_stored(cur, chunk, f, decoder, dead, names, as_bytes)
            if not cur.next():
                return

    def stored_in(self, snap, lks: list[bytes]) -> list[tuple[bytes, bytes]]:
        """The stored rows (:class:`sow.record.StoredRecords`'s (LMDB key, value) pairs) of
        the LMDB keys ``lks`` (from :meth:`snapshot_keys`) that the snapshot ``snap``
        (reading ``bytes``) holds."""
        return snap.cursor(self.rec_db).getmulti(lks)

    def get_stored(self, keys: list[str]) -> list[tuple[bytes, bytes]]:
        """:meth:`get_many` as stored rows, (LMDB key, value) pairs, in natural order."""
        lks = self._keys_of(keys)
        with self.env.reading() as txn:
            return [(bytes(k), bytes(v)) for k, v in txn.cursor(self.rec_db).getmulti(lks)]

    @staticmethod
    def check_stored(rows: list[tuple[bytes, bytes]], f, decoder, dead: set) -> StoredRecords:
        """The index candidates ``rows`` that satisfy ``f`` (``TopicReads._check`` for stored
        rows: the filter sees the same document)."""
        if f is None and not dead:
            return StoredRecords(rows)
        out = []
        for k, v in rows:
            if dead and str(k[KEY_SEQ:], "utf-8") in dead:
                continue
            if f is not None and not f(_partial(decoder, v[v[0] or _body_offset(v):])):
                continue
            out.append((k, v))
        return StoredRecords(out)

    def _scan_stored(self, cur, limit: int | None, f, decoder, dead: set, names,
                     as_bytes: bool) -> StoredRecords:
        """:meth:`_scan` keeping the matching rows as stored: the same rows, in the same
        order (the filter sees the same documents), their keys and values copied out.
        ``as_bytes``: the cursor reads ``bytes`` (no copy needed)."""
        if f is None:  # every record (the plain query): no body read
            if as_bytes and not dead:
                return StoredRecords(list(islice(cur.iternext(), limit)))
            return StoredRecords([(bytes(k), bytes(v)) for k, v in islice(cur.iternext(), limit)
                                  if not dead or str(k[KEY_SEQ:], "utf-8") not in dead])
        rows: list[tuple[bytes, bytes]] = []
        append = rows.append
        ff = fields_filter(f) if names is not None and decoder is not None else None
        fdec = ff.decoder_for(names) if ff is not None and set(ff.names).issubset(names) \
            else None
        if ff is not None and fdec is not None:
            template = _FIELDS_BYTES_LOOP if as_bytes else _FIELDS_STORED_LOOP
            loop = ff.build(template, _FIELDS_LOOP_NAMES)["_scan_loop"]
            loop(islice(cur.iternext(keys=False), limit), fdec.decode, decoder.decode, f,
                 cur.key, dead, rows)
            return StoredRecords(rows)
        ckey = cur.key
        for v, _d in _passing(cur, limit, f, decoder):
            kb = bytes(ckey())
            if dead and str(kb[KEY_SEQ:], "utf-8") in dead:
                continue
            append((kb, bytes(v)))
        return StoredRecords(rows)

    def _scan(self, cur, limit: int | None, f, decoder, dead: set, ctx_of, names
              ) -> list[tuple[Record, Any]]:
        """The scan from the cursor's record (the first if it is not positioned), at most
        ``limit`` records (``None``: to the end)."""
        out: list[tuple[Record, Any]] = []
        append = out.append
        ff = None
        if f is not None and ctx_of is None and names is not None and decoder is not None:
            ff = fields_filter(f)
        fdec = ff.decoder_for(names) if ff is not None and set(ff.names).issubset(names) \
            else None
        if ff is not None and fdec is not None:
            loop = ff.build(_FIELDS_LOOP, _FIELDS_LOOP_NAMES)["_scan_loop"]
            return loop(islice(cur.iternext(keys=False), limit), fdec.decode, decoder.decode, f,
                        cur.key, dead)
        if f is None and decoder is None:  # every record, no field read (a plain query)
            for k, v in islice(cur.iternext(), limit):
                key = str(k[KEY_SEQ:], "utf-8")
                if dead and key in dead:
                    continue
                append((decode_record(key, v), {}))  # (_partial's result without a decoder)
            return out
        if ctx_of is not None or f is None:
            for k, v in islice(cur.iternext(), limit):
                key = str(k[KEY_SEQ:], "utf-8")
                if key in dead:
                    continue
                rec = decode_record(key, v)
                if f is None:
                    append((rec, _partial(decoder, rec.data)))
                else:
                    d = _partial(decoder, rec.data)
                    if f(d, ctx_of(rec)):
                        append((rec, d))
            return out
        ckey = cur.key
        for v, d in _passing(cur, limit, f, decoder):
            key = str(ckey()[KEY_SEQ:], "utf-8")
            if key in dead:
                continue
            append((decode_record(key, v), d))
        return out

    def iter_docs(self, decoder=None) -> Iterator[tuple[str, Any]]:
        dec = decoder or self._full
        with self.env.reading() as txn:
            cur = txn.cursor(self.rec_db)
            rows = []
            for k, v in cur.iternext():
                rows.append((str(k[KEY_SEQ:], "utf-8"), _partial(dec, body_of(v))))
        return iter(rows)

    def doc_steps(self, step: int, decoder=None) -> Iterator[list[tuple[str, Any]]]:
        """:meth:`MemoryBackend.doc_steps`: each step reads the next ``step`` records in key
        order, as they are then (the open batch included)."""
        dec = decoder or self._full
        after: bytes | None = None
        while True:
            rows: list[tuple[str, Any]] = []
            with self.env.reading() as txn:
                cur = txn.cursor(self.rec_db)
                ok = cur.first() if after is None else cur.set_range(after)
                if ok and after is not None and cur.key() == after:
                    ok = cur.next()
                while ok and len(rows) < step:
                    k, v = cur.item()
                    after = bytes(k)
                    rows.append((str(after[KEY_SEQ:], "utf-8"), _partial(dec, body_of(v))))
                    ok = cur.next()
            if not rows:
                return
            yield rows
            if len(rows) < step:
                return

    def old_doc(self, rec: Record, decoder=None) -> Any:
        if rec.has_doc or decoder is None:
            return rec.doc
        return _partial(decoder, rec.data)

    def doc_for(self, rec: Record, decoder) -> Any:
        """The document a query evaluates for ``rec``: only the fields it reads."""
        if rec.has_doc:
            return rec.doc
        return _partial(decoder, rec.data)

    def clear(self) -> None:
        self.env.drop(self.rec_db)
        self._bury(self._lk.items())
        self._lk.clear()
        for t in self._tables.values():
            t.clear()

    def _db(self, name: str):
        return self.env.open_db(f"{self.base}:{name}")

    def hash_table(self, name: str) -> LmdbHashTable:
        t = self._tables.get(name)
        if t is None:
            t = self._tables[name] = LmdbHashTable(self.env, self._db(name))
        return t

    def ordered_table(self, name: str) -> LmdbOrderedSet:
        t = self._tables.get(name)
        if t is None:
            t = self._tables[name] = LmdbOrderedSet(self.env, self._db(name))
        return t

    def kv_table(self, name: str) -> LmdbKVTable:
        t = self._tables.get(name)
        if t is None:
            t = self._tables[name] = LmdbKVTable(self.env, self._db(name))
        return t

    def all_records(self) -> list[Record]:
        """Every stored record (expired ones too), in natural order."""
        with self.env.reading() as txn:
            return [decode_record(str(k[KEY_SEQ:], "utf-8"), bytes(v))
                    for k, v in txn.cursor(self.rec_db).iternext()]

    def records_in(self, snap) -> Iterator[Record]:
        """Every record of the snapshot ``snap``, read as the caller iterates."""
        for k, v in snap.cursor(self.rec_db).iternext():
            yield decode_record(str(k[KEY_SEQ:], "utf-8"), bytes(v))

    def drop_table(self, name: str) -> None:
        t = self._tables.pop(name, None)
        db = t.db if t is not None else self._db(name)
        self.env.drop(db, delete=True)
        self.env.commit()

    def meta_get(self, name: str, default: Any = None) -> Any:
        with self.env.reading() as txn:
            v = txn.get(name.encode(), db=self.meta_db)
            return default if v is None else _json.decode(v)

    def meta_put(self, name: str, value: Any) -> None:
        self.env.put(self.meta_db, name.encode(), _json.encode(value))


def record_keys_py(lk_of: dict[str, bytes], keyed: list[tuple[Any, str]], seq: int
                   ) -> tuple[list[bytes], int]:
    """The LMDB key of each SowKey of ``keyed`` ((document, SowKey) pairs) in ``lk_of``;
    a SowKey it lacks gets the next insert sequence (``seq + 1``, 8 bytes big-endian, then
    the SowKey's UTF-8), put into ``lk_of``. Returns (the keys, the last sequence given).
    The pure-Python twin of the compiled ``_speedups.record_keys``."""
    g = lk_of.get
    out: list[bytes] = []
    append = out.append
    for item in keyed:
        if item.__class__ is not tuple or len(item) != 2 or item[1].__class__ is not str:
            raise TypeError("record_keys: keyed holds (document, str) pairs")
        key = item[1]
        lk = g(key)
        if lk is None:
            seq += 1
            lk = lk_of[key] = _lmdb_key(seq, key.encode())
        append(lk)
    return out, seq


def _lmdb_key(seq: int, skey: bytes) -> bytes:
    """A record's LMDB key: its insert sequence (8 bytes, big-endian), then its SowKey."""
    return seq.to_bytes(KEY_SEQ, "big") + skey


if accel.COMPILED:
    from amps_emulator import _speedups

    #: see record_keys_py (compiled when built)
    record_keys = _speedups.record_keys
else:
    record_keys = record_keys_py


#: the record storage of one topic (the interface above)
Backend: TypeAlias = MemoryBackend | LmdbBackend


# The scan loop around a filter's fields mode (protocol.filter.fields.FieldsFilter): one
# generated function per filter, the filter's test inlined, no call per record.  A record's
# body is decoded into a struct of the fields the query reads; a body that is not a JSON
# object goes through the compiled filter on its full decode, exactly as ``_partial`` does.
# Only matching rows are keyed, built and decoded into the document the query returns.
_FIELDS_LOOP = """
def _scan_loop(_q_values, _q_dec, _q_doc, _q_fn, _q_key, _q_dead):
    _q_out = []
    _q_append = _q_out.append
    for _q_v in _q_values:
        _q_body = _q_v[_q_v[0] or _q_offset(_q_v):]
        try:
            _s = _q_dec(_q_body)
        except _q_errors:
            _q_d = _q_any(_q_body)
            if _q_fn(_q_d):
                _q_k = str(_q_key()[_q_seq:], "utf-8")
                if _q_k not in _q_dead:
                    _q_append((_q_record(_q_k, _q_v), _q_d))
            continue
        try:
            <PRE>
            if not ({test}):
                continue
        except Exception:  # a bug: counted, and answered by the reference interpreter
            if not _recover(_q_partial(_q_doc, _q_body)):
                continue
        _q_k = str(_q_key()[_q_seq:], "utf-8")
        if _q_k not in _q_dead:
            _q_append((_q_record(_q_k, _q_v), _q_partial(_q_doc, _q_body)))
    return _q_out
"""


# The same loop keeping the matching rows as stored (LmdbBackend._scan_stored): the key and
# the value of each match are copied out, nothing else is decoded.
_FIELDS_STORED_LOOP = """
def _scan_loop(_q_values, _q_dec, _q_doc, _q_fn, _q_key, _q_dead, _q_rows):
    _q_append = _q_rows.append
    for _q_v in _q_values:
        _q_body = _q_v[_q_v[0] or _q_offset(_q_v):]
        try:
            _s = _q_dec(_q_body)
        except _q_errors:
            if _q_fn(_q_any(_q_body)):
                _q_k = bytes(_q_key())
                if not _q_dead or str(_q_k[_q_seq:], "utf-8") not in _q_dead:
                    _q_append((_q_k, bytes(_q_v)))
            continue
        try:
            <PRE>
            if not ({test}):
                continue
        except Exception:  # a bug: counted, and answered by the reference interpreter
            if not _recover(_q_partial(_q_doc, _q_body)):
                continue
        _q_k = bytes(_q_key())
        if not _q_dead or str(_q_k[_q_seq:], "utf-8") not in _q_dead:
            _q_append((_q_k, bytes(_q_v)))
"""


# ... reading bytes (a snapshot of bytes): they are kept as they are, no copy
_FIELDS_BYTES_LOOP = _FIELDS_STORED_LOOP.replace("bytes(_q_key())", "_q_key()").replace(
    "bytes(_q_v)", "_q_v")


def _body_offset(value) -> int:
    return int.from_bytes(value[32:36], "big")


def _passing(cur, limit: int | None, f, decoder) -> Iterator[tuple[Any, Any]]:
    """(stored value, document) of each record from the cursor's (at most ``limit`` read)
    whose document passes ``f``, reading values only; the cursor stays on each while the
    caller looks (its key: ``cur.key()``)."""
    dec = decoder.decode if decoder is not None else None
    empty: dict = {}
    for v in islice(cur.iternext(keys=False), limit):
        if dec is None:
            d = empty
        else:
            o = v[0]
            body = v[o:] if o else v[int.from_bytes(v[32:36], "big"):]
            try:
                d = dec(body)
            except _decode_errors:
                d = _any(body)  # not an object (array, scalar) or not JSON
        if f(d):
            yield v, d


def _any(data) -> Any:
    try:
        return _json.decode(data)
    except _decode_errors:
        return None


def _partial(decoder, data) -> Any:
    if decoder is None:
        return {}
    try:
        return decoder.decode(data)
    except _decode_errors:
        return _any(data)  # a body that is not a JSON object: decode it whole


def _partial_with(decode, data) -> Any:
    try:
        return decode(data)
    except _decode_errors:
        return _any(data)


_FIELDS_LOOP_NAMES = {"_q_errors": _decode_errors, "_q_any": _any, "_q_offset": _body_offset,
                      "_q_record": decode_record, "_q_partial": _partial_with,
                      "_q_seq": KEY_SEQ}
