"""The indexes of a SOW topic: set up from the topic's definition, built, added on demand.

:class:`TopicIndexes` is the base class of :class:`sow.topic.Topic` (and derives from
:class:`sow.scan.TopicReads`, whose query plans ask it for memo indexes). The writes keep
the indexes row by row (in :mod:`sow.topic`); this is where they come from: the hash and memo
indexes a topic's configuration asks for (built at open when new, dropped when no longer
configured), the memo indexes a query plan creates (at once, or in steps), and the
decoders that read the fields they index. Each index is one table of the topic's backend,
named by :func:`stored_table_name`.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Generator
from typing import Any

from amps_emulator.protocol.reasons import BAD_FILTER, CommandError
from amps_emulator.sow.auxiliary import ChainingKeyGenerator
from amps_emulator.sow.index import HashIndex, KeyHashIndex, MemoIndex
from amps_emulator.sow.keys import KeyGenerator
from amps_emulator.sow.paths import Path, parse_path, path_text
from amps_emulator.sow.scan import BUILDING, TopicReads

__all__ = ["TopicIndexes", "stored_table_name"]

log = logging.getLogger("amps_emulator.sow")


def _index_table_name(kind: str, fields: tuple[str, ...]) -> str:
    h = hashlib.blake2b("\x1f".join(fields).encode(), digest_size=8).hexdigest()
    return f"{kind}:{h}"


#: the table name prefix of each stored index kind ("keyhash": a KeyHashIndex)
_TABLE_KIND = {"hash": "h", "keyhash": "k"}


def stored_table_name(kind: str, fields: list[str]) -> str:
    """The table of a stored index definition ``[kind, *fields]``."""
    if kind == "memo":
        return _index_table_name("m", (path_text(parse_path(fields[0])),))
    return _index_table_name(_TABLE_KIND[kind], tuple(fields))


class TopicIndexes(TopicReads):
    """Index set-up and management of one SOW topic (see the module docstring); the
    attributes declared here are set by :class:`sow.topic.Topic`."""

    #: the SowKey of a body (None: from the ``k`` header)
    _keygen: KeyGenerator | ChainingKeyGenerator | None
    _index_dec: tuple | None  # ((#hash, #memo), decoder): see _index_decoder
    _plain_decoder: Any  # what Topic.upsert_run reads a replaced record with

    def _setup_indexes(self) -> None:
        wanted_hash: list[tuple[str, ...]] = []
        if self.spec.keys:
            wanted_hash.append(tuple(self.spec.keys))
        for h in self.spec.hash_indexes:
            h = tuple(h)
            if h and h not in wanted_hash:
                wanted_hash.append(h)
        stored = [tuple(x) for x in self._b.meta_get("indexes", [])]  # [kind, *fields]
        memo_fields: list[str] = [f for k, *fs in stored if k == "memo" for f in fs]
        for f in self.spec.indexes:
            if f not in memo_fields:
                memo_fields.append(f)
        present = set(stored)
        new_defs = []
        to_build: list[HashIndex | MemoIndex] = []
        for fields in wanted_hash:
            keygen = self._keygen
            if isinstance(keygen, KeyGenerator) and len(fields) == 1 \
                    and fields == tuple(self.spec.keys):
                kind = "keyhash"  # the Key field's own index: rows the SowKey implies left out
                ix: HashIndex = KeyHashIndex(fields, self._b.hash_table(
                    _index_table_name(_TABLE_KIND[kind], fields)), keygen.of_text)
            else:
                kind = "hash"
                ix = HashIndex(fields, self._b.hash_table(_index_table_name("h", fields)))
            self.hash_indexes.append(ix)
            new_defs.append((kind, *fields))
            if (kind, *fields) not in present:
                to_build.append(ix)
        for f in memo_fields:
            p = parse_path(f)
            if p in self.memo_indexes:
                continue
            mx = MemoIndex(f, self._b.ordered_table(_index_table_name("m", (path_text(p),))))
            self.memo_indexes[p] = mx
            new_defs.append(("memo", f))
            if ("memo", f) not in present:
                to_build.append(mx)
        for d in stored:  # indexes no longer configured (or kept in another kind)
            if d not in new_defs:
                kind, *fs = d
                if kind in _TABLE_KIND:
                    self._b.drop_table(stored_table_name(kind, fs))
        if to_build:
            self._build(to_build)
        if [list(d) for d in new_defs] != [list(d) for d in stored]:
            self._b.meta_put("indexes", [list(d) for d in new_defs])

    def _build(self, indexes: list[HashIndex | MemoIndex]) -> None:
        paths = [p for ix in indexes
                 for p in (ix.paths if isinstance(ix, HashIndex) else (ix.path,))]
        for ix in indexes:
            ix.clear()
        for skey, doc in self._b.iter_docs(self._decoder_for(paths)):
            for ix in indexes:
                ix.add(doc, skey)

    @property
    def _index_paths(self) -> list[tuple]:
        out = [p for ix in self.hash_indexes for p in ix.paths]
        out.extend(self.memo_indexes)
        return out

    def _index_decoder(self):
        """The decoder for the fields the indexes read (cached until the index set changes)."""
        sig = (len(self.hash_indexes), len(self.memo_indexes))
        cached = self._index_dec
        if cached is not None and cached[0] == sig:
            return cached[1]
        dec = self._decoder_for(self._index_paths)
        self._index_dec = (sig, dec)
        return dec

    def _indexes_decoder(self):
        """:meth:`_index_decoder`, or None when the topic has no index."""
        return self._index_decoder() if self.hash_indexes or self.memo_indexes else None

    def add_memo_index(self, field: str) -> MemoIndex:
        """Create (building it now) or return the memo index on ``field``."""
        p = parse_path(field)
        ix = self.memo_indexes.get(p)
        if ix is not None:
            if p in self._building:  # being built in steps: finished here, at once
                self._building.discard(p)
                self._build([ix])
                self._record_memo(path_text(p))
            return ix
        if not p:
            raise CommandError(BAD_FILTER, f"cannot index {field!r}")
        ix = MemoIndex(field, self._b.ordered_table(_index_table_name("m", (path_text(p),))))
        self._build([ix])
        self.memo_indexes[p] = ix
        self._indexes_changed()
        self._record_memo(field)
        log.info("SOW topic %s: created memo index on %s", self.name, field)
        return ix

    def memo_build_steps(self, path: Path, step: int) -> Generator[str, None, bool]:
        """Build the memo index on ``path`` in steps of ``step`` records, yielding
        :data:`BUILDING` between them, so a query that runs in steps does not hold the loop
        while it builds. The index is kept by every write from the start but no plan reads it
        (:attr:`_building`) until the last step; each step reads the records as they are then
        (a record written before its step is indexed by that write and again, the same, by the
        step). Returns True once built and recorded as the topic's; closed before that, the
        half-built index is dropped."""
        field = path_text(path)
        if path in self.memo_indexes:
            return path not in self._building
        mx = MemoIndex(field, self._b.ordered_table(_index_table_name("m", (field,))))
        mx.clear()  # (rows a build cut short by a crash left)
        self.memo_indexes[path] = mx
        self._building.add(path)
        self._indexes_changed()
        done = False
        try:
            for rows in self._b.doc_steps(step, self._decoder_for([path])):
                for skey, doc in rows:
                    mx.add(doc, skey)
                yield BUILDING
            done = True
        finally:
            if path in self._building:  # (else add_memo_index finished it meanwhile)
                self._building.discard(path)
                if done:
                    self._record_memo(field)
                    log.info("SOW topic %s: created memo index on %s (in steps)", self.name,
                             field)
                else:
                    del self.memo_indexes[path]
                    mx.clear()
                    self._indexes_changed()
        return True

    def _indexes_changed(self) -> None:
        """The set of indexes changed: what reads the fields they index is made again."""
        self._index_dec = None
        self._plain_decoder = self._indexes_decoder()

    def _record_memo(self, field: str) -> None:
        """Record the memo index on ``field`` among the topic's (built again at open)."""
        defs = [list(d) for d in self._b.meta_get("indexes", [])]
        if ["memo", field] not in defs:
            defs.append(["memo", field])
            self._b.meta_put("indexes", defs)

    def index_info(self) -> list[dict]:
        out = [{"kind": "hash", "fields": list(ix.fields), "entries": len(ix.table)}
               for ix in self.hash_indexes]
        out += [{"kind": "memo", "fields": [ix.field], "entries": len(ix.table)}
                for ix in self.memo_indexes.values()]
        return out
