"""Aggregated ``sow`` queries (``grouping=[...]`` and ``projection=[...]`` options) through the
server: :func:`aggregated_query_steps` stands in for :func:`server.handlers.sow.query_steps`
when a query asks for aggregation.  The aggregation itself is :mod:`sow.aggregate`.

What it does, in order: reads every record the filter and ``sow_keys`` match (no ordering or
paging at that stage), folds them into groups a slice at a time (yielding to the event loop in
between, like a long plain query), then orders the aggregated records by ``orderby``, pages
them with ``skip_n`` / ``top_n`` and sends them in the usual batched ``sow`` frames.  The
``completed`` / ``stats`` counts: ``records_returned`` is the number of aggregated records
sent; ``matches`` and ``topic_matches`` describe the underlying records (records the query
matched, records in the topic).

Refused, each with a failure ack:

* a regex topic: AMPS aggregates a single topic only (``regex topic not supported``);
* ``select=[...]`` together with the aggregation (``invalid options``);
* an aggregated ``sow_and_subscribe`` / ``sow_and_delta_subscribe`` on anything but one SOW
  topic or queue (``invalid options``), or with a bookmark; on one SOW topic it is an
  aggregated subscription (:mod:`server.delivery.aggregated`), on a queue one over the
  messages available in it (:class:`server.services.queue_views.QueueAggregation`).

``replace`` of an aggregated subscription only changes its pagination: a replacing command
that differs in anything else (its command, topic, filter or any option but ``top_n``,
``skip_n``; ``OrderBy`` and ``TopN`` are headers), or an aggregated one that would replace a
plain subscription, is refused with ``invalid options`` and the subscription is left as it
was (:func:`refuse_aggregated_replace`).

A ``bookmark`` on a topic with ``History`` aggregates the state as of that point (as a plain
historical query reads it).  A queue can be queried with aggregation too: its deliverable
messages are aggregated, read-only, as a plain ``sow`` query on a queue reads them.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from amps_emulator.protocol import reasons
from amps_emulator.protocol.reasons import CommandError
from amps_emulator.server.core.router import is_regex_topic
from amps_emulator.server.handlers import sow_results
from amps_emulator.server.handlers.sow_results import (
    history_cuts,
    run_topic_steps,
    send_records,
)
from amps_emulator.sow.aggregate import parse_aggregation
from amps_emulator.sow.query import page, parse_order_by, sort_records
from amps_emulator.sow.record import Record

if TYPE_CHECKING:
    from amps_emulator.protocol.command import Command
    from amps_emulator.server.core.ports import Client
    from amps_emulator.server.delivery.aggregated import AggregatedSubscription
    from amps_emulator.server.messaging.broker import Broker

#: underlying records folded into the groups between two loop steps
AGGREGATE_STEP = 20_000

#: the options a replace of an aggregated subscription may change (its pagination)
_PAGINATION = frozenset(("replace", "top_n", "skip_n"))


def aggregation_definition(cmd: Command) -> tuple:
    """What of an aggregated subscription's command a ``replace`` must keep."""
    return (cmd.command, cmd.topic, cmd.filter or None,
            sorted((k, str(v)) for k, v in cmd.opts.items() if k not in _PAGINATION))


def refuse_aggregated_replace(existing: Any, cmd: Command) -> None:
    """AMPS supports ``replace`` of a subscription that uses aggregation only to change its
    pagination: ``CommandError(invalid options)`` for any other replace that involves one
    (``existing``: the subscription ``cmd`` replaces, None: none)."""
    if existing is None:
        return
    was = getattr(existing.live, "definition", None)
    aggregating = "grouping" in cmd.opts or "projection" in cmd.opts
    if was is None and not aggregating:
        return
    if was is None or was != aggregation_definition(cmd):
        raise CommandError(reasons.INVALID_OPTIONS,
                           f"subscription {existing.sub_id!r} uses aggregation: a replace may "
                           f"change only its pagination (top_n, skip_n, OrderBy)")


def aggregated_query_steps(broker: Broker, client: Client, cmd: Command, filt: Any,
                           subscription: AggregatedSubscription | None = None,
                           on_snapshot: Callable[[], None] | None = None
                           ) -> Generator[Future[None] | None, None, dict[str, int]]:
    """The aggregated query as a generator, with the contract of
    :func:`server.handlers.sow.query_steps` (frames sent, counts returned). For an aggregated
    ``sow_and_subscribe``: ``on_snapshot`` registers the subscription at the snapshot and
    ``subscription`` (:mod:`server.delivery.aggregated`) receives the groups' state."""

    topic_name = cmd.topic
    if not topic_name:  # (the command refused it already)
        raise CommandError(reasons.INVALID_TOPIC, f"{cmd.command} without a topic")
    if cmd.command != "sow" and subscription is None:
        raise CommandError(reasons.INVALID_OPTIONS,
                           f"aggregation (grouping/projection) is not supported on {cmd.command}")
    opts = cmd.opts
    spec = parse_aggregation(opts)
    if spec is None:
        raise CommandError(reasons.INVALID_OPTIONS, "neither grouping nor projection given")
    if "select" in opts:
        raise CommandError(reasons.INVALID_OPTIONS,
                           "select cannot be used with grouping/projection")
    batch = sow_results.batch_size(cmd)
    top_n = sow_results.top_n(cmd)
    skip_n = sow_results.count_option(cmd, "skip_n", cmd.skip_n)
    order = parse_order_by(cmd.orderby)
    queues = broker.queue_service
    queue = queues.get(topic_name) if queues is not None else None
    steps: list[Generator[None, None, Any]] = []
    if queue is not None and subscription is not None:  # the queue's available messages,
        names = [queue.key]  # as the subscription follows them (server.services.queue_views)
        steps = [subscription.topic.query_steps(filt)]
    elif queues is not None and queue is not None:
        names = [queue.key]  # (its messages are of the queue's type: read and written so)
        records, total = yield from queues.query_records(queue, filt, None)
        inputs = [[Record("", bytes(r.body), "", r.timestamp / 1_000_000,
                          doc=broker.bodies.decode(r.body, r.key)) for r in records]]
        matches, topic_matches = len(records), total
    else:
        sow_service = broker.sow_service
        if sow_service is not None and sow_service.get(topic_name, create=False) is None \
                and is_regex_topic(topic_name):
            raise CommandError(reasons.REGEX_TOPIC_NOT_SUPPORTED,
                               "an aggregated query names one topic, not a regex")
        topics = sow_service.topics_for(topic_name, "non_regex_topic" in opts) \
            if sow_service is not None else []
        if not topics:
            raise CommandError(reasons.INVALID_TOPIC, f"{cmd.topic!r} is not a SOW topic")
        names = [t.spec.name for t in topics]
        cuts = yield from history_cuts(broker, cmd, topics, common=False)
        steps = [t.query_steps(filt, sow_keys=cmd.sow_keys,
                               history_cut=cuts.get(t.spec.name) if cuts else None)
                 for t in topics]
    if subscription is not None and len(steps) != 1:
        raise CommandError(reasons.INVALID_OPTIONS, "an aggregated subscription needs one SOW topic")
    qid, results = yield from run_topic_steps(client, cmd, steps, on_snapshot)
    if steps:
        inputs = [res.records for res in results]
        matches = sum(res.matches for res in results)
        topic_matches = sum(res.topic_matches for res in results)
    returned = 0
    for name, records in zip(names, inputs, strict=False):
        agg = spec.aggregator(name, broker.bodies.encoder(name))
        for start in range(0, len(records), AGGREGATE_STEP):
            agg.add(records[start:start + AGGREGATE_STEP])
            if start + AGGREGATE_STEP < len(records):
                yield None
        out = agg.results()
        if subscription is not None:
            subscription.load(records, agg, out)
        if order is not None:
            out = sort_records(out, order)
        out = page(out, top_n, skip_n)
        returned += yield from send_records(client, qid, name, out, batch, opts,
                                            broker.processors.sow)
    client.end_group(cmd, qid)
    return {"records_returned": returned, "matches": matches, "topic_matches": topic_matches}
