"""One SOW topic: upserts, delta merges, deletes, expiration, indexes.

Queries and counts (the read path) are in its base class :class:`sow.scan.TopicReads`, the
indexes' set-up and creation in :class:`sow.topic_indexes.TopicIndexes` (between the two).
:class:`Topic` implements the :class:`sow.store.TopicStore` protocol on top of a backend
(:mod:`sow.storage.backend`): the same code serves transient (memory) and persistent (LMDB) topics.

Mutations go into the store's current write batch (for LMDB: one write transaction, opened
lazily, committed by ``SowStore.commit()`` once per event-loop turn).  A record, its hash and
memo index rows, its expiry row and the topic's last-applied journal position always change in
the same transaction.  Reads inside the batch see its uncommitted writes.

Clock: ``clock()`` returns UNIX seconds; tests inject a fake.  Every method that depends on
time also takes an explicit ``now=`` that overrides the clock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Iterable
from typing import Any

import msgspec

from amps_emulator.protocol.msgtypes import CodecError, MessageCodec
from amps_emulator.sow.auxiliary import ChainingKeyGenerator
from amps_emulator.sow.delta import merge
from amps_emulator.sow.enrichment import Enrichment
from amps_emulator.sow.expiry import deadline, expiry_key
from amps_emulator.sow.index import KeyHashIndex
from amps_emulator.sow.keys import KeyGenerator, validate_sow_key
from amps_emulator.sow.query import DeleteResult, PublishResult
from amps_emulator.sow.record import Record, StoredRecords
from amps_emulator.sow.scan import AUTO_MEMO_LIMIT
from amps_emulator.sow.spec import TopicSpec
from amps_emulator.sow.storage.backend import NEW, Backend
from amps_emulator.sow.topic_indexes import TopicIndexes, stored_table_name

__all__ = ["Topic"]

log = logging.getLogger("amps_emulator.sow")

_UNSET: Any = object()
#: a record deleted costs about as much as this many read by a scan (its indexes, its
#: expiry row, the write): a delete in steps removes ``query_chunk // DELETE_SHARE`` a step
DELETE_SHARE = 4
_json_decode = msgspec.json.decode
_json_encode = msgspec.json.encode


def _records(rows: StoredRecords | list[tuple[Record, Any]]) -> Iterable[Record]:
    """The records of a match (see ``TopicReads._match_steps``): stored rows or pairs."""
    return rows if isinstance(rows, StoredRecords) else (r for r, _ in rows)


def _decode(data: bytes) -> Any:
    try:
        return _json_decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError, TypeError, RecursionError):
        return None



class Topic(TopicIndexes):
    """A SOW topic.  Create through :class:`sow.store.SowStore` / :class:`TransientStore`."""

    def __init__(self, spec: TopicSpec, backend: Backend, *, clock: Callable[[], float],
                 auto_memo: bool = True, scan_fallback: float = 0.5,
                 auto_memo_limit: int | None = AUTO_MEMO_LIMIT,
                 codec: MessageCodec | None = None) -> None:
        """``codec``: the codec of the topic's message type (required unless json)."""
        super().__init__(spec, backend, clock=clock, auto_memo=auto_memo,
                         scan_fallback=scan_fallback, auto_memo_limit=auto_memo_limit,
                         codec=codec)
        #: monitoring counters (the Admin interface's insert/update/delete counts)
        self.insert_count = self.update_count = self.delete_count = 0
        self._keygen: KeyGenerator | ChainingKeyGenerator | None = \
            KeyGenerator(spec.domain, spec.keys) if spec.keys else \
            ChainingKeyGenerator(spec.domain, spec.chaining) if spec.chaining is not None else None
        #: the fields every delta message carries (the Key fields; a view sets its Grouping)
        self.delta_keys: tuple[str, ...] = spec.keys
        self._pending_expired: list[Record] = []
        self._check_key_definition()
        self._applied = int(self._b.meta_get("applied", 0))
        self._applied_dirty = False
        #: called (with the topic) when its metadata first needs writing since the last
        #: flush, so a store of many topics flushes only those (set by the store)
        self.on_meta_dirty: Callable[[Topic], None] | None = None
        #: while a stepped delete runs: the highest position recorded as applied (recovery
        #: must replay the delete if the server stops half-way)
        self._applied_hold: int | None = None
        self._index_dec: tuple | None = None  # ((#hash, #memo), decoder): see _index_decoder
        self._setup_indexes()
        #: the topic's Preprocessing and Enrichment (None: neither), which the message path
        #: runs on each publish before it is journalled and stored
        self.enrichment = Enrichment(spec.preprocessing, spec.enrichment, codec) \
            if spec.preprocessing or spec.enrichment else None
        #: a publish without expiration may be stored with :meth:`upsert_run` (json, no
        #: History, no default lifetime: nothing but the record, its indexes and position)
        self.plain_upserts = self._codec is None and self.history is None \
            and not spec.default_lifetime
        #: whether no stored record has an expiration (the expiry table, which holds a row
        #: for each record that has one, is empty): None when not known (see _none_expiring)
        self._no_expiring: bool | None = None
        #: what upsert_run reads a replaced record with: the fields the indexes read (None:
        #: there are no indexes); set again whenever an index is added
        self._plain_decoder = self._indexes_decoder()

    # ---- setup ------------------------------------------------------------------------------

    def decode_body(self, data: bytes) -> Any:
        """The tree of a body of this topic's type (``None``: malformed for it)."""
        codec = self._codec
        if codec is None:
            return _decode(data)
        try:
            return codec.decode(bytes(data))
        except CodecError:
            return None

    def _check_key_definition(self) -> None:
        keydef: list[Any] = [self.spec.domain, list(self.spec.keys)]
        chain = self.spec.chaining
        if chain is not None:  # (a topic without one keeps the definition it always had)
            keydef.append(["chaining", chain.primary, *chain.secondary])
        stored = self._b.meta_get("keydef")
        if stored is not None and stored != keydef and self._b.count():
            log.warning("SOW topic %s: Key/KeyDomain changed (%s -> %s); the stored records "
                        "are dropped and must be rebuilt from the transaction log",
                        self.name, stored, keydef)
            self._b.clear()
            for kind, *fs in self._b.meta_get("indexes", []):
                self._b.drop_table(stored_table_name(kind, fs))
            self._b.ordered_table("exp").clear()
            self._b.meta_put("applied", 0)
            self._b.meta_put("indexes", [])
        if stored != keydef:
            self._b.meta_put("keydef", keydef)

    # ---- small helpers ---------------------------------------------------------------------

    def now(self) -> float:
        return self._clock()

    @property
    def expiration_enabled(self) -> bool:
        return self.spec.expiration is not None

    def key_for(self, doc: Any, sow_key: str | None = None) -> str:
        """The SowKey a message with body ``doc`` (and header ``k``) is stored under."""
        if self._keygen is not None:
            return self._keygen(doc)
        return validate_sow_key(sow_key)

    def previous_doc(self, key: str) -> Any:
        """The document of the record stored under ``key`` (what an enrichment field reads
        ``OF PREVIOUS``), ``None`` when there is none or it has expired."""
        rec = self.get(key)
        return None if rec is None else rec.doc

    def keyed(self, docs: list[Any]) -> list[tuple[Any, str]]:
        """(document, SowKey) of each of ``docs`` (bodies published without a ``k`` header),
        up to the first that has none (:meth:`key_for` refuses it)."""
        if self._keygen is None:
            return []  # (the SowKey comes from the header alone)
        return self._keygen.keyed(docs)

    @property
    def values_ahead(self) -> bool:
        """Whether :meth:`prepare_value` can build a stored value ahead: a persistent topic
        that stores plain upserts, without enrichment or a message type of its own."""
        return self._codec is None and self.plain_upserts and self.enrichment is None \
            and self._b.persistent

    def prepare_value(self, body: bytes, bookmark: str) -> None:
        """Build ahead what storing ``body`` next copies of it (see
        ``LmdbBackend.prepare_value``): a large body's keyed upsert that nobody reads, whose
        journal record will probably have ``bookmark`` (a guess of its length)."""
        self._b.prepare_value(body, bookmark)

    def drop_prepared(self) -> None:
        """Forget a value :meth:`prepare_value` built that no store took (a refused publish)."""
        self._b.drop_prepared()

    def _index_doc(self, rec: Record) -> Any:
        if not (self.hash_indexes or self.memo_indexes):
            return None
        return self._b.old_doc(rec, self._index_decoder())

    def _note_position(self, position: int) -> None:
        if position and position > self._applied:
            self._applied = position
            self._mark_meta_dirty()

    # ---- journal position --------------------------------------------------------------------

    @property
    def applied_position(self) -> int:
        """The highest journal position applied to this topic (0 = none).  Stored in the same
        transaction as the records it covers; recovery replays the journal after it."""
        return self._applied

    def set_applied_position(self, position: int) -> None:
        """Record that everything up to ``position`` has been applied (e.g. after a journal
        record that did not change this topic, so recovery need not re-read it)."""
        self._note_position(position)

    def _mark_meta_dirty(self) -> None:
        if not self._applied_dirty:
            self._applied_dirty = True
            if self.on_meta_dirty is not None:
                self.on_meta_dirty(self)

    def flush_meta(self) -> None:
        """Write pending metadata into the open batch (the store calls this before commit)."""
        if self._applied_dirty:
            hold = self._applied_hold
            self._b.meta_put("applied", self._applied if hold is None
                             else min(self._applied, hold))
            self._applied_dirty = False

    def discard_pending(self) -> None:
        """After an aborted batch: reload the state kept outside the backend."""
        self._applied = int(self._b.meta_get("applied", 0))
        self._applied_dirty = False
        self._pending_expired.clear()
        self._no_expiring = None

    # ---- writes ------------------------------------------------------------------------------

    def publish(self, data: bytes, *, sow_key: str | None = None,
                expiration: float | int | str | None = None, bookmark: str = "",
                position: int = 0, timestamp: float | None = None,
                headers: dict | None = None, doc: Any = _UNSET,
                now: float | None = None, key: str | None = None) -> PublishResult:
        """Upsert: the record for this message's SowKey becomes this message (whole record
        replaced).  ``expiration``: the message's ``e`` header (seconds, 0 = never);
        ``position``/``bookmark``: the journal record of this publish; ``timestamp``: when
        AMPS processed it (default ``now``).  ``doc``: the already decoded body, if any;
        ``key``: the SowKey if the caller already computed it with :meth:`key_for`."""
        if now is None:
            now = self._clock()
        if doc is _UNSET:
            doc = self.decode_body(data)
        if key is None:
            key = self.key_for(doc, sow_key)
        return self.upsert(key, data, doc, expiration, bookmark, position, now, timestamp,
                           headers)

    def upsert(self, key: str, data: bytes, doc: Any, expiration: float | int | str | None = None,
               bookmark: str = "", position: int = 0, now: float | None = None,
               timestamp: float | None = None, headers: dict | None = None) -> PublishResult:
        """:meth:`publish` for a caller that already decoded the body (``doc``) and computed
        its SowKey (``key``, with :meth:`key_for`); positional arguments, for the server's
        publish hot path.  Same result as ``publish(data, doc=doc, key=key, ...)``."""
        if now is None:
            now = self._clock()
        rec = self._record(key, bytes(data), doc, expiration, bookmark, position, now, timestamp,
                           headers)
        old = self._b.swap(rec)
        return self._stored(rec, old, now, None)

    def upsert_run(self, keyed: list[tuple[Any, str]], bodies: list, bookmarks: list[str],
                   positions: list[int], timestamps: list[float],
                   now: float | None = None) -> None:
        """:meth:`upsert` of messages without expiration, in order, on a topic with
        :attr:`plain_upserts`, when nobody reads the results (no subscriber, no listener):
        body ``bodies[i]`` with (document, SowKey) ``keyed[i]``, its bookmark, journal
        position and ``timestamp`` (when the publish was processed). The same records,
        indexes, counts and position as :meth:`upsert`, without building the :class:`Record`
        each replaced (unless that one had an expiration) or a result. ``now``: the instant
        their lifetime counts from (default: the clock; read only when an old record had an
        expiration)."""
        hix = self.hash_indexes
        mix = self.memo_indexes
        dec = self._plain_decoder
        index_new = True  # whether new records go into the indexes
        ix0 = hix[0] if len(hix) == 1 and not mix else None
        if isinstance(ix0, KeyHashIndex) and ix0.whole_numbers(keyed):
            # no index reads the old records or takes the new ones: the Key index keeps no
            # row for either (see KeyHashIndex.whole_numbers), and there is no other index
            hix = []
            dec = None
            index_new = False
        if not hix and not mix and self._none_expiring():
            # nothing reads what they replace: no index, and no stored record has an
            # expiration (each has its row in the expiry table)
            inserts = self._b.store_plain(keyed, bodies, bookmarks, positions, timestamps)
            self._count_run(inserts, len(keyed) - inserts, positions)
            return
        olds = self._b.swap_plain(keyed, bodies, bookmarks, positions, timestamps, dec)
        inserts = updates = 0
        added: list[tuple[Any, str]] = []  # new records not yet in the indexes
        if olds.count(NEW) == len(olds):  # a run of new keys (the loop's result, at once)
            added = keyed
            olds = []
        for i, old in enumerate(olds):
            if old is NEW:
                added.append(keyed[i])
                continue
            if added:  # (in order: this record may be one of them)
                if index_new:
                    self._index_added(added)
                inserts += len(added)
                added = []
            doc, key = keyed[i]
            if old.__class__ is Record:  # it had an expiration: the general bookkeeping
                data = bodies[i]
                rec = Record(key, data if data.__class__ is bytes else bytes(data),
                             bookmarks[i], timestamps[i], None, positions[i], None, doc)
                self._stored(rec, old, self._clock() if now is None else now, None)
            else:  # the old record's document, as the indexes read it
                updates += 1
                for ix in hix:
                    ix.update(old, doc, key)
                if mix:
                    for mx in mix.values():
                        mx.update(old, doc, key)
        if added:
            if index_new:
                self._index_added(added)
            inserts += len(added)
        self._count_run(inserts, updates, positions)

    def _none_expiring(self) -> bool:
        """Whether no stored record has an expiration: looked up in the expiry table once,
        then known until a row is added (False) or removed or a batch is aborted (look
        again): a lookup per message would cost a publish sent on its own more than the
        read-back it saves."""
        none = self._no_expiring
        if none is None:
            none = self._no_expiring = not len(self._expiry)
        return none

    def _count_run(self, inserts: int, updates: int, positions: list[int]) -> None:
        """Count a run :meth:`upsert_run` stored and note the highest journal position."""
        self.insert_count += inserts
        self.update_count += updates
        position = max(positions)
        if position > self._applied:
            self._applied = position
            if not self._applied_dirty:
                self._mark_meta_dirty()

    def _index_added(self, keyed: list[tuple[Any, str]]) -> None:
        """Add new records, each (document, SowKey), to every index."""
        for ix in self.hash_indexes:
            ix.add_run(keyed)
        for mx in self.memo_indexes.values():
            for doc, key in keyed:
                mx.add(doc, key)

    def _record(self, key, data, doc, expiration, bookmark, position, now, timestamp,
                headers) -> Record:
        lifetime = self.spec.default_lifetime
        # positional: (sow_key, data, bookmark, timestamp, expiration, position, headers, doc)
        return Record(key, data, bookmark or "", now if timestamp is None else timestamp,
                      None if expiration is None and not lifetime
                      else deadline(now, expiration, lifetime),
                      position or 0, headers or None, doc)

    def delta_publish(self, data: bytes, *, sow_key: str | None = None,
                      expiration: float | int | str | None = None, bookmark: str = "",
                      position: int = 0, timestamp: float | None = None,
                      headers: dict | None = None, doc: Any = _UNSET,
                      now: float | None = None, key: str | None = None) -> PublishResult:
        """Merge the message's fields into the stored record (see :mod:`sow.delta`) and store
        the result; ``result.record`` is the merged record, ``result.delta`` the message."""
        if now is None:
            now = self._clock()
        if doc is _UNSET:
            doc = self.decode_body(data)
        if key is None:
            key = self.key_for(doc, sow_key)
        old = self._b.get(key)
        base = old
        if base is not None and self._is_expired(base, now):
            base = None
        codec = self._codec
        if base is None:
            merged, merged_data = doc, bytes(data)
        elif codec is not None:
            try:  # the type's own merge, on the bytes (AMPS keeps the fields' text)
                merged_data = codec.merge_delta(base.data, bytes(data))
                merged = self.decode_body(merged_data)
            except CodecError:  # no delta for the type (or a body it cannot read): the
                merged, merged_data = doc, bytes(data)  # literal message, as AMPS stores it
        else:
            merged = merge(base.doc, doc)
            merged_data = bytes(data) if merged is doc else _json_encode(merged)
        return self._store(key, merged_data, merged, old, now, expiration, bookmark, position,
                           timestamp, headers, doc)

    def _store(self, key, data, doc, old, now, expiration, bookmark, position, timestamp,
               headers, delta) -> PublishResult:
        rec = self._record(key, data, doc, expiration, bookmark, position, now, timestamp,
                           headers)
        self._b.put(rec, old)
        return self._stored(rec, old, now, delta)

    def _stored(self, rec: Record, old: Record | None, now: float, delta) -> PublishResult:
        """Index, expiry and position bookkeeping after ``rec`` replaced ``old``."""
        key = rec.sow_key
        previous = old
        if old is None:
            self.insert_count += 1
        else:
            self.update_count += 1
        hix = self.hash_indexes
        mix = self.memo_indexes
        if old is not None:
            oexp = old.expiration
            if oexp is not None and oexp <= now and self.spec.expiration is not None:
                self._pending_expired.append(old)  # expired: reported by the next sweep
                previous = None
            if hix or mix:  # (inlined: the publish hot path)
                old_doc = self._b.old_doc(old, self._index_decoder())
                new_doc = rec.doc
                for ix in hix:
                    ix.update(old_doc, new_doc, key)
                if mix:
                    for mx in mix.values():
                        mx.update(old_doc, new_doc, key)
            if oexp is not None and oexp != rec.expiration:
                self._expiry.discard(expiry_key(oexp, key))
                self._no_expiring = None
        elif hix or mix:
            new_doc = rec.doc
            for ix in hix:
                ix.add(new_doc, key)
            if mix:
                for mx in mix.values():
                    mx.add(new_doc, key)
        exp = rec.expiration
        if exp is not None and (old is None or old.expiration != exp):
            self._expiry.add(expiry_key(exp, key))
            self._no_expiring = False
        if rec.position > self._applied:
            self._applied = rec.position
            if not self._applied_dirty:
                self._mark_meta_dirty()
        if self.history is not None:
            if old is not None:
                self.history.replaced(old, rec.timestamp)
            self.history.prune_key(key, now, rec)
        return PublishResult(rec, previous, delta)

    def _remove(self, rec: Record, at: float) -> None:
        """Remove ``rec`` (deleted or expired at ``at``) with its index and expiry rows."""
        key = rec.sow_key
        self.delete_count += 1
        if self.history is not None:
            self.history.removed(rec, at)
            self.history.prune_key(key, at, None)
        idoc = self._index_doc(rec)
        self._b.delete(key)
        for ix in self.hash_indexes:
            ix.remove(idoc, key)
        for mx in self.memo_indexes.values():
            mx.remove(idoc, key)
        if rec.expiration is not None:
            self._expiry.discard(expiry_key(rec.expiration, key))
            self._no_expiring = None

    # ---- expiration --------------------------------------------------------------------------

    def sweep_expired(self, now: float | None = None, limit: int | None = None) -> list[Record]:
        """Delete the records whose expiration is due and return them (the server sends
        ``oof`` with reason ``expired`` and runs expiration actions).  Also returns records
        that expired and were then replaced by a publish before this sweep.  ``limit`` bounds
        the work of one call; call again while it returns ``limit`` records."""
        if now is None:
            now = self._clock()
        out = self._pending_expired
        self._pending_expired = []
        if limit is not None:
            limit = max(0, limit - len(out))
        for r in self._due(now, limit):
            at = r.expiration  # due: not None
            self._remove(r, now if at is None else at)
            out.append(r)
        return out

    def prune_history(self, now: float | None = None, start: bytes | None = None,
                      limit: int | None = None) -> tuple[int, bytes | None]:
        """Drop the saved versions older than the ``History`` window (see
        :mod:`sow.history`), about ``limit`` rows from ``start`` on (None: all of them), so
        the server's periodic pass never holds the loop long. Returns (rows dropped, where
        the next pass starts; None: the end was reached)."""
        if self.history is None:
            return 0, None
        return self.history.prune(self._clock() if now is None else now, self._b.get,
                                  start, limit)

    def next_expiration(self) -> float | None:
        """The earliest stored deadline (the server arms one timer for it), ``None`` if none
        or expiration is disabled.  Returns ``0.0`` when expired records await a sweep."""
        if self._pending_expired:
            return 0.0
        if self.spec.expiration is None:
            return None
        with self._b.reading():
            k = self._expiry.first()
        return None if k is None else int.from_bytes(k[:8], "big") / 1_000_000

    # ---- deletes -----------------------------------------------------------------------------

    def delete_by_filter(self, filter: Any, *, now: float | None = None, position: int = 0,
                         plan: str = "auto") -> DeleteResult:
        """``sow_delete`` with a filter (``1=1`` deletes everything).  ``position``: the
        journal position of the sow_delete, recorded as applied with the deletion."""
        if now is None:
            now = self._clock()
        rows, topic_matches, desc = self._match(filter, None, now, (), plan)
        return self._delete_rows(rows, topic_matches, desc, position, now)

    def delete_by_keys(self, sow_keys: str | Iterable[str], *, now: float | None = None,
                       position: int = 0) -> DeleteResult:
        """``sow_delete`` with ``sow_keys`` (comma list or iterable)."""
        if now is None:
            now = self._clock()
        rows, topic_matches, desc = self._match(None, sow_keys, now)
        return self._delete_rows(rows, topic_matches, desc, position, now)

    def delete_by_data(self, data: bytes, *, sow_key: str | None = None,
                       now: float | None = None, position: int = 0) -> DeleteResult:
        """``sow_delete`` with message data: deletes the record a publish of ``data`` would
        update (the key comes from the data, or from ``sow_key`` on a topic without Key)."""
        key = self.key_for(self.decode_body(data), sow_key)
        return self.delete_by_keys([key], now=now, position=position)

    def delete_steps(self, filter: Any, *, now: float | None = None, position: int = 0,
                     plan: str = "auto", chunk: int | None = None
                     ) -> Generator[list[Record], None, DeleteResult]:
        """:meth:`delete_by_filter` as a generator: matching reads a snapshot in steps (as a
        query does), then the matches are deleted ``chunk // DELETE_SHARE`` per step; each
        step yields the records it removed, for OOF and actions (that many matches or fewer
        are deleted at once and not yielded: they are in the result). A match that changed
        since the snapshot is kept: the change came after the delete. Until the last step the
        topic records its applied position as just before ``position``, so a server stopped
        half-way replays the delete (then what followed it) from the transaction log."""
        if now is None:
            now = self._clock()
        chunk = self.query_chunk if chunk is None else chunk or None
        if not chunk:  # no steps: the caller reports result.records
            return self.delete_by_filter(filter, now=now, position=position, plan=plan)
        # the matches as stored rows where it can (bytes: no object for the garbage
        # collector to walk, however many), a Record built as each is deleted
        match = self._match_steps(filter, None, now, (), plan, chunk, stored=True)
        part_size = max(1, chunk // DELETE_SHARE)
        try:
            next(match)
        except StopIteration as stop:  # matched at once
            rows, topic_matches, desc = stop.value
            if len(rows) <= part_size:  # at once: the caller reports result.records
                return self._delete_rows(rows, topic_matches, desc, position, now)
            match = None
        if position:  # from now on other writes may commit before the delete is done
            self._applied_hold = position - 1
            self._applied_dirty = False
            self._mark_meta_dirty()
        deleted = 0
        try:
            while match is not None:
                yield []
                try:
                    next(match)
                except StopIteration as stop:
                    rows, topic_matches, desc = stop.value
                    match = None
            matches = len(rows)
            held: list[Any] = rows.rows if isinstance(rows, StoredRecords) else rows
            for start in range(0, matches, part_size):
                part = []
                for rec in _records(rows[start:start + part_size]):
                    cur = self._b.get(rec.sow_key)
                    if cur is not None and cur.position == rec.position \
                            and cur.timestamp == rec.timestamp and cur.data == rec.data:
                        self._remove(cur, now)
                        part.append(cur)
                # let go of the rows done (freeing them all at the end held the loop)
                end = min(matches, start + part_size)
                held[start:end] = [None] * (end - start)
                deleted += len(part)
                yield part
        finally:
            self._applied_hold = None
            self._applied_dirty = False
            self._mark_meta_dirty()
        self._note_position(position)
        # (the records went out with the steps: only their count is kept)
        return DeleteResult([], matches, topic_matches, desc + " deleted in steps", deleted)

    def _delete_rows(self, rows, topic_matches: int, desc: str, position: int,
                     now: float) -> DeleteResult:
        recs = list(_records(rows))
        for r in recs:
            self._remove(r, now)
        self._note_position(position)
        return DeleteResult(recs, len(recs), topic_matches, desc)

    def records(self) -> list[Record]:
        """Every record stored now (expired ones not swept yet included)."""
        return self._b.all_records()

    def clear(self) -> None:
        """Remove every record (no results; used before a rebuild from the journal)."""
        self._b.clear()
        for ix in self.hash_indexes:
            ix.clear()
        for mx in self.memo_indexes.values():
            mx.clear()
        self._expiry.clear()
        self._no_expiring = None
        self._pending_expired.clear()
        self._applied = 0
        self._applied_dirty = False
        self._mark_meta_dirty()
