"""One SOW topic: upserts, delta merges, queries, deletes, expiration, indexes.

:class:`Topic` implements the :class:`sow.store.TopicStore` protocol on top of a backend
(:mod:`sow.backend`): the same code serves transient (memory) and persistent (LMDB) topics.

Mutations go into the store's current write batch (for LMDB: one write transaction, opened
lazily, committed by ``SowStore.commit()`` once per event-loop turn).  A record, its hash and
memo index rows, its expiry row and the topic's last-applied journal position always change in
the same transaction.  Reads inside the batch see its uncommitted writes.

Clock: ``clock()`` returns UNIX seconds; tests inject a fake.  Every method that depends on
time also takes an explicit ``now=`` that overrides the clock.
"""

from __future__ import annotations

import hashlib
import heapq
import logging
from collections.abc import Callable, Generator, Iterable
from itertools import islice
from typing import Any, TypedDict

import msgspec

from amps_emulator.protocol.filter import MessageContext, compile_filter
from amps_emulator.protocol.reasons import BAD_FILTER, CommandError

from .delta import merge
from .expiry import deadline, expiry_bound, expiry_key, skey_of_key
from .history import TABLE as _HISTORY_TABLE
from .history import History
from .index import HashIndex, MemoIndex
from .keys import KeyGenerator, parse_sow_keys, validate_sow_key
from .paths import parse_path, path_text, top_level_names
from .planner import Plan, identifier_paths, needs_context, plan_query
from .planner import log as plan_log
from .query import (
    DeleteResult,
    OrderBy,
    PublishResult,
    QueryResult,
    Select,
    order_key,
    page,
    parse_order_by,
    parse_select,
    project,
    sort_records,
)
from .record import Record
from .spec import TopicSpec

__all__ = ["Topic"]

log = logging.getLogger("amps_emulator.sow")

_UNSET: Any = object()
_json_decode = msgspec.json.decode
_json_encode = msgspec.json.encode
_FORCES = ("auto", "scan", "hash", "memo")
QUERY_CHUNK = 20_000  # about 20 ms of scanning: how long a query holds the loop at a time


def _decode(data: bytes) -> Any:
    try:
        return _json_decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError, TypeError, RecursionError):
        return None


def _drain(steps: Generator[None, None, Any]) -> Any:
    """Run a step generator to its end; its return value."""
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            return stop.value


def _sorted_page_steps(rows: list[tuple[Record, Any]], order: OrderBy, top_n: int | None,
                       skip_n: int | None, chunk: int):
    """``page(sort_records(...))`` of a long result in steps: each step sorts ``chunk`` rows
    (by :func:`sow.query.order_key`, ties in natural order), then the sorted parts are merged,
    ``chunk`` records per step, up to the page's end."""
    key = order_key(order)
    parts = []
    for start in range(0, len(rows), chunk):
        part = [(key(d), start + j, r) for j, (r, d) in enumerate(rows[start:start + chunk])]
        part.sort()  # (key, position, record): positions differ, records are never compared
        parts.append(part)
        yield
    merged = heapq.merge(*parts)
    skip = max(skip_n or 0, 0)
    end = None if top_n is None or top_n < 0 else skip + top_n
    out: list[Record] = []
    taken = 0
    while end is None or taken < end:
        want = chunk if end is None else min(chunk, end - taken)
        batch = list(islice(merged, want))
        if not batch:
            break
        for t in batch[max(0, skip - taken):]:
            out.append(t[2])
        taken += len(batch)
        yield
    return out


def _index_table_name(kind: str, fields: tuple[str, ...]) -> str:
    h = hashlib.blake2b("\x1f".join(fields).encode(), digest_size=8).hexdigest()
    return f"{kind}:{h}"


# A memo index created on first use is built inside that query, which holds the event loop
# (about 7 s for a million records). Above this many records a query scans instead (about a
# second per million) and indexes come only from the topic's configured ``Index`` elements,
# which are built when the topic opens.
AUTO_MEMO_LIMIT = 100_000


class Topic:
    """A SOW topic.  Create through :class:`sow.store.SowStore` / :class:`TransientStore`."""

    def __init__(self, spec: TopicSpec, backend, *, clock: Callable[[], float],
                 auto_memo: bool = True, scan_fallback: float = 0.5,
                 auto_memo_limit: int | None = AUTO_MEMO_LIMIT) -> None:
        self.spec = spec
        self.name = spec.name
        self._b = backend
        #: monitoring counters (the Admin interface's insert/update/delete/query counts)
        self.insert_count = self.update_count = self.delete_count = self.query_count = 0
        self._clock = clock
        self.auto_memo = auto_memo
        self.auto_memo_limit = auto_memo_limit
        #: records a query reads per step when run with :meth:`query_steps`
        self.query_chunk = QUERY_CHUNK
        self._fallback = scan_fallback
        self._keygen = KeyGenerator(spec.domain, spec.keys) if spec.keys else None
        #: the fields every delta message carries (the Key fields; a view sets its Grouping)
        self.delta_keys: tuple[str, ...] = spec.keys
        self._pending_expired: list[Record] = []
        self._decoders: dict[frozenset, Any] = {}
        self._full_decoder = msgspec.json.Decoder()
        #: the saved versions for historical queries (``History`` configured), else None
        self.history: History | None = None
        if spec.history is not None:
            self.history = History(spec.history, backend.kv_table(_HISTORY_TABLE))
        self._check_key_definition()
        self._applied = int(self._b.meta_get("applied", 0))
        self._applied_dirty = False
        #: called (with the topic) when its metadata first needs writing since the last
        #: flush, so a store of many topics flushes only those (set by the store)
        self.on_meta_dirty: Callable[[Topic], None] | None = None
        #: while a stepped delete runs: the highest position recorded as applied (recovery
        #: must replay the delete if the server stops half-way)
        self._applied_hold: int | None = None
        self._expiry = self._b.ordered_table("exp")
        self.hash_indexes: list[HashIndex] = []
        self.memo_indexes: dict[tuple, MemoIndex] = {}
        self._index_dec: tuple | None = None  # ((#hash, #memo), decoder): see _index_decoder
        self._setup_indexes()

    # ---- setup ------------------------------------------------------------------------------

    def _check_key_definition(self) -> None:
        keydef = [self.spec.domain, list(self.spec.keys)]
        stored = self._b.meta_get("keydef")
        if stored is not None and stored != keydef and self._b.count():
            log.warning("SOW topic %s: Key/KeyDomain changed (%s -> %s); the stored records "
                        "are dropped and must be rebuilt from the transaction log",
                        self.name, stored, keydef)
            self._b.clear()
            for kind, *fs in self._b.meta_get("indexes", []):
                self._b.drop_table(_index_table_name("h" if kind == "hash" else "m",
                                                     tuple(fs) if kind == "hash"
                                                     else (path_text(parse_path(fs[0])),)))
            self._b.ordered_table("exp").clear()
            self._b.meta_put("applied", 0)
            self._b.meta_put("indexes", [])
        if stored != keydef:
            self._b.meta_put("keydef", keydef)

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
        to_build = []
        for fields in wanted_hash:
            ix = HashIndex(fields, self._b.hash_table(_index_table_name("h", fields)))
            self.hash_indexes.append(ix)
            new_defs.append(("hash", *fields))
            if ("hash", *fields) not in present:
                to_build.append(ix)
        for f in memo_fields:
            p = parse_path(f)
            if p in self.memo_indexes:
                continue
            ix = MemoIndex(f, self._b.ordered_table(_index_table_name("m", (path_text(p),))))
            self.memo_indexes[p] = ix
            new_defs.append(("memo", f))
            if ("memo", f) not in present:
                to_build.append(ix)
        for d in stored:  # indexes no longer configured
            if d not in new_defs:
                kind, *fs = d
                if kind == "hash":
                    self._b.drop_table(_index_table_name("h", tuple(fs)))
        if to_build:
            self._build(to_build)
        if [list(d) for d in new_defs] != [list(d) for d in stored]:
            self._b.meta_put("indexes", [list(d) for d in new_defs])

    def _build(self, indexes: list) -> None:
        paths = [p for ix in indexes for p in (ix.paths if ix.kind == "hash" else (ix.path,))]
        for ix in indexes:
            ix.clear()
        for skey, doc in self._b.iter_docs(self._decoder_for(paths)):
            for ix in indexes:
                ix.add(doc, skey)

    def _decoder_for(self, paths: Iterable[tuple]):
        """msgspec decoder reading only the top-level fields ``paths`` need (``None``: no
        field needed)."""
        names = top_level_names(paths)
        if names is None:
            return self._full_decoder
        if not names:
            return None
        key = frozenset(names)
        dec = self._decoders.get(key)
        if dec is None:
            td = TypedDict("Fields", {n: Any for n in sorted(names)}, total=False)  # type: ignore
            dec = self._decoders[key] = msgspec.json.Decoder(td)
        return dec

    @property
    def _index_paths(self) -> list[tuple]:
        out = [p for ix in self.hash_indexes for p in ix.paths]
        out.extend(self.memo_indexes)
        return out

    # ---- small helpers ---------------------------------------------------------------------

    def now(self) -> float:
        return self._clock()

    @property
    def expiration_enabled(self) -> bool:
        return self.spec.expiration is not None

    def _is_expired(self, rec: Record, now: float) -> bool:
        e = rec.expiration
        return e is not None and e <= now and self.spec.expiration is not None

    def key_for(self, doc: Any, sow_key: str | None = None) -> str:
        """The SowKey a message with body ``doc`` (and header ``k``) is stored under."""
        if self._keygen is not None:
            return self._keygen(doc)
        return validate_sow_key(sow_key)

    def _index_decoder(self):
        """The decoder for the fields the indexes read (cached until the index set changes)."""
        sig = (len(self.hash_indexes), len(self.memo_indexes))
        cached = self._index_dec
        if cached is not None and cached[0] == sig:
            return cached[1]
        dec = self._decoder_for(self._index_paths)
        self._index_dec = (sig, dec)
        return dec

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
            doc = _decode(data)
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
            doc = _decode(data)
        if key is None:
            key = self.key_for(doc, sow_key)
        old = self._b.get(key)
        base = old
        if base is not None and self._is_expired(base, now):
            base = None
        if base is None:
            merged, merged_data = doc, bytes(data)
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
                    for ix in mix.values():
                        ix.update(old_doc, new_doc, key)
            if oexp is not None and oexp != rec.expiration:
                self._expiry.discard(expiry_key(oexp, key))
        elif hix or mix:
            new_doc = rec.doc
            for ix in hix:
                ix.add(new_doc, key)
            if mix:
                for ix in mix.values():
                    ix.add(new_doc, key)
        exp = rec.expiration
        if exp is not None and (old is None or old.expiration != exp):
            self._expiry.add(expiry_key(exp, key))
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
        for ix in self.memo_indexes.values():
            ix.remove(idoc, key)
        if rec.expiration is not None:
            self._expiry.discard(expiry_key(rec.expiration, key))

    # ---- expiration --------------------------------------------------------------------------

    def _due(self, now: float, limit: int | None = None) -> list[Record]:
        """Records whose expiration is due (expiration enabled only), oldest deadline first."""
        if self.spec.expiration is None:
            return []
        with self._b.reading():
            keys = self._expiry.range(None, expiry_bound(now), None)
            out = []
            for k in keys:
                r = self._b.get(skey_of_key(k))
                if r is not None and r.expiration is not None and r.expiration <= now:
                    out.append(r)
                    if limit is not None and len(out) >= limit:
                        break
            return out

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
            self._remove(r, r.expiration)
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

    # ---- reads -------------------------------------------------------------------------------

    def get(self, sow_key: str, now: float | None = None) -> Record | None:
        """The record stored under ``sow_key`` (``None`` if absent or expired)."""
        r = self._b.get(sow_key)
        if r is not None and self._is_expired(r, self._clock() if now is None else now):
            return None
        return r

    def count(self, now: float | None = None) -> int:
        """Records in the topic, not counting expired ones awaiting a sweep."""
        with self._b.reading():
            n = self._b.count()
            if self.spec.expiration is not None:
                n -= len(self._due(self._clock() if now is None else now))
            return n

    def __len__(self) -> int:
        return self.count()

    def _compile(self, flt):
        if flt is None:
            return None
        if isinstance(flt, str):
            if not flt.strip():
                return None
            return compile_filter(flt)
        return flt

    def _ctx_of(self, rec: Record) -> MessageContext:
        h = rec.headers or {}
        return MessageContext(topic=self.name, bookmark=rec.bookmark or None,
                              sow_key=rec.sow_key, timestamp=rec.timestamp,
                              correlation_id=h.get("correlation_id", h.get("x")),
                              message_size=len(rec.data), last_updated=rec.timestamp)

    def _candidates(self, plan: Plan, limit: int | None) -> list[str] | None:
        if plan.kind == "keys":
            return plan.args
        if plan.kind == "hash":
            return plan.index.lookup(plan.args)
        if plan.kind == "memo":
            return plan.index.candidates(plan.args, limit)
        if plan.kind == "union":
            out: dict[str, None] = {}
            for p in plan.parts:
                c = self._candidates(p, limit)
                if c is None:
                    return None
                out.update(dict.fromkeys(c))
                if limit is not None and len(out) > limit:
                    return None
            return list(out)
        return None

    def _create_planned_indexes(self, plan: Plan) -> None:
        if plan.kind == "memo" and plan.index is None:
            plan.index = self.add_memo_index(path_text(plan.create))
        for p in plan.parts:
            self._create_planned_indexes(p)

    def _match(self, flt, sow_keys, now: float, order_paths=(), force: str = "auto"
               ) -> tuple[list[tuple[Record, Any]], int, str]:
        """(matching (record, doc) pairs in natural order, topic count, plan text)."""
        return _drain(self._match_steps(flt, sow_keys, now, order_paths, force, None))

    def _match_steps(self, flt, sow_keys, now: float, order_paths, force: str,
                     chunk: int | None):
        """:meth:`_match` as a generator.  With ``chunk``, a scan of more than ``chunk``
        records (or a candidate list longer than ``chunk // 4``) runs over a snapshot taken in
        the first step, that many records per step (a yield between steps); anything smaller
        is done at once in the first step, with no yield."""
        if force not in _FORCES:
            raise ValueError(f"plan must be one of {_FORCES}")
        f = self._compile(flt)
        node = f.ast if f is not None else None
        keys = None if sow_keys is None else parse_sow_keys(sow_keys)
        auto = self.auto_memo and (self.auto_memo_limit is None
                                   or self._b.count() <= self.auto_memo_limit)
        plan = plan_query(node, keys, self.hash_indexes, self.memo_indexes, force=force,
                          auto_memo=auto)
        self._create_planned_indexes(plan)  # writes: must happen before the read below
        with self._b.reading():
            total = self._b.count()
            dead = {r.sow_key for r in self._due(now)}
            ctx_of = self._ctx_of if (node is not None and needs_context(node)) else None
            limit = None if plan.kind == "keys" else max(64, int(total * self._fallback))
            cands = None if plan.kind == "scan" else self._candidates(plan, limit)
        if chunk and cands is not None:
            # a candidate costs about four scanned records (a random lookup, a Record built)
            chunk = max(1, chunk // 4)
        snap = None
        if chunk and (total > chunk if cands is None else len(cands) > chunk):
            # the state just read, committed: the steps read it while writes go on
            snap = self._b.snapshot()
        try:
            desc = plan.describe()
            paths = list(order_paths)
            if node is not None:
                paths.extend(identifier_paths(node))
            decoder = self._decoder_for(paths)
            names = top_level_names(paths)
            if cands is None and plan.kind != "scan":
                desc += " -> scan (too many candidates)"
            elif cands is not None:
                desc += f" ({len(cands)} candidates)"
            rows: list[tuple[Record, Any]] = []
            if snap is not None:
                desc += f" in steps of {chunk}"
                yield  # the snapshot is taken
                if cands is None:
                    for part in self._b.scan_steps(snap, chunk, f, decoder, dead, ctx_of,
                                                   names):
                        rows.extend(part)
                        yield
                else:
                    for i in range(0, len(cands), chunk):
                        rows.extend(self._check(self._b.get_many_in(snap, cands[i:i + chunk]),
                                                f, decoder, dead, ctx_of))
                        yield
                    self._b.natural_order(rows)
            else:
                with self._b.reading():
                    if cands is None:
                        rows = self._b.scan(f, decoder, dead, ctx_of, names)
                    else:
                        rows = self._check(self._b.get_many(cands), f, decoder, dead, ctx_of)
        finally:
            if snap is not None:
                self._b.release(snap)
        if plan_log.isEnabledFor(logging.DEBUG):
            plan_log.debug("sow topic=%s filter=%r sow_keys=%s plan=%s matches=%d", self.name,
                           getattr(f, "text", None), None if keys is None else len(keys), desc,
                           len(rows))
        return rows, total - len(dead), desc

    def _check(self, recs: list[Record], f, decoder, dead: set, ctx_of
               ) -> list[tuple[Record, Any]]:
        """The candidates that satisfy ``f`` (index candidates are re-checked)."""
        rows = []
        doc_for = self._b.doc_for
        for r in recs:
            if r.sow_key in dead:
                continue
            d = doc_for(r, decoder)
            if f is None or (f(d, ctx_of(r)) if ctx_of is not None else f(d)):
                rows.append((r, d))
        return rows

    def query_steps(self, filter: Any = None, *, sow_keys: str | Iterable[str] | None = None,
                    order_by: str | OrderBy | None = None, top_n: int | None = None,
                    skip_n: int | None = None, select: str | Select | None = None,
                    now: float | None = None, plan: str = "auto", chunk: int | None = None,
                    history_cut: float | None = None
                    ) -> Generator[None, None, QueryResult]:
        """:meth:`query` as a generator that returns the :class:`QueryResult`: the first step
        parses, plans and takes the snapshot (errors are raised there); a query that reads
        more than ``chunk`` records (default :attr:`query_chunk`; 0: never) then reads them over
        several steps, so that its caller can let other work run in between.  Writes made
        between steps do not change the result.  ``history_cut``: a historical query, the
        state just before that instant (see :meth:`history_cut`; needs ``History``)."""
        self.query_count += 1
        if now is None:
            now = self._clock()
        order = parse_order_by(order_by) if isinstance(order_by, str) or order_by is None \
            else order_by
        sel = parse_select(select) if isinstance(select, str) or select is None else select
        chunk = self.query_chunk if chunk is None else chunk or None
        if history_cut is not None:
            rows, topic_matches, desc = yield from self._historical_steps(
                filter, sow_keys, now, order.paths if order else (), history_cut, chunk)
        else:
            rows, topic_matches, desc = yield from self._match_steps(
                filter, sow_keys, now, order.paths if order else (), plan, chunk)
        if order is not None and chunk and len(rows) > chunk:
            out = yield from _sorted_page_steps(rows, order, top_n, skip_n, chunk)
        else:
            if order is not None:
                docs = {id(r): d for r, d in rows}
                recs = sort_records([r for r, _ in rows], order, lambda r: docs[id(r)])
            else:
                recs = [r for r, _ in rows]
            out = page(recs, top_n, skip_n)
        if sel is not None and not sel.identity:
            out = [project(r, sel) for r in out]
        return QueryResult(out, len(rows), topic_matches, desc)

    def history_cut(self, at: float) -> float:
        """The instant a historical query *as of* ``at`` reads (the granularity boundary at or
        before it); raises ``ValueError`` if the topic keeps no history."""
        if self.history is None:
            raise ValueError(f"SOW topic {self.name} has no History")
        return self.history.cut(at)

    def _historical_steps(self, flt, sow_keys, now: float, order_paths, cut: float,
                          chunk: int | None):
        """:meth:`_match_steps` over the state just before ``cut``: the topic's saved
        versions and current records, read from a snapshot ``chunk`` rows per step when
        there are more than ``chunk`` of them (else at once)."""
        if self.history is None:
            raise ValueError(f"SOW topic {self.name} has no History")
        f = self._compile(flt)
        node = f.ast if f is not None else None
        keys = None if sow_keys is None else set(parse_sow_keys(sow_keys))
        paths = list(order_paths)
        if node is not None:
            paths.extend(identifier_paths(node))
        decoder = self._decoder_for(paths)
        ctx_of = self._ctx_of if (node is not None and needs_context(node)) else None
        acc = self.history.state(cut, now)
        recs: list[Record] = []
        steps = 0
        if acc is not None:
            with self._b.reading():
                size = len(self.history.table) + self._b.count()
            if chunk and size > chunk:
                snap = self._b.snapshot()
                try:
                    rows = self.history.table.snapshot_rows(snap)
                    current = self._b.records_in(snap)
                    yield  # the snapshot is taken
                    for part in (rows, current):
                        add = acc.add_rows if part is rows else acc.add_current
                        while True:
                            batch = list(islice(part, chunk))
                            if not batch:
                                break
                            add(batch)
                            steps += 1
                            yield
                finally:
                    self._b.release(snap)
            else:
                with self._b.reading():
                    acc.add_rows(self.history.table.items())
                    acc.add_current(self._b.all_records())
            recs = acc.records()
        recs.sort(key=lambda r: r.sow_key)
        total = len(recs)
        if keys is not None:
            recs = [r for r in recs if r.sow_key in keys]
        rows_out: list[tuple[Record, Any]] = []
        step = chunk or len(recs) or 1
        for i in range(0, len(recs), step):
            rows_out.extend(self._check(recs[i:i + step], f, decoder, set(), ctx_of))
            if chunk and i + step < len(recs):
                yield
        desc = f"history as of {cut!r} ({total} records" + (
            f", {steps} steps)" if steps else ")")
        if plan_log.isEnabledFor(logging.DEBUG):
            plan_log.debug("sow topic=%s filter=%r plan=%s matches=%d", self.name,
                           getattr(f, "text", None), desc, len(rows_out))
        return rows_out, total, desc

    def query(self, filter: Any = None, *, sow_keys: str | Iterable[str] | None = None,
              order_by: str | OrderBy | None = None, top_n: int | None = None,
              skip_n: int | None = None, select: str | Select | None = None,
              now: float | None = None, plan: str = "auto",
              history_cut: float | None = None) -> QueryResult:
        """A ``sow`` query.  ``filter``: text or a compiled filter; ``sow_keys``: comma list or
        iterable (only those records); ``order_by``: ``orderby`` text; ``top_n``/``skip_n``:
        paging after ordering; ``select``: ``select=[...]`` list.  Bad orderby raises
        ``CommandError(invalid order by)``, bad filter ``FilterError`` (``bad filter``), bad
        select ``CommandError(invalid options)``.  ``batch_size`` is the server's business."""
        return _drain(self.query_steps(filter, sow_keys=sow_keys, order_by=order_by,
                                       top_n=top_n, skip_n=skip_n, select=select, now=now,
                                       plan=plan, chunk=0, history_cut=history_cut))

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
        key = self.key_for(_decode(data), sow_key)
        return self.delete_by_keys([key], now=now, position=position)

    def delete_steps(self, filter: Any, *, now: float | None = None, position: int = 0,
                     plan: str = "auto", chunk: int | None = None
                     ) -> Generator[list[Record], None, DeleteResult]:
        """:meth:`delete_by_filter` as a generator: matching reads a snapshot in steps (as a
        query does), then the matches are deleted ``chunk`` per step; each step yields the
        records it removed, for OOF and actions (at most ``chunk`` matches are deleted at once
        and not yielded: they are in the result). A match that changed since the snapshot is
        kept: the change came after the delete. Until the last step the topic records its
        applied position as just before ``position``, so a server stopped half-way replays
        the delete (then what followed it) from the transaction log."""
        if now is None:
            now = self._clock()
        chunk = self.query_chunk if chunk is None else chunk or None
        match = self._match_steps(filter, None, now, (), plan, chunk)
        try:
            next(match)
        except StopIteration as stop:  # matched at once
            rows, topic_matches, desc = stop.value
            if not chunk or len(rows) <= chunk:  # at once: the caller reports result.records
                return self._delete_rows(rows, topic_matches, desc, position, now)
            match = None
        if position:  # from now on other writes may commit before the delete is done
            self._applied_hold = position - 1
            self._applied_dirty = False
            self._mark_meta_dirty()
        removed: list[Record] = []
        try:
            while match is not None:
                yield []
                try:
                    next(match)
                except StopIteration as stop:
                    rows, topic_matches, desc = stop.value
                    match = None
            for start in range(0, len(rows), chunk):
                part = []
                for rec, _ in rows[start:start + chunk]:
                    cur = self._b.get(rec.sow_key)
                    if cur is not None and cur.position == rec.position \
                            and cur.timestamp == rec.timestamp and cur.data == rec.data:
                        self._remove(cur, now)
                        part.append(cur)
                removed.extend(part)
                yield part
        finally:
            self._applied_hold = None
            self._applied_dirty = False
            self._mark_meta_dirty()
        self._note_position(position)
        return DeleteResult(removed, len(rows), topic_matches, desc + " deleted in steps")

    def _delete_rows(self, rows, topic_matches: int, desc: str, position: int,
                     now: float) -> DeleteResult:
        recs = [r for r, _ in rows]
        for r in recs:
            self._remove(r, now)
        self._note_position(position)
        return DeleteResult(recs, len(recs), topic_matches, desc)

    def clear(self) -> None:
        """Remove every record (no results; used before a rebuild from the journal)."""
        self._b.clear()
        for ix in self.hash_indexes:
            ix.clear()
        for ix in self.memo_indexes.values():
            ix.clear()
        self._expiry.clear()
        self._pending_expired.clear()
        self._applied = 0
        self._applied_dirty = False
        self._mark_meta_dirty()

    # ---- index management --------------------------------------------------------------------

    def add_memo_index(self, field: str) -> MemoIndex:
        """Create (building it now) or return the memo index on ``field``."""
        p = parse_path(field)
        ix = self.memo_indexes.get(p)
        if ix is not None:
            return ix
        if not p:
            raise CommandError(BAD_FILTER, f"cannot index {field!r}")
        ix = MemoIndex(field, self._b.ordered_table(_index_table_name("m", (path_text(p),))))
        self._build([ix])
        self.memo_indexes[p] = ix
        defs = [list(d) for d in self._b.meta_get("indexes", [])]
        if ["memo", field] not in defs:
            defs.append(["memo", field])
            self._b.meta_put("indexes", defs)
        log.info("SOW topic %s: created memo index on %s", self.name, field)
        return ix

    def index_info(self) -> list[dict]:
        out = [{"kind": "hash", "fields": list(ix.fields), "entries": len(ix.table)}
               for ix in self.hash_indexes]
        out += [{"kind": "memo", "fields": [ix.field], "entries": len(ix.table)}
                for ix in self.memo_indexes.values()]
        return out
