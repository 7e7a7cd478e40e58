"""The persistent record storage of a topic (the :mod:`sow.storage.backend` interface, in LMDB).

Layout: a topic's records are one database (``<base>:s``) whose keys are an 8-byte
big-endian insert sequence followed by the SowKey, so a new record is appended at the end of
the B-tree instead of landing at a random place (SowKeys are digests): an insert then dirties
the pages it shares with the inserts before it, not a page of its own (about 4 us per insert
saved on a topic of 100k records).  The SowKey -> LMDB key map is kept in memory, read from
the keys at open (and again after a discarded batch).  A database of the earlier layout
(``<base>:r``, keyed by SowKey) is moved over once at open, in SowKey order.

Scans decode only what the query reads (see :mod:`sow.storage.lmdb_scan`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Any

import msgspec

from amps_emulator.protocol.filter.fields import fields_filter
from amps_emulator.sow.record import (
    FIXED,
    KEY_SEQ,
    VERSION,
    Record,
    StoredRecords,
    body_of,
    decode_record,
    encode_record,
    sow_values,
    value_head,
)
from amps_emulator.sow.storage.backend import NEW
from amps_emulator.sow.storage.lmdb_keys import db_base_name, lmdb_key, record_keys
from amps_emulator.sow.storage.lmdb_scan import (
    DECODE_ERRORS,
    FIELDS_BYTES_LOOP,
    FIELDS_LOOP,
    FIELDS_LOOP_NAMES,
    FIELDS_STORED_LOOP,
    any_doc,
    body_offset,
    partial_doc,
    passing,
)
from amps_emulator.sow.storage.lmdb_tables import LmdbHashTable, LmdbKVTable, LmdbOrderedSet
from amps_emulator.sow.storage.lmdbenv import LmdbEnv

__all__ = ["LmdbBackend"]

_json = msgspec.json
_NO_EXPIRATION = bytes(8)  # the f64 0.0 of a record without expiration
# (the name it had when this class shared a module with the memory backend)
log = logging.getLogger("amps_emulator.sow.storage.backend")


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
        #: (body, its bookmark's length, its stored value built ahead): see prepare_value
        self._ready: tuple[bytes, int, bytearray] | None = None
        old = env.find_db(self.base + ":r")
        if old is not None:
            self._move_from(old)
        self.reload_keys()
        env.on_discard.append(self.reload_keys)
        env.on_reopen.append(self._reopened)

    def _reopened(self) -> None:
        """The environment was reopened on new files (a compacted copy: same keys and
        values): open every database handle again."""
        self.rec_db = self.env.open_db(self.base + ":s")
        self.meta_db = self.env.open_db(self.base + ":m")
        for name, t in self._tables.items():
            t.db = self._db(name)
        self._gone.clear()  # (no snapshot survives a reopen)

    def _move_from(self, old) -> None:
        """Move the records of the earlier layout (keyed by SowKey) into :attr:`rec_db`."""
        with self.env.reading() as txn:
            rows = [(bytes(k), bytes(v)) for k, v in txn.cursor(old).iternext()]
        seq = 0
        for k, v in rows:
            seq += 1
            self.env.put(self.rec_db, lmdb_key(seq, k), v)
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
        lk = self._lk[skey] = lmdb_key(self._seq, skey.encode())
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
                except DECODE_ERRORS:
                    out.append(any_doc(body))  # (partial_doc's fallback: not a JSON object)
        return out

    def store_plain(self, keyed: list[tuple[Any, str]], bodies: list, bookmarks: list[str],
                    positions: list[int], timestamps: list[float]) -> int:
        """:meth:`MemoryBackend.store_plain`: one put per record, none read back."""
        lks, values, new = self._plain_rows(keyed, bodies, bookmarks, positions, timestamps)
        self.env.put_many(self.rec_db, lks, values, append=new == len(lks))
        return new

    def prepare_value(self, body: bytes, bookmark: str) -> None:
        """Build ahead the stored value of ``body``, to be stored next (alone, without
        expiration or headers) with a bookmark as long as ``bookmark``: the copy of a large
        body, done in a loop pass before the one that stores it. The next store of records
        takes it if it stores just that body (the same object) with such a bookmark, writing
        in the record's own bookmark, position and timestamp; any other drops it."""
        bm = len(bookmark.encode("utf-8"))
        value = bytearray(FIXED.size + bm)
        value += body  # (one copy: bytearray(n) would write n zeros first)
        self._ready = (body, bm, value)

    def drop_prepared(self) -> None:
        """Forget the value :meth:`prepare_value` built, if no store took it."""
        self._ready = None

    def _plain_rows(self, keyed: list[tuple[Any, str]], bodies: list, bookmarks: list[str],
                    positions: list[int], timestamps: list[float]
                    ) -> tuple[list[bytes], list[bytes], int]:
        """The LMDB keys and values of records without expiration or headers, and how many
        of their SowKeys are new (given the next insert sequences)."""
        ready = self._ready
        values: list[Any] | None = None
        if ready is not None:
            self._ready = None
            body, size, value = ready
            if len(bodies) == 1 and bodies[0] is body:
                bm = bookmarks[0].encode("utf-8")
                if len(bm) == size:
                    value[:FIXED.size + size] = value_head(VERSION, bm, positions[0], timestamps[0])
                    values = [value]
        if values is None:
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
            if f is not None and not f(partial_doc(decoder, v[v[0] or body_offset(v):])):
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
            template = FIELDS_BYTES_LOOP if as_bytes else FIELDS_STORED_LOOP
            loop = ff.build(template, FIELDS_LOOP_NAMES)["_scan_loop"]
            loop(islice(cur.iternext(keys=False), limit), fdec.decode, decoder.decode, f,
                 cur.key, dead, rows)
            return StoredRecords(rows)
        ckey = cur.key
        for v, _d in passing(cur, limit, f, decoder):
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
            loop = ff.build(FIELDS_LOOP, FIELDS_LOOP_NAMES)["_scan_loop"]
            return loop(islice(cur.iternext(keys=False), limit), fdec.decode, decoder.decode, f,
                        cur.key, dead)
        if f is None and decoder is None:  # every record, no field read (a plain query)
            for k, v in islice(cur.iternext(), limit):
                key = str(k[KEY_SEQ:], "utf-8")
                if dead and key in dead:
                    continue
                append((decode_record(key, v), {}))  # (partial_doc's result without a decoder)
            return out
        if ctx_of is not None or f is None:
            for k, v in islice(cur.iternext(), limit):
                key = str(k[KEY_SEQ:], "utf-8")
                if key in dead:
                    continue
                rec = decode_record(key, v)
                if f is None:
                    append((rec, partial_doc(decoder, rec.data)))
                else:
                    d = partial_doc(decoder, rec.data)
                    if f(d, ctx_of(rec)):
                        append((rec, d))
            return out
        ckey = cur.key
        for v, d in passing(cur, limit, f, decoder):
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
                rows.append((str(k[KEY_SEQ:], "utf-8"), partial_doc(dec, body_of(v))))
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
                    rows.append((str(after[KEY_SEQ:], "utf-8"), partial_doc(dec, body_of(v))))
                    ok = cur.next()
            if not rows:
                return
            yield rows
            if len(rows) < step:
                return

    def old_doc(self, rec: Record, decoder=None) -> Any:
        if rec.has_doc or decoder is None:
            return rec.doc
        return partial_doc(decoder, rec.data)

    def doc_for(self, rec: Record, decoder) -> Any:
        """The document a query evaluates for ``rec``: only the fields it reads."""
        if rec.has_doc:
            return rec.doc
        return partial_doc(decoder, rec.data)

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

