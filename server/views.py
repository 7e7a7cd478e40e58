"""Views (``SOW/View``) and conflated topics (``SOW/ConflatedTopic``): SOW topics the server
derives from another SOW topic and keeps current.

Both are in-memory SOW topics, rebuilt from their underlying topic at start-up, that clients
query and subscribe to like any SOW topic (filters, ``oof``, delta, select lists, ...). They
are not recorded in the transaction log and clients cannot publish or ``sow_delete`` to them.

View
    ``UnderlyingTopic`` (one topic: a SOW topic, another view or a conflated topic),
    ``Projection``, ``Grouping``, optional ``Filter`` on the underlying records, ``KeyDomain``
    (seeds the records' SowKeys; default the view's name). A view record per group, computed
    with the aggregated-query engine (:mod:`sow.aggregate`); each change to the underlying
    topic recomputes the groups it touches (:class:`server.aggregated_subscription.GroupTracker`)
    and publishes them on the view, and a group left empty is deleted from the view (``oof``
    reason ``deleted``/``expired`` when a removal emptied it, ``match`` when its records moved
    or stopped matching the filter). Views are processed at once, in publish order
    (``Conflation inline`` is accepted: the result is the same). Topic-qualified identifiers
    (``[orders].[/qty]``) are accepted for the view's own underlying topic. Not implemented:
    ``Join`` views (warned at start-up; the view is not created) and views over a queue.

ConflatedTopic
    A copy of ``UnderlyingTopic`` (optionally ``Filter``-ed) that changes at most once per
    ``Interval``: changes wait, the latest per SowKey replacing earlier ones, and every interval
    the waiting ones are applied (published, or deleted with ``oof``). A record that stops
    matching the filter is deleted from it.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any

from protocol import reasons
from protocol.reasons import CommandError
from sow import TopicSpec
from sow.aggregate import parse_aggregation
from sow.paths import path_text

from .aggregated_subscription import GroupTracker
from .delivery import Message, fan_out, send_oof

if TYPE_CHECKING:
    from server.app import Server
    from sow import Record, Topic

log = logging.getLogger("amps_emulator.views")

__all__ = ["DerivedTopics", "derived_specs"]


def derived_specs(config: Any) -> list[TopicSpec]:
    """The SOW topics views and conflated topics are stored in (Join views excluded)."""
    out = []
    for v in config.views:
        if v.underlying_topic is not None:
            out.append(TopicSpec(v.name, durability="transient", hash_indexes=v.hash_indexes))
    for c in config.conflated_topics:
        out.append(TopicSpec(c.name, durability="transient", hash_indexes=c.hash_indexes))
    return out


def _unqualified(fields: tuple[str, ...], topic: str) -> str:
    """``[orders].[/qty]`` (or ``[orders]./qty``) -> ``/qty`` for the view's own topic."""
    pat = re.compile(r"\[\s*" + re.escape(topic) + r"\s*\]\s*\.\s*(?:\[\s*(/[^\]]*?)\s*\]|(?=/))")
    return "[" + ",".join(pat.sub(lambda m: m.group(1) or "", f) for f in fields) + "]"


class _View:
    def __init__(self, server: "Server", cfg: Any, topic: "Topic", underlying: "Topic") -> None:
        from server.commands import compile_filter_for

        self.server = server
        self.name = cfg.name
        self.topic = topic
        self.underlying = underlying
        src = underlying.spec.name
        try:
            spec = parse_aggregation({"grouping": _unqualified(cfg.grouping, src),
                                      "projection": _unqualified(cfg.projection, src)})
            self.filter = compile_filter_for(cfg.filter)
        except CommandError as exc:
            raise ValueError(f"View {cfg.name} ({cfg.file}:{cfg.line}): {exc}") from None
        self.groups = GroupTracker(underlying, spec, cfg.key_domain or cfg.name)
        topic.delta_keys = tuple(path_text(p) for p in spec.grouping)  # a view's key fields

    def build(self) -> None:
        recs = [r for r in self.underlying.query().records
                if self.filter is None or self.filter(r.doc, self.underlying._ctx_of(r))]
        for out in self.groups.load(recs):
            self.topic.upsert(out.sow_key, out.data, out.doc, None, "", 0, None, out.timestamp)

    def published(self, msg: Message) -> None:
        joined = self.filter is None or bool(self.filter(msg.doc, msg.context()))
        self._apply(self.groups.change(msg.sow_key, joined, msg.doc), reasons.OOF_MATCH)

    def removed(self, rec: "Record", reason: str) -> None:
        if rec.sow_key in self.groups:
            self._apply(self.groups.change(rec.sow_key, False, None), reason)

    def _apply(self, touched: list, reason: str) -> None:
        derived = self.server.derived
        for out, previous in touched:
            if out is not None:
                derived.store(self.topic, out.sow_key, out.data, out.doc)
            elif previous is not None:
                derived.delete(self.topic, previous.sow_key, reason)


class _Conflated:
    def __init__(self, server: "Server", cfg: Any, topic: "Topic", underlying: "Topic") -> None:
        from server.commands import compile_filter_for

        self.server = server
        self.name = cfg.name
        self.topic = topic
        self.underlying = underlying
        self.interval = cfg.interval
        try:
            self.filter = compile_filter_for(cfg.filter)
        except CommandError as exc:
            raise ValueError(f"ConflatedTopic {cfg.name} ({cfg.file}:{cfg.line}): {exc}") from None
        self._waiting: dict[str, tuple[Any, ...]] = {}  # SowKey -> (data, doc) | (reason,)
        self._timer: Any = None

    def build(self) -> None:
        for r in self.underlying.query().records:
            if self.filter is None or self.filter(r.doc, self.underlying._ctx_of(r)):
                self.topic.upsert(r.sow_key, r.data, r.doc, None, r.bookmark, 0, None,
                                  r.timestamp)
        self._timer = self.server.loop.call_later(self.interval, self._tick)

    def published(self, msg: Message) -> None:
        if self.filter is None or self.filter(msg.doc, msg.context()):
            self._waiting[msg.sow_key] = (msg.body, msg.doc)
        else:
            self._waiting[msg.sow_key] = (reasons.OOF_MATCH,)

    def removed(self, rec: "Record", reason: str) -> None:
        self._waiting[rec.sow_key] = (reason,)

    def _tick(self) -> None:
        self._timer = self.server.loop.call_later(self.interval, self._tick)
        waiting, self._waiting = self._waiting, {}
        derived = self.server.derived
        try:
            for skey, change in waiting.items():
                if len(change) == 2:
                    derived.store(self.topic, skey, change[0], change[1])
                else:
                    derived.delete(self.topic, skey, change[0])
        except Exception:  # keep the timer whatever one interval hit
            log.exception("ConflatedTopic %s: an update failed", self.name)
        self.server.request_turn_end()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


class DerivedTopics:
    """Every view and conflated topic of the server, fed by the changes to SOW topics."""

    def __init__(self, server: "Server", config: Any) -> None:
        self.server = server
        self.by_underlying: dict[str, list[Any]] = {}
        self.names: set[str] = set()
        self._conflated: list[_Conflated] = []
        self._order: list[Any] = []
        sow = server.sowsvc
        for kind, cfg in [("View", v) for v in config.views] + [
                ("ConflatedTopic", c) for c in config.conflated_topics]:
            if kind == "View" and cfg.underlying_topic is None:
                log.warning("View %s (%s:%d) joins topics, which the emulator does not "
                            "implement: the view is not created", cfg.name, cfg.file, cfg.line)
                continue
            underlying = sow.get(cfg.underlying_topic) if sow is not None else None
            if underlying is None:
                log.warning("%s %s (%s:%d): its underlying topic %r is not a SOW topic the "
                            "emulator keeps (a queue?): it is not created", kind, cfg.name,
                            cfg.file, cfg.line, cfg.underlying_topic)
                continue
            topic = sow.get(cfg.name)
            d = (_View if kind == "View" else _Conflated)(server, cfg, topic, underlying)
            self.by_underlying.setdefault(underlying.spec.name, []).append(d)
            self.names.add(cfg.name)
            self._order.append(d)
            if isinstance(d, _Conflated):
                self._conflated.append(d)

    def start(self) -> None:
        """Build every view and conflated topic from its underlying topic (config order, so
        a view over a view sees the first one built)."""
        for d in self._order:
            d.build()
        if self._order:
            log.info("built %d views/conflated topics", len(self._order))

    def check_writable(self, topic: str) -> None:
        if topic in self.names:
            raise CommandError(reasons.INVALID_TOPIC,
                               f"{topic!r} is a view or conflated topic: AMPS maintains it")

    # -- changes to SOW topics ------------------------------------------------------------
    def published(self, topic: str, msg: Message) -> None:
        for d in self.by_underlying.get(topic, ()):
            try:
                d.published(msg)
            except Exception:  # the publish itself is done: a view must not fail it
                log.exception("%s: update for %s failed", d.name, msg.sow_key)

    def removed(self, topic: str, records: list["Record"], reason: str) -> None:
        for d in self.by_underlying.get(topic, ()):
            for rec in records:
                try:
                    d.removed(rec, reason)
                except Exception:
                    log.exception("%s: removal of %s failed", d.name, rec.sow_key)

    # -- writes to derived topics ---------------------------------------------------------
    def store(self, topic: "Topic", skey: str, data: bytes, doc: Any) -> None:
        """Upsert a derived record and deliver it as any SOW publish is (never journalled)."""
        from server.sow_commands import store_publish

        name = topic.spec.name
        msg = Message(name, data, None, None, skey, None, "", doc)
        store_publish(self.server, topic, msg, False, 0, skey)
        fan_out(self.server, msg)
        self.published(name, msg)  # views over this one

    def delete(self, topic: "Topic", skey: str, reason: str) -> None:
        name = topic.spec.name
        self.server.request_turn_end()
        recs = topic.delete_by_keys([skey]).records
        if recs:
            send_oof(self.server, name, recs, reason)
            self.removed(name, recs, reason)

    def close(self) -> None:
        for c in self._conflated:
            c.close()
