"""Views (``SOW/View``) and conflated topics (``SOW/ConflatedTopic``): SOW topics the server
derives from another SOW topic and keeps current.

Both are in-memory SOW topics, rebuilt from their underlying topic at start-up, that clients
query and subscribe to like any SOW topic (filters, ``oof``, delta, select lists, ...). They
are not recorded in the transaction log and clients cannot publish or ``sow_delete`` to them.

View
    ``UnderlyingTopic`` (one topic: a SOW topic, another view, a conflated topic, or a queue:
    then the messages available in it now, :mod:`.queue_views`),
    ``Projection``, ``Grouping``, optional ``Filter`` on the underlying records, ``KeyDomain``
    (seeds the records' SowKeys; default the view's name). A view record per group, computed
    with the aggregated-query engine (:mod:`sow.aggregate`); each change to the underlying
    topic updates the groups it touches, at the cost of the records changed, not of the
    groups' sizes (:class:`server.delivery.aggregated.GroupTracker`)
    and publishes them on the view, and a group left empty is deleted from the view (``oof``
    reason ``deleted``/``expired`` when a removal emptied it, ``match`` when its records moved
    or stopped matching the filter). Views are processed at once, in publish order
    (``Conflation inline`` is accepted: the result is the same). Topic-qualified identifiers
    (``[orders].[/qty]``) are accepted for the view's own underlying topic.

Join view
    ``UnderlyingTopic`` holding ``Join`` elements (``[orders].[/cust]=[customers].[/cid]``,
    a message type may lead: ``[json].[orders].[/cust]``): each join relates a topic already
    in the view (the first join's left topic starts it) to a new one, so stars and chains
    work. A left outer join: one row per left record and combination of matching records
    (values compared as strings; NULL matches nothing unless ``JoinNullEquivalency``), NULLs
    where a topic has no match. Projection and Grouping read ``[topic].[/field]``. A change
    to any topic recomputes the rows of the left records it can reach, then each group they
    touch once.

ConflatedTopic
    A copy of ``UnderlyingTopic`` (optionally ``Filter``-ed) that changes at most once per
    ``Interval``: changes wait, the latest per SowKey replacing earlier ones, and every interval
    the waiting ones are applied (published, or deleted with ``oof``). A record that stops
    matching the filter is deleted from it. Its ``Enrichment`` (:mod:`sow.enrichment`, no
    ``OF PREVIOUS``) rewrites each record it publishes.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any, Protocol

from amps_emulator.config.errors import ConfigError, ConfigIssue
from amps_emulator.protocol import reasons
from amps_emulator.protocol.filter import MessageContext
from amps_emulator.protocol.filter.values import resolve
from amps_emulator.protocol.reasons import CommandError
from amps_emulator.protocol.topics import display_name, qualify, split_topic
from amps_emulator.server.core.message import UNDECODED, Message
from amps_emulator.server.core.ports import ServiceHost
from amps_emulator.server.delivery.aggregated import GroupTracker
from amps_emulator.server.delivery.fanout import fan_out, send_oof
from amps_emulator.server.messaging.message_path import store_publish
from amps_emulator.server.messaging.registration import compile_filter_for
from amps_emulator.server.services.queue_views import QueueRows, QueueWatch
from amps_emulator.sow import TopicSpec
from amps_emulator.sow.aggregate import parse_aggregation
from amps_emulator.sow.delta import encode as encode_doc
from amps_emulator.sow.paths import parse_path, path_text
from amps_emulator.sow.record import Record

if TYPE_CHECKING:
    from amps_emulator.journal.record import JournalRecord
    from amps_emulator.server.core.ports import SowService
    from amps_emulator.server.services.queue_service import QueueService
    from amps_emulator.sow import Topic

log = logging.getLogger("amps_emulator.views")

class DerivedWatch(Protocol):
    """Told of each record a view or conflated topic stores or deletes (the actions)."""

    def derived_stored(self, topic: str, sow_key: str, data: bytes, doc: Any) -> None: ...

    def derived_removed(self, topic: str, records: list[Record]) -> None: ...


class ViewsHost(ServiceHost, Protocol):
    """What the views read of the broker: its SOW (here, not in ``ports``: it names
    :class:`server.services.sow_service.SowService`)."""

    sow_service: SowService | None


__all__ = ["DerivedTopics", "derived_specs"]


def derived_specs(config: Any) -> list[TopicSpec]:
    """The SOW topics views and conflated topics are stored in, each of its own message type
    (a topic is (type, name): its key, :func:`topics.qualify`)."""
    out = []
    for d in config.views:
        out.append(TopicSpec(qualify(d.name, d.message_type), message_type=d.message_type,
                             durability="transient", hash_indexes=d.hash_indexes))
    for c in config.conflated_topics:  # (with the Enrichment it applies to what it publishes)
        if c.over_pattern:
            continue  # a topic per logical topic, made as each is named (SowService)
        out.append(TopicSpec(qualify(c.name, c.message_type), message_type=c.message_type,
                             durability="transient", hash_indexes=c.hash_indexes,
                             enrichment=c.enrichment))
    return out


_TYPED_TOPIC = re.compile(r"\s*\[\s*([^\]]+?)\s*\]\s*\.\s*\[\s*([^\]]+?)\s*\]\s*")


def source_key(text: str, message_type: str) -> str:
    """The topic key a view's ``UnderlyingTopic`` names: ``[nvfix].[ORDERS]`` the nvfix
    topic ``ORDERS`` (a view projected into another type, docs/design/beyond-json.md A.5), a bare name
    the topic of the view's own ``message_type``."""
    m = _TYPED_TOPIC.fullmatch(text)
    if m is not None:
        return qualify(m.group(2), m.group(1))
    return qualify(text.strip(), message_type)


def _unqualified(fields: tuple[str, ...], topic: str) -> str:
    """``[orders].[/qty]`` (or ``[orders]./qty``, or with the type first:
    ``[nvfix].[orders]./qty``) -> ``/qty`` for the view's own topic."""
    pat = re.compile(r"(?:\[[^\]]*\]\s*\.\s*)?\[\s*" + re.escape(topic)
                     + r"\s*\]\s*\.\s*(?:\[\s*(/[^\]]*?)\s*\]|(?=/))")
    return "[" + ",".join(pat.sub(lambda m: m.group(1) or "", f) for f in fields) + "]"


class _Derived:
    """What every derived topic has: its own SOW topic, the SOW topics it reads
    (``sources``), ``build()``, ``published``/``removed`` for changes to a source, ``close()``.
    A source that is not a SOW topic raises ``LookupError`` with its name. ``key``: its own
    topic's key when it is not the definition's name (a logical topic's conflated topic)."""

    def __init__(self, owner: DerivedTopics, cfg: Any, sources: list[str],
                 key: str | None = None) -> None:
        sow = owner.sow_service
        self.owner = owner  # where derived records are written (``store``, ``delete``)
        self.broker = owner.broker
        #: the derived topic's key (its name, and its type unless json)
        self.key = qualify(cfg.name, cfg.message_type) if key is None else key
        self.name = cfg.name if key is None else display_name(key)
        topic = sow.get(self.key)
        if topic is None:  # derived_specs gave every view its SOW topic
            raise LookupError(cfg.name)
        self.topic: Topic = topic
        self.sources = sources
        #: the SOW topics read (or a queue's available messages, :class:`QueueRows`)
        self.inputs: list[Any] = []
        for name in sources:
            t = owner.input_topic(name)
            if t is None:
                raise LookupError(display_name(name))
            self.inputs.append(t)

    def build(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def published(self, topic: str, skey: str, msg: Message) -> None:  # pragma: no cover
        """``msg`` was stored in the source ``topic`` as its record ``skey``."""
        raise NotImplementedError

    def removed(self, topic: str, rec: Record, reason: str) -> None:  # pragma: no cover
        raise NotImplementedError

    def removed_many(self, topic: str, records: list[Record], reason: str) -> None:
        """The records one command removed from the source ``topic``."""
        for rec in records:
            self.removed(topic, rec, reason)

    def close(self) -> None:
        pass


class _View(_Derived):
    def __init__(self, owner: DerivedTopics, cfg: Any) -> None:
        super().__init__(owner, cfg, [source_key(cfg.underlying_topic, cfg.message_type)])
        underlying = self.underlying = self.inputs[0]
        topic = self.topic
        src = display_name(underlying.spec.name)
        try:
            spec = parse_aggregation({"grouping": _unqualified(cfg.grouping, src),
                                      "projection": _unqualified(cfg.projection, src)})
            self.filter = compile_filter_for(cfg.filter)
        except CommandError as exc:
            raise _config_error(cfg, "View", exc) from None
        if spec is None:  # (_unqualified always gives both lists, empty or not)
            raise _config_error(cfg, "View", "no Grouping and Projection")
        # the records are written in the view's own type (the projection, serialised by it)
        self.groups = GroupTracker(underlying, spec, cfg.key_domain or cfg.name, topic.encode)
        topic.delta_keys = tuple(path_text(p) for p in spec.grouping)  # a view's key fields

    def build(self) -> None:
        recs = [r for r in self.underlying.query().records
                if self.filter is None or self.filter(r.doc, self.underlying._ctx_of(r))]
        for out in self.groups.load(recs):
            self.topic.upsert(out.sow_key, out.data, out.doc, None, "", 0, None, out.timestamp)

    def published(self, topic: str, skey: str, msg: Message) -> None:
        joined = self.filter is None or bool(self.filter(msg.doc, msg.context()))
        _apply_groups(self.owner, self.topic, self.groups.change(skey, joined, msg.doc),
                      reasons.OOF_MATCH)

    def removed(self, topic: str, rec: Record, reason: str) -> None:
        if rec.sow_key in self.groups:
            _apply_groups(self.owner, self.topic, self.groups.change(rec.sow_key, False, None),
                          reason)

    def removed_many(self, topic: str, records: list[Record], reason: str) -> None:
        """Each group the records leave is published (or deleted) once."""
        gone = [(r.sow_key, False, None) for r in records if r.sow_key in self.groups]
        if gone:
            _apply_groups(self.owner, self.topic, self.groups.change_many(gone), reason)


def _apply_groups(derived: DerivedTopics, topic: Topic, touched: list, reason: str) -> None:
    """Publish each touched group's new record on the view, delete the groups now gone."""
    for out, previous in touched:
        if out is not None:
            derived.store(topic, out.sow_key, out.data, out.doc)
        elif previous is not None:
            derived.delete(topic, previous.sow_key, reason)


def _config_error(cfg: Any, kind: str, detail: Any) -> ConfigError:
    """A definition the engine cannot use, reported like any config error (file, line)."""
    return ConfigError([ConfigIssue(cfg.file, cfg.line, f"{kind} {cfg.name}: {detail}")])


_NULL_TOKEN = "\x00null"


def _join_token(v: Any, null_equal: bool) -> str | None:
    """A join field's value as the string joins compare (None: NULL, joins nothing)."""
    if type(v) is list:
        v = v[0] if v else None
    if v is None or v == "" or type(v) is dict:
        return _NULL_TOKEN if null_equal else None
    return v if type(v) is str else encode_doc(v).decode()


class _JoinRows:
    """The rows of a join view, as the records its :class:`GroupTracker` reads: one row per
    left record and combination of matching records of the joined topics (a joined topic
    with no match contributes NULLs: a left outer join). A row's document holds each topic's
    record under ``__t0``, ``__t1``, ... (the left topic first)."""

    def __init__(self, name: str) -> None:
        self.spec = TopicSpec(name, durability="transient")
        self.rows: dict[str, Record] = {}
        self.seq = 0

    def get(self, key: str) -> Record | None:
        return self.rows.get(key)


class _JoinView(_Derived):
    """A ``View`` whose ``UnderlyingTopic`` holds ``Join`` elements (see the module
    docstring): every join relates a field of a topic already in the view (the first join's
    left topic starts it) to a field of a new topic."""

    def __init__(self, owner: DerivedTopics, cfg: Any) -> None:
        from amps_emulator.config.values import parse_join

        self.null_equal = cfg.join_null_equivalency
        joins = [parse_join(j) for j in cfg.joins]
        names = [joins[0][0][0]]
        self.links: list[tuple[int, str, int, str]] = []  # (known index, field, new index, field)
        for a, b in joins:
            if a[0] in names and b[0] not in names:
                known, new = a, b
            elif b[0] in names and a[0] not in names:
                known, new = b, a
            else:
                raise _config_error(cfg, "View", f"join {a[0]}/{b[0]} must relate a topic "
                                    "already in the view to a new one")
            names.append(new[0])
            self.links.append((names.index(known[0]), known[1], len(names) - 1, new[1]))
        types = _join_types(cfg.joins)
        super().__init__(owner, cfg, [qualify(n, types.get(n, cfg.message_type)) for n in names])
        self.topics = self.inputs
        self.names = names
        self.paths = {(i, f): parse_path(f) for link in self.links for i, f in
                      ((link[0], link[1]), (link[2], link[3]))}
        # value of a joined topic's field -> its SowKeys; value of the left field -> left keys
        self._index: dict[tuple[int, str], dict[str, set[str]]] = {}
        self.rows = _JoinRows(cfg.name)
        self._rows_of: dict[str, list[str]] = {}  # left SowKey -> its row keys
        try:
            spec = parse_aggregation({"grouping": self._rewrite(cfg.grouping),
                                      "projection": self._rewrite(cfg.projection)})
        except CommandError as exc:
            raise _config_error(cfg, "View", exc) from None
        self.groups = GroupTracker(self.rows, spec, cfg.key_domain or cfg.name,  # type: ignore
                                   self.topic.encode)

    def _rewrite(self, fields: tuple[str, ...]) -> str:
        """``[orders].[/qty]`` (also ``[json].[orders].[/qty]``) -> ``/__t0/qty``."""
        def sub(m: re.Match) -> str:
            name = m.group(1).strip()
            if name not in self.names:
                return m.group(0)
            return f"/__t{self.names.index(name)}" + (m.group(2) or m.group(3)).strip()

        pat = re.compile(r"(?:\[[^\]]*\]\s*\.\s*)?\[\s*([^\]/]+?)\s*\]\s*\.\s*"
                         r"(?:\[\s*(/[^\]]*?)\s*\]|(/[^\s,()]*))")
        return "[" + ",".join(pat.sub(sub, f) for f in fields) + "]"

    # ---- state -------------------------------------------------------------------------
    def _token(self, i: int, field: str, doc: Any) -> str | None:
        return _join_token(resolve(doc, self.paths[(i, field)]), self.null_equal)

    def _index_record(self, i: int, skey: str, doc: Any, add: bool) -> None:
        for known, kf, new, nf in self.links:
            for idx, f in ((known, kf), (new, nf)):
                if idx != i:
                    continue
                tok = self._token(i, f, doc)
                if tok is None:
                    continue
                bucket = self._index.setdefault((i, f), {}).setdefault(tok, set())
                if add:
                    bucket.add(skey)
                else:
                    bucket.discard(skey)

    def _combos(self, left: Record) -> list[list[Record | None]]:
        combos: list[list[Record | None]] = [[left] + [None] * (len(self.topics) - 1)]
        for known, kf, new, nf in self.links:
            out = []
            for row in combos:
                src = row[known]
                tok = None if src is None else self._token(known, kf, src.doc)
                keys = sorted(self._index.get((new, nf), {}).get(tok, ())) if tok else []
                matches: list[Record | None] = [
                    r for r in map(self.topics[new].get, keys) if r is not None]
                for m in matches or [None]:
                    nrow = list(row)
                    nrow[new] = m
                    out.append(nrow)
            combos = out
        return combos

    def _rows_for(self, lkey: str) -> list[tuple[str, Any]]:
        left = self.topics[0].get(lkey)
        if left is None:
            return []
        out = []
        for combo in self._combos(left):
            key = "|".join("" if r is None else r.sow_key for r in combo)
            doc = {f"__t{i}": (None if r is None else r.doc) for i, r in enumerate(combo)}
            out.append((key, doc))
        return out

    def _refresh(self, lkeys: set[str], reason: str) -> None:
        """Recompute the rows of these left records, then each group they touch once."""
        changes: list[tuple[str, bool, Any]] = []
        for lkey in sorted(lkeys):
            old = self._rows_of.pop(lkey, [])
            new = self._rows_for(lkey)
            new_keys = {k for k, _ in new}
            for k in old:
                if k not in new_keys:
                    self.rows.rows.pop(k, None)
                    changes.append((k, False, None))
            for k, doc in new:
                self.rows.seq += 1
                self.rows.rows[k] = Record(k, b"", "", 0.0, None, 0, None, doc, self.rows.seq)
                changes.append((k, True, doc))
            if new:
                self._rows_of[lkey] = [k for k, _ in new]
        _apply_groups(self.owner, self.topic, self.groups.change_many(changes), reason)

    def _left_keys(self, i: int, docs: list[Any]) -> set[str]:
        """The left records whose rows can hold a record of topic ``i`` with one of these
        bodies (through the joins that brought topic ``i`` in)."""
        out: set[str] = set()
        for known, kf, new, nf in self.links:
            if new != i:
                continue
            keys: set[str] = set()
            for doc in docs:
                tok = self._token(i, nf, doc)
                if tok is not None:
                    keys |= self._index.get((known, kf), {}).get(tok, set())
            if known == 0:
                out |= keys
            else:  # a chain: the left records of the records it joins through
                out |= self._left_keys(known, [r.doc for r in map(self.topics[known].get, keys)
                                               if r is not None])
        return out

    def build(self) -> None:
        for i, t in enumerate(self.topics):
            for rec in t.query().records:
                self._index_record(i, rec.sow_key, rec.doc, True)
        lkeys = sorted(r.sow_key for r in self.topics[0].query().records)
        rows = []
        for lkey in lkeys:
            new = self._rows_for(lkey)
            for k, doc in new:
                self.rows.seq += 1
                rec = self.rows.rows[k] = Record(k, b"", "", 0.0, None, 0, None, doc,
                                                 self.rows.seq)
                rows.append(rec)
            if new:
                self._rows_of[lkey] = [k for k, _ in new]
        for out in self.groups.load(rows):
            self.topic.upsert(out.sow_key, out.data, out.doc, None, "", 0, None, None)

    # ---- changes -----------------------------------------------------------------------
    def changed(self, topic: str, skey: str, old_doc: Any, new_doc: Any, reason: str) -> None:
        for i, t in enumerate(self.topics):
            if t.spec.name != topic:  # (keys: name and type)
                continue
            if old_doc is not None:
                self._index_record(i, skey, old_doc, False)
            if new_doc is not None:
                self._index_record(i, skey, new_doc, True)
            lkeys = {skey} if i == 0 else set()
            lkeys |= self._left_keys(i, [d for d in (old_doc, new_doc) if d is not None])
            self._refresh(lkeys, reason)

    def published(self, topic: str, skey: str, msg: Message) -> None:
        prev = msg.previous_doc
        self.changed(topic, skey, None if prev is UNDECODED else prev, msg.doc,
                     reasons.OOF_MATCH)

    def removed(self, topic: str, rec: Record, reason: str) -> None:
        self.changed(topic, rec.sow_key, rec.doc, None, reason)


def _join_types(joins: tuple[str, ...]) -> dict[str, str]:
    """The topics whose message type a join names (``[nvfix].[orders].[/cust]``)."""
    out = {}
    for j in joins:
        for side in j.split("="):
            m = re.match(r"\s*\[\s*([^\]]+?)\s*\]\s*\.\s*\[\s*([^\]]+?)\s*\]\s*\.", side)
            if m is not None:
                out[m.group(2)] = m.group(1)
    return out


class _Conflated(_Derived):
    def __init__(self, owner: DerivedTopics, cfg: Any, key: str | None = None,
                 source: str | None = None) -> None:
        """``key``, ``source``: the conflated topic of the logical topic ``source``."""
        super().__init__(owner, cfg, [source or source_key(cfg.underlying_topic, cfg.message_type)],
                         key)
        self.underlying = self.inputs[0]
        self.interval = cfg.interval
        try:
            self.filter = compile_filter_for(cfg.filter)
        except CommandError as exc:
            raise _config_error(cfg, "ConflatedTopic", exc) from None
        self._waiting: dict[str, tuple[Any, ...]] = {}  # SowKey -> (data, doc) | (reason,)
        self._enrich_failed = False  # (logged once)
        self._timer: Any = None

    def build(self, copy: bool = True) -> None:
        """Copy the underlying topic's records (unless not ``copy``), start the interval."""
        for r in self.underlying.query().records if copy else ():
            if self.filter is None or self.filter(r.doc, self.underlying._ctx_of(r)):
                data, doc = self._enriched(r.sow_key, r.data, r.doc)
                self.topic.upsert(r.sow_key, data, doc, None, r.bookmark, 0, None, r.timestamp)
        self._timer = self.broker.call_later(self.interval, self._tick)

    def _enriched(self, skey: str, data: bytes, doc: Any) -> tuple[bytes, Any]:
        """A record as the conflated topic publishes it: after its own ``Enrichment``."""
        rules = self.topic.enrichment
        if rules is None:
            return data, doc
        ctx = MessageContext(topic=self.name, sow_key=skey, timestamp=self.broker.wallclock(),
                             instance_name=self.broker.instance_name,
                             group_name=self.broker.group_name, lookup=self.broker.value_lookup) \
            if rules.uses_context else None
        try:
            return rules.enrich(data, doc, None, ctx)
        except CommandError as exc:  # a value its type cannot write: published as it came
            if not self._enrich_failed:
                self._enrich_failed = True
                log.warning("ConflatedTopic %s: its Enrichment cannot be applied to record %s "
                            "(%s); such records are published without it", self.name, skey,
                            exc.detail or exc.reason)
            return data, doc

    def published(self, topic: str, skey: str, msg: Message) -> None:
        if self.filter is None or self.filter(msg.doc, msg.context()):
            self._waiting[skey] = (msg.body, msg.doc)
        else:
            self._waiting[skey] = (reasons.OOF_MATCH,)

    def removed(self, topic: str, rec: Record, reason: str) -> None:
        self._waiting[rec.sow_key] = (reason,)

    def _tick(self) -> None:
        self._timer = self.broker.call_later(self.interval, self._tick)
        waiting, self._waiting = self._waiting, {}
        derived = self.owner
        try:
            for skey, change in waiting.items():
                if len(change) == 2:
                    derived.store(self.topic, skey, *self._enriched(skey, *change))
                else:
                    derived.delete(self.topic, skey, change[0])
        except Exception:  # keep the timer whatever one interval hit
            log.exception("ConflatedTopic %s: an update failed", self.name)
        self.broker.turn.request()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


class DerivedTopics:
    """Every view and conflated topic of the server, fed by the changes to SOW topics."""

    def __init__(self, broker: ViewsHost, config: Any, queues: QueueService | None = None) -> None:
        """``queues``: the server's queues, when views may be over a queue."""
        if broker.sow_service is None:
            raise ValueError("views and conflated topics need the SOW")
        self.broker = broker
        self.sow_service: SowService = broker.sow_service
        self.queues = queues
        #: the queues views read, by the queue's key (see :mod:`.queue_views`)
        self.queue_rows: dict[str, QueueRows] = {}
        self.by_underlying: dict[str, list[_Derived]] = {}
        self.names: set[str] = set()
        self._order: list[_Derived] = []
        self.config = config
        self.watch: DerivedWatch | None = None
        #: ConflatedTopics over a Pattern container: (container name, type) -> them
        self._families: dict[tuple[str, str], list[Any]] = {}
        self._plain: set[str] = set()  # topics known to have no family's conflated topic
        self._discovering = False
        for kind, cfg in [("View", v) for v in config.views] + [
                ("ConflatedTopic", c) for c in config.conflated_topics]:
            if getattr(cfg, "over_pattern", False):
                self._families.setdefault((cfg.underlying_topic, cfg.message_type), []).append(cfg)
                continue
            cls = _Conflated if kind == "ConflatedTopic" else (
                _View if cfg.underlying_topic is not None else _JoinView)
            try:
                d = cls(self, cfg)
            except LookupError as exc:
                log.warning("%s %s (%s:%d): %s is not a SOW topic or queue the emulator "
                            "keeps: it is not created", kind, cfg.name, cfg.file, cfg.line, exc)
                continue
            self._add(d)
        if self._families:
            self.sow_service.conflated_created = self._conflated_created

    def _add(self, d: _Derived) -> None:
        for name in dict.fromkeys(d.sources):
            self.by_underlying.setdefault(name, []).append(d)
        self.names.add(d.key)
        self._order.append(d)

    # -- the conflated topics of logical topics (a ConflatedTopic over a Pattern) ----------
    def _conflated_created(self, key: str, cfg: Any, source: str) -> None:
        """The SOW made the topic ``key``, the conflated topic of the logical topic
        ``source``: build it (from the logical topic's records, if any)."""
        if key in self.names:
            return
        d = _Conflated(self, cfg, key, source)
        self._add(d)
        # made by the logical topic's first publish (_family_of): that one waits its interval
        d.build(copy=not self._discovering)

    def _family_of(self, topic: str, publishing: bool = True) -> bool:
        """Make the conflated topics of ``topic`` if it is a logical topic of a container
        that has them; whether it is. ``publishing``: its first record is being published
        (it goes into them at their interval's end, not at once)."""
        if not self._families or topic in self._plain:
            return False
        plain, mt = split_topic(topic)
        container = self.config.pattern_topic(plain)
        family = self._families.get((container.name, mt)) if container is not None else None
        if family is None:
            if len(self._plain) > 100_000:
                self._plain.clear()
            self._plain.add(topic)
            return False
        self._discovering = publishing
        try:
            for cfg in family:
                self.sow_service.get(qualify(cfg.logical_name(plain), mt))  # made, and built
        finally:
            self._discovering = False
        return True

    def input_topic(self, name: str) -> Any:
        """What a derived topic reads as the topic ``name`` (a key): the queue's available
        messages when it is a queue, else the SOW topic (None: neither)."""
        q = self.queues.get(name) if self.queues is not None else None
        if q is None or self.queues is None:
            return self.sow_service.get(name)
        rows = self.queue_rows[name] = QueueWatch.of(self.queues).follow(q, self._queue_changed)
        return rows

    def start(self) -> None:
        """Build every view and conflated topic from its underlying topic (config order, so
        a view over a view sees the first one built)."""
        for rows in self.queue_rows.values():
            rows.load()
        for d in self._order:
            d.build()
        if self._families:  # the logical topics there are now, and their conflated topics
            for name in list(self.sow_service.sow.topics):
                plain, mt = split_topic(name)
                found = self.config.conflated_logical(plain)
                if found is not None and found[0].message_type == mt:
                    self._conflated_created(name, found[0], qualify(found[1], mt))
                elif name not in self.by_underlying:
                    self._family_of(name, publishing=False)
        if self._order:
            log.info("built %d views/conflated topics", len(self._order))

    def check_writable(self, topic: str) -> None:
        if self._families and topic not in self.names:
            self.sow_service.get(topic)  # a logical topic's conflated topic is made when named
        if topic in self.names:
            raise CommandError(reasons.INVALID_TOPIC, f"{display_name(topic)!r} is a view or "
                               f"conflated topic: AMPS maintains it")

    # -- the message path's observer (ports.PublishObserver) ------------------------------
    def covers(self, topic: str) -> bool:
        return False  # only SOW topics feed views, and a publish to one is always built

    def message_published(self, msg: Message, rec: JournalRecord | None) -> None:
        self.published(msg.topic, msg)

    def records_removed(self, topic: str, records: list[Record], reason: str) -> None:
        self.removed(topic, records, reason)

    # -- changes to SOW topics ------------------------------------------------------------
    def published(self, topic: str, msg: Message) -> None:
        skey = msg.sow_key
        if skey is None:  # not stored in a SOW topic (storing sets it): no view reads it
            return
        if topic not in self.by_underlying and not self._family_of(topic):
            return
        for d in self.by_underlying.get(topic, ()):
            try:
                d.published(topic, skey, msg)
            except Exception:  # the publish itself is done: a view must not fail it
                log.exception("%s: update for %s failed", d.name, msg.sow_key)

    def removed(self, topic: str, records: list[Record], reason: str) -> None:
        for d in self.by_underlying.get(topic, ()):
            try:
                d.removed_many(topic, records, reason)
            except Exception:
                log.exception("%s: removal of %d records failed", d.name, len(records))

    def _queue_changed(self, rows: QueueRows, entered: list[Record], left: list[Record],
                       expired: set[int]) -> None:
        """What is available in a queue the views read changed (:class:`QueueWatch`)."""
        key = rows.spec.name
        for rec in left:
            self.removed(key, [rec], reasons.OOF_EXPIRED if rec.position in expired
                         else reasons.OOF_DELETED)
        for rec in entered:
            self.published(key, rows.message(rec))

    # -- writes to derived topics ---------------------------------------------------------
    def store(self, topic: Topic, skey: str, data: bytes, doc: Any) -> None:
        """Upsert a derived record and deliver it as any SOW publish is (never journalled)."""
        name = topic.spec.name
        msg = Message(name, data, None, None, skey, None, "", doc)
        msg.timestamp = int(self.broker.wallclock() * 1_000_000)  # the record's and the ts
        store_publish(self.broker.turn, topic, msg, False, 0, skey, msg.timestamp / 1_000_000)
        fan_out(self.broker, msg)
        self.published(name, msg)  # views over this one
        if self.watch is not None:
            self.watch.derived_stored(name, skey, msg.body, msg.doc)

    def delete(self, topic: Topic, skey: str, reason: str) -> None:
        name = topic.spec.name
        self.broker.turn.request()
        recs = topic.delete_by_keys([skey]).records
        if recs:
            send_oof(self.broker, name, recs, reason)
            self.removed(name, recs, reason)
            if self.watch is not None:
                self.watch.derived_removed(name, recs)

    def close(self) -> None:
        for d in self._order:
            d.close()
        if self.queues is not None:
            watch = QueueWatch.of(self.queues)
            for rows in self.queue_rows.values():
                watch.unfollow(rows.q, self._queue_changed)
