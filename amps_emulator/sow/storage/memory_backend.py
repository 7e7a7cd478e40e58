"""The transient record storage of a topic (the :mod:`sow.storage.backend` interface, in memory).

Every record is kept as a :class:`Record` with its decoded body cached, so a scan runs the
filter on documents decoded once; the natural order is kept by an insert sequence on each
record (an update keeps its record's).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import nullcontext
from typing import Any

from amps_emulator.sow.record import Record
from amps_emulator.sow.storage.backend import NEW
from amps_emulator.sow.storage.memory_tables import MemHashTable, MemKVTable, MemOrderedSet

__all__ = ["MemoryBackend"]


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

    def prepare_value(self, body: bytes, bookmark: str) -> None:
        """(:meth:`LmdbBackend.prepare_value`: a record here holds the body itself.)"""

    def drop_prepared(self) -> None:
        """(Nothing is built ahead here.)"""

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

