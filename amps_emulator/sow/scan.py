"""The read path of a SOW topic: queries (at once or in steps), historical queries, counts.

:class:`TopicReads` is the base class of :class:`sow.topic.Topic` (through
:class:`sow.topic_indexes.TopicIndexes`, which adds index management; ``Topic`` adds writes,
expiration sweeps and deletes). It is a base class rather than a separate object because the
read path shares the topic's state, not only its storage: the server, the admin statistics and
the tests read and set ``query_chunk``, ``query_count``, ``auto_memo`` and ``_ctx_of`` on the
topic, a stepped delete (``Topic.delete_steps``) matches with :meth:`TopicReads._match_steps`,
and the server's step driver replaces ``query_steps`` on a topic instance. One object keeps
that state in one place; the split is which module holds which code. The one thing the read
path needs from the writing side is to create a memo index a query plan asks for
(:meth:`TopicReads.add_memo_index`, implemented by ``TopicIndexes``).

Queries read a snapshot over several steps when they are long (see :meth:`query_steps`), so
that their caller can let other work run in between; writes made between steps do not
change the result.
"""

from __future__ import annotations

import heapq
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Iterable, Sequence
from functools import lru_cache
from itertools import islice
from typing import Any, TypedDict

import msgspec

from amps_emulator.protocol.bodies import TreeDecoder
from amps_emulator.protocol.filter import CompiledFilter, MessageContext, compile_filter
from amps_emulator.protocol.msgtypes import MessageCodec
from amps_emulator.sow.expiry import expiry_bound, skey_of_key
from amps_emulator.sow.history import TABLE as _HISTORY_TABLE
from amps_emulator.sow.history import History, StateAsOf
from amps_emulator.sow.index import HashIndex, MemoIndex
from amps_emulator.sow.keys import parse_sow_keys
from amps_emulator.sow.paths import Path, path_text, top_level_names
from amps_emulator.sow.planner import Plan, plan_query
from amps_emulator.sow.planner import log as plan_log
from amps_emulator.sow.query import (
    OrderBy,
    QueryResult,
    Select,
    order_key,
    page,
    parse_order_by,
    parse_select,
    project,
    sort_records,
)
from amps_emulator.sow.record import Record, StoredRecords
from amps_emulator.sow.spec import TopicSpec
from amps_emulator.sow.storage.backend import Backend
from amps_emulator.sow.storage.lmdb_backend import LmdbBackend

__all__ = ["TopicReads", "QUERY_CHUNK", "AUTO_MEMO_LIMIT", "BUILDING", "sorted_page_steps"]

_FORCES = ("auto", "scan", "hash", "memo")
_json_encode = msgspec.json.encode

#: records a query reads per step (a scan: about half a millisecond of stored bodies, a few
#: milliseconds when a record is built for each; a driver runs several steps in a slice of
#: the loop's time); a query of at most this many reads them at once, without a snapshot
QUERY_CHUNK = 1_000

# A memo index created on first use is built inside that query (about 7 s for a million
# records; in steps when the query runs in steps). Above this many records a query scans
# instead (about a second per million) and indexes come only from the topic's configured
# ``Index`` elements, which are built when the topic opens.
AUTO_MEMO_LIMIT = 100_000

#: what a query's steps yield while they build the memo index its plan asked for, before its
#: snapshot: a driver steps it again (letting other work run between) until a step yields
#: anything else, which is the step that took the snapshot (see :meth:`TopicReads.query_steps`)
BUILDING = "building"
#: a step of such a build indexes this share of ``query_chunk`` records (a record costs about
#: as much to index as eight to scan)
BUILD_SHARE = 8


_FULL_DECODER: msgspec.json.Decoder[Any] = msgspec.json.Decoder()


@lru_cache(maxsize=1024)
def _fields_decoder(names: frozenset[str]) -> msgspec.json.Decoder[Any]:
    """A msgspec decoder of only the top-level fields ``names``, shared by every topic (a
    class and decoder of each topic's own made every logical topic of a ``Pattern`` some
    twenty objects more for each full pass of the garbage collector to walk)."""
    td = TypedDict("Fields", {n: Any for n in sorted(names)}, total=False)  # type: ignore
    return msgspec.json.Decoder(td)


def _paths_read(f: CompiledFilter | None) -> Sequence[tuple]:
    """What filter ``f`` reads of each record (known when it was compiled: a long filter is
    not walked again on the event loop for each query)."""
    return () if f is None else f.paths


def _reads_context(f: CompiledFilter | None) -> bool:
    """Whether filter ``f`` reads the message context (known when it was compiled)."""
    return f is not None and f.uses_context


def _creations(plan: Plan) -> list[Path]:
    """The paths of the memo indexes ``plan`` (or a part of it) asks to create."""
    out = [p.create for p in (plan, *plan.parts)
           if p.kind == "memo" and p.index is None and p.create is not None]
    return list(dict.fromkeys(out))


def _drain(steps: Generator[Any, None, Any]) -> Any:
    """Run a step generator to its end; its return value."""
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            return stop.value


def sorted_page_steps(rows: list[tuple[Record, Any]], order: OrderBy, top_n: int | None,
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


class TopicReads(ABC):
    """Queries and counts of one SOW topic (the state they read is set up here; see the
    module docstring)."""

    def __init__(self, spec: TopicSpec, backend: Backend, *, clock: Callable[[], float],
                 auto_memo: bool, scan_fallback: float, auto_memo_limit: int | None,
                 codec: MessageCodec | None = None) -> None:
        self.spec = spec
        self.name = spec.name
        self._b = backend
        #: the codec of a topic of another type than json (None: json, read with msgspec),
        #: from the registry of the server that opened it
        self._codec: MessageCodec | None = None
        self._tree_decoder: TreeDecoder | None = None
        if spec.message_type != "json":
            if codec is None:
                raise ValueError(f"SOW topic {spec.name!r} of type {spec.message_type!r} needs "
                                 f"that type's codec")
            self._codec = codec
            self._tree_decoder = TreeDecoder(codec)
        self._clock = clock
        #: monitoring counter (the Admin interface's query count)
        self.query_count = 0
        #: create a memo index when a query's plan would use one (up to ``auto_memo_limit``
        #: records in the topic; None: any number)
        self.auto_memo = auto_memo
        self.auto_memo_limit = auto_memo_limit
        #: records a query reads per step when run with :meth:`query_steps`
        self.query_chunk = QUERY_CHUNK
        #: an index plan with more candidates than this share of the topic scans instead
        self._fallback = scan_fallback
        #: the saved versions for historical queries (``History`` configured), else None
        self.history: History | None = None
        if spec.history is not None:
            self.history = History(spec.history, backend.kv_table(_HISTORY_TABLE))
        self._expiry = backend.ordered_table("exp")
        self.hash_indexes: list[HashIndex] = []
        #: every memo index the writes keep, those being built included
        self.memo_indexes: dict[Path, MemoIndex] = {}
        #: the paths of the memo indexes being built in steps (no plan uses them yet)
        self._building: set[Path] = set()

    @abstractmethod
    def add_memo_index(self, field: str) -> MemoIndex:
        """Create (building it now) or return the memo index on ``field`` (a write: the
        topic's business, see ``TopicIndexes.add_memo_index``)."""

    @abstractmethod
    def memo_build_steps(self, path: Path, step: int) -> Generator[str, None, bool]:
        """Build the memo index on ``path`` over several steps, ``step`` records each,
        yielding :data:`BUILDING` between them (writes meanwhile keep it); returns whether it
        was built (a write: the topic's business, see ``TopicIndexes.memo_build_steps``)."""

    def _planned(self, node, keys, force: str, auto: bool) -> Plan:
        """The query plan over the indexes that are built (not those being built)."""
        memos = self.memo_indexes if not self._building else \
            {p: m for p, m in self.memo_indexes.items() if p not in self._building}
        plan = plan_query(node, keys, self.hash_indexes, memos, force=force, auto_memo=auto)
        if self._building and any(p in self._building for p in _creations(plan)):
            return Plan("scan")  # another query is building that index
        return plan

    @property
    def codec(self) -> MessageCodec | None:
        """The codec of the topic's type (``None``: json)."""
        return self._codec

    @property
    def encode(self) -> Callable[[Any], bytes]:
        """What writes a body of the topic's type the server builds (an aggregated record,
        a delta): the codec's writer, msgspec's for json (may raise ``CodecError``)."""
        codec = self._codec
        return _json_encode if codec is None else codec.encode

    def _decoder_for(self, paths: Iterable[tuple]):
        """msgspec decoder reading only the top-level fields ``paths`` need (``None``: no
        field needed); for a topic of another type, its codec's whole tree."""
        if self._tree_decoder is not None:
            return self._tree_decoder
        names = top_level_names(paths)
        if names is None:
            return _FULL_DECODER
        if not names:
            return None
        return _fields_decoder(frozenset(names))

    def _is_expired(self, rec: Record, now: float) -> bool:
        e = rec.expiration
        return e is not None and e <= now and self.spec.expiration is not None

    def _due(self, now: float, limit: int | None = None) -> list[Record]:
        """Records whose expiration is due (expiration enabled only), oldest deadline first."""
        if self.spec.expiration is None:
            return []
        with self._b.reading():
            keys = self._expiry.range(None, expiry_bound(now), None) or []  # no limit: a list
            out = []
            for k in keys:
                r = self._b.get(skey_of_key(k))
                if r is not None and r.expiration is not None and r.expiration <= now:
                    out.append(r)
                    if limit is not None and len(out) >= limit:
                        break
            return out

    def get(self, sow_key: str, now: float | None = None) -> Record | None:
        """The record stored under ``sow_key`` (``None`` if absent or expired)."""
        r = self._b.get(sow_key)
        if r is None:
            return None
        if self._is_expired(r, self._clock() if now is None else now):
            return None
        decoder = self._tree_decoder
        if decoder is not None:  # another type than json: its doc is read by the codec
            r.doc_by(decoder.decode)
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

    def _compile(self, flt: str | CompiledFilter | None) -> CompiledFilter | None:
        """``flt`` compiled (text), as given (a filter compiled already: every compiled filter
        carries what it reads, ``paths`` and ``uses_context``), or None (no filter)."""
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

    def _build_planned_steps(self, plan: Plan, node, keys, force: str, chunk: int):
        """Steps building the memo indexes ``plan`` asks for (:data:`BUILDING` between them),
        then the plan again, which reads them: a query that runs in steps does not hold the
        loop while it builds."""
        for path in _creations(plan):
            yield from self.memo_build_steps(path, max(1, chunk // BUILD_SHARE))
        built = _creations(plan)
        plan = self._planned(node, keys, force, False)
        for part in (plan, *plan.parts):
            if part.kind == "memo" and part.index is not None and part.index.path in built:
                part.create = part.index.path  # (described as created)
        return plan

    def _create_planned_indexes(self, plan: Plan) -> None:
        if plan.kind == "memo" and plan.index is None and plan.create is not None:
            plan.index = self.add_memo_index(path_text(plan.create))
        for p in plan.parts:
            self._create_planned_indexes(p)

    def _match(self, flt, sow_keys, now: float, order_paths=(), force: str = "auto"
               ) -> tuple[list[tuple[Record, Any]], int, str]:
        """(matching (record, doc) pairs in natural order, topic count, plan text)."""
        return _drain(self._match_steps(flt, sow_keys, now, order_paths, force, None))

    def _match_steps(self, flt, sow_keys, now: float, order_paths, force: str,
                     chunk: int | None, stored: bool = False, build: bool = False,
                     into: StoredRecords | None = None):
        """:meth:`_match` as a generator.  With ``chunk``, a scan of more than ``chunk``
        records (or a candidate list longer than ``chunk // 4``) runs over a snapshot taken in
        the first step, that many records per step (a yield between steps); anything smaller
        is done at once in the first step, with no yield.  ``stored``: the caller needs the
        matching records only, not their documents; a read (scan or index candidates) of a
        persistent JSON topic whose filter reads no message context then returns them as
        :class:`StoredRecords` (no :class:`Record` built) instead of (record, document)
        pairs. ``build`` (a query, with ``chunk``): a memo index the plan creates is built in
        steps first, each yielding :data:`BUILDING`, unless the topic is small enough to
        index in one step (a delete builds it at once: what it matches is the state when it
        was logged). ``into``: the stored records are appended to it as they are read (and
        it is what is returned), so that a caller may send them between the steps."""
        if force not in _FORCES:
            raise ValueError(f"plan must be one of {_FORCES}")
        f = self._compile(flt)
        node = f.ast if f is not None else None
        keys = None if sow_keys is None else parse_sow_keys(sow_keys)
        auto = self.auto_memo and (self.auto_memo_limit is None
                                   or self._b.count() <= self.auto_memo_limit)
        plan = self._planned(node, keys, force, auto)
        if build and chunk and _creations(plan) and \
                self._b.count() > max(1, chunk // BUILD_SHARE):
            plan = yield from self._build_planned_steps(plan, node, keys, force, chunk)
        self._create_planned_indexes(plan)  # writes: must happen before the read below
        with self._b.reading():
            total = self._b.count()
            dead = {r.sow_key for r in self._due(now)}
            ctx_of = self._ctx_of if _reads_context(f) else None
            limit = None if plan.kind == "keys" else max(64, int(total * self._fallback))
            cands = None if plan.kind == "scan" else self._candidates(plan, limit)
        if chunk and cands is not None:
            # a candidate costs about four scanned records (a random lookup, a Record built)
            chunk = max(1, chunk // 4)
        backend = self._b
        # kept as stored rows: a read of a persistent JSON topic for a caller that needs no
        # documents, whose filter reads no message context
        stored = stored and ctx_of is None and self._codec is None \
            and isinstance(backend, LmdbBackend)
        snap = None
        step = 0  # records (or candidates) read per step when reading a snapshot
        if chunk and (total > chunk if cands is None else len(cands) > chunk):
            # the state just read, committed: the steps read it while writes go on (a stored
            # read gets bytes: a kept row needs no copy, and LMDB's binding makes bytes
            # faster than buffers are read and copied)
            snap = backend.snapshot(buffers=not stored)
            step = chunk
        try:
            desc = plan.describe()
            paths = list(order_paths)
            paths.extend(_paths_read(f))
            decoder = self._decoder_for(paths)
            # the fields mode reads JSON bodies only: another type decodes whole trees
            names = top_level_names(paths) if self._codec is None else None
            if cands is None and plan.kind != "scan":
                desc += " -> scan (too many candidates)"
            elif cands is not None:
                desc += f" ({len(cands)} candidates)"
            if snap is not None:
                desc += f" in steps of {step}"
                yield  # the snapshot is taken
            found: StoredRecords | list[tuple[Record, Any]]
            if stored and isinstance(backend, LmdbBackend):
                found = yield from self._read_stored(backend, snap, step, cands, f, decoder,
                                                     dead, names, into)
            else:
                found = yield from self._read_rows(snap, step, cands, f, decoder, dead, ctx_of,
                                                   names)
        finally:
            if snap is not None:
                self._b.release(snap)
        if plan_log.isEnabledFor(logging.DEBUG):
            plan_log.debug("sow topic=%s filter=%r sow_keys=%s plan=%s matches=%d", self.name,
                           getattr(f, "text", None), None if keys is None else len(keys), desc,
                           len(found))
        return found, total - len(dead), desc

    def _read_rows(self, snap, step: int, cands: list[str] | None, f, decoder, dead: set,
                   ctx_of, names) -> Generator[None, None, list[tuple[Record, Any]]]:
        """The read of :meth:`_match_steps` that returns (record, document) pairs in natural
        order: a scan (``cands`` None) or a check of the candidates, at once (``snap`` None)
        or over the snapshot ``snap``, ``step`` records (or candidates) per step."""
        b = self._b
        if snap is None:
            with b.reading():
                if cands is None:
                    return b.scan(f, decoder, dead, ctx_of, names)
                return self._check(b.get_many(cands), f, decoder, dead, ctx_of)
        rows: list[tuple[Record, Any]] = []
        if cands is None:
            for part in b.scan_steps(snap, step, f, decoder, dead, ctx_of, names):
                rows.extend(part)
                yield
        else:
            for i in range(0, len(cands), step):
                rows.extend(self._check(b.get_many_in(snap, cands[i:i + step]), f, decoder,
                                        dead, ctx_of))
                yield
            b.natural_order(rows)
        return rows

    @staticmethod
    def _read_stored(backend: LmdbBackend, snap, step: int, cands: list[str] | None, f,
                     decoder, dead: set, names, into: StoredRecords | None = None
                     ) -> Generator[None, None, StoredRecords]:
        """:meth:`_read_rows` keeping the matching rows as stored (:class:`StoredRecords`,
        ``into`` when given: appended to as they are read); the snapshot ``snap`` reads
        ``bytes``."""
        found = StoredRecords() if into is None else into
        if snap is None:
            if cands is None:
                found.extend(backend.scan_stored(f, decoder, dead, names))
            else:
                found.extend(backend.check_stored(backend.get_stored(cands), f, decoder, dead))
            return found
        if cands is None:
            for got in backend.scan_stored_steps(snap, step, f, decoder, dead, names,
                                                 as_bytes=True):
                found.extend(got)
                yield
        else:  # read in natural order
            lks = backend.snapshot_keys(cands)
            for i in range(0, len(lks), step):
                found.extend(backend.check_stored(backend.stored_in(snap, lks[i:i + step]), f,
                                                  decoder, dead))
                yield
        return found

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
                    history_cut: float | None = None, stored: bool = False,
                    into: StoredRecords | None = None
                    ) -> Generator[None, None, QueryResult]:
        """:meth:`query` as a generator that returns the :class:`QueryResult`: the first step
        parses, plans and takes the snapshot (errors are raised there); a query that reads
        more than ``chunk`` records (default :attr:`query_chunk`; 0: never) then reads them over
        several steps, so that its caller can let other work run in between.  Writes made
        between steps do not change the result.  ``history_cut``: a historical query, the
        state just before that instant (see :meth:`history_cut`; needs ``History``).
        ``stored``: the caller only sends the records (the server's plain query): a query
        without ``orderby`` or a projecting ``select`` may then return them as
        :class:`StoredRecords` (see :meth:`_match_steps`); with ``into`` (and neither
        ``top_n`` nor ``skip_n``), those are appended to ``into`` as they are read, and it is
        the result's records: its caller may send them between the steps."""
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
                filter, sow_keys, now, order.paths if order else (), plan, chunk,
                stored and order is None and (sel is None or sel.identity), build=True,
                into=into if top_n is None and skip_n is None else None)
            if isinstance(rows, StoredRecords):
                return QueryResult(page(rows, top_n, skip_n), len(rows), topic_matches, desc)
        if order is not None and chunk and len(rows) > chunk:
            out = yield from sorted_page_steps(rows, order, top_n, skip_n, chunk)
        else:
            if order is not None:
                docs = {id(r): d for r, d in rows}
                recs = sort_records([r for r, _ in rows], order, lambda r: docs[id(r)])
            else:
                recs = [r for r, _ in rows]
            out = page(recs, top_n, skip_n)
        tree = self._tree_decoder
        if tree is not None:  # another type: what reads a record's doc gets the codec's tree
            for r, d in rows:
                if d is not None:
                    r.keep_doc(d)
            for r in out:
                r.doc_by(tree.decode)
        if sel is not None and not sel.identity:
            out = [project(r, sel, self.encode) for r in out]
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
        history = self.history
        if history is None:
            raise ValueError(f"SOW topic {self.name} has no History")
        f = self._compile(flt)
        keys = None if sow_keys is None else set(parse_sow_keys(sow_keys))
        paths = list(order_paths)
        paths.extend(_paths_read(f))
        decoder = self._decoder_for(paths)
        ctx_of = self._ctx_of if _reads_context(f) else None
        acc = history.state(cut, now)
        recs: list[Record] = []
        steps = 0
        if acc is not None:
            steps = yield from self._history_state_steps(history, acc, chunk)
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

    def _history_state_steps(self, history: History, acc: StateAsOf, chunk: int | None
                             ) -> Generator[None, None, int]:
        """Feed ``acc`` the saved versions, then the current records: from a snapshot,
        ``chunk`` rows per step, when there are more than ``chunk`` of them, else at once.
        Returns how many steps read rows."""
        with self._b.reading():
            size = len(history.table) + self._b.count()
        if not (chunk and size > chunk):
            with self._b.reading():
                acc.add_rows(history.table.items())
                acc.add_current(self._b.all_records())
            return 0
        steps = 0
        snap = self._b.snapshot()
        try:
            parts = ((history.table.snapshot_rows(snap), acc.add_rows),
                     (self._b.records_in(snap), acc.add_current))
            yield  # the snapshot is taken
            for part, add in parts:
                while batch := list(islice(part, chunk)):
                    add(batch)
                    steps += 1
                    yield
        finally:
            self._b.release(snap)
        return steps

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
