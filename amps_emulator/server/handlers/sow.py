"""The SOW query commands: ``sow``, ``sow_and_subscribe`` and ``sow_and_delta_subscribe``.

Query results go out exactly as the official client needs them (protocol notes 4.5): the
``processed`` ack, ``group_begin``, batched ``sow`` frames (``{outer}{k,l,bm[,ts]}data...``,
the same record fields on every record because the client keeps them sticky), ``group_end``,
then ``completed``/``stats`` acks with the counts. A query that fails once ``group_begin`` is
out still ends that way: ``group_end``, then the failure on ``completed``/``stats``
(:meth:`server.net.connection.Connection.fail`), which the client's query stream waits for.

A query that would hold the event loop (a scan or a long candidate list on a big topic, a long
result) runs in steps (:func:`drive`): each topic answers from a snapshot taken when the
command is read, and between steps the loop serves other clients. The querying connection is
busy meanwhile (:mod:`server.net.connection`): its later commands wait, its other output is held
and written after the query's. ``sow_and_subscribe`` registers the subscription in the same
loop step as the snapshots, so nothing published is missed or seen twice: everything
published after the command was read is delivered after ``group_end``.

The transaction log is read for a historical query (``bookmark``): when the message it names
was logged, and where a historical ``sow_and_subscribe`` replays from. A record in a
compressed segment not decompressed yet is read once the journal cache's worker thread has
decompressed it (the query waits meanwhile, its connection busy; the subscription's journal
cursor finds where it starts in its first step, see :mod:`server.delivery.replay`), so the
event loop never decompresses."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from amps_emulator.protocol import reasons
from amps_emulator.protocol.codec import sow_batch
from amps_emulator.protocol.reasons import CommandError
from amps_emulator.server.core.router import Subscription, is_regex_topic
from amps_emulator.server.core.turn import SLICE_SECONDS, from_any_thread
from amps_emulator.server.delivery import replay
from amps_emulator.server.delivery.acks import early as acks_early
from amps_emulator.server.delivery.acks import final as acks_final
from amps_emulator.server.delivery.aggregated import AggregatedSubscription
from amps_emulator.server.delivery.fanout import oof_frame, selected
from amps_emulator.server.delivery.pagination import PageWindow
from amps_emulator.server.handlers import entitle, sow_results
from amps_emulator.server.handlers.sow_aggregate import (
    aggregated_query_steps,
    aggregation_definition,
    refuse_aggregated_replace,
)
from amps_emulator.server.handlers.sow_results import (
    StoredStream,
    begin_results,
    history_cuts,
    run_topic_steps,
    send_records,
)
from amps_emulator.server.handlers.type_features import refuse_unsupported_options
from amps_emulator.server.messaging.registration import compile_filter_for, register_subscription
from amps_emulator.server.services.queue_service import QueueService as Queues
from amps_emulator.server.services.queue_views import QueueAggregation, QueueWatch
from amps_emulator.sow.query import page, parse_order_by, project, selection
from amps_emulator.sow.scan import sorted_page_steps

log = logging.getLogger("amps_emulator.sow")
#: a command's steps (``drive``): None to go on, or a read done off the loop to wait for
Steps = Generator[Future[None] | None, None, Any]

#: records a step of a merged (ordered or paged) result over several topics gathers, sorts
#: or projects
MERGE_CHUNK = 1_000

if TYPE_CHECKING:
    from amps_emulator.protocol.command import Command
    from amps_emulator.server.core.ports import Client, QueueService
    from amps_emulator.server.core.processors import Meter
    from amps_emulator.server.messaging.broker import Broker


class Replacing:
    """A ``sow_and_subscribe`` that replaces a live subscription on the same topic: the
    query returns only the records the old filter did not match (the client has the rest),
    and ``oof`` subscriptions get an out-of-focus message for each record the old filter
    matched and the new one does not."""

    def __init__(self, old_filter: Any, oof: bool) -> None:
        self.old = old_filter  # None: the old subscription matched everything
        self.oof = oof
        self.left: list[tuple[str, Any]] = []  # (topic, record) out of focus
        self.matches = 0  # records the new filter matches

    def split_steps(self, topic: Any, records: list[Any], new_filter: Any
                    ) -> Generator[None, None, list[Any]]:
        """The records to return, :data:`MERGE_CHUNK` records a step; the ones leaving the
        subscription go to :attr:`left`."""
        out = []
        for i, rec in enumerate(records):
            if i and i % MERGE_CHUNK == 0:
                yield
            ctx = topic._ctx_of(rec)
            doc = rec.doc
            was = self.old is None or self.old(doc, ctx)
            now = new_filter is None or new_filter(doc, ctx)
            self.matches += now
            if now and not was:
                out.append(rec)
            elif was and not now and self.oof:
                self.left.append((topic.spec.name, rec))
        return out


def query_steps(broker: Broker, client: Client, cmd: Command, filt: Any,
                on_snapshot: Callable[[float | None], Any] | None = None,
                replacing: Replacing | None = None
                ) -> Generator[Future[None] | None, None, dict[str, int]]:
    """The query as a generator: it sends group_begin / sow frames / group_end and returns
    the counts, yielding between steps of a long scan or a long result. ``on_snapshot`` runs
    once every topic's snapshot is taken, before any result is sent (``sow_and_subscribe``
    registers its subscription there), with the instant a historical query read as of
    (``None``: the current state)."""
    if "grouping" in cmd.opts or "projection" in cmd.opts:  # aggregated query
        return (yield from aggregated_query_steps(broker, client, cmd, filt))
    topic_name = cmd.topic
    if not topic_name:  # (the command refused it already)
        raise CommandError(reasons.INVALID_TOPIC, f"{cmd.command} without a topic")
    queues = broker.queue_service
    queue = queues.get(topic_name) if queues is not None else None
    if queues is not None and queue is not None:
        counts = yield from _query_queue(queues, client, cmd, queue, filt, broker.processors.sow)
        if on_snapshot is not None:
            on_snapshot(None)
        return counts
    topics = broker.sow_service.topics_for(topic_name, "non_regex_topic" in cmd.opts) \
        if broker.sow_service is not None else []
    if not topics:
        raise CommandError(reasons.INVALID_TOPIC, f"{cmd.topic!r} is not a SOW topic")
    opts = cmd.opts
    select = opts.get("select")
    sel_text = select if isinstance(select, str) else None
    sel = selection(sel_text)  # a bad list is refused before anything is sent
    # a regex query reads only the topics the user is entitled to, each with its read filter
    # and its select list
    topics, entitled, sel_texts = entitle.sow_topics(
        client, cmd, topics, [t.spec.name for t in topics], filt, sel_text)
    cuts = yield from history_cuts(broker, cmd, topics, common=on_snapshot is not None)
    batch = sow_results.batch_size(cmd)
    top_n = sow_results.top_n(cmd)
    skip_n = sow_results.count_option(cmd, "skip_n", cmd.skip_n)
    # Several topics (a regex) with an orderby or skip_n: ordered and paged as one result,
    # so each topic returns every match and the selection applies after the merge.
    merged = replacing is not None or (len(topics) > 1 and bool(cmd.orderby or skip_n))
    if merged:  # so is a bad orderby
        parse_order_by(cmd.orderby)
    read = filt
    if replacing is not None:  # read what either filter matches, then split
        old = replacing.old

        read = None if filt is None or old is None else compile_filter_for(
            f"({filt.text}) OR ({old.text})")
    # one topic's plain query: its records go out as the scan reads them (if kept as stored)
    stream = StoredStream(client, topics[0].spec.name, batch, opts, broker.processors.sow) \
        if len(topics) == 1 and not merged and top_n is None and skip_n is None else None
    steps = (topic.query_steps(read if entitled[i] is filt else entitled[i], sow_keys=cmd.sow_keys,
                               order_by=None if merged else cmd.orderby,
                               top_n=None if merged else top_n,
                               skip_n=None if merged else skip_n,
                               select=None if merged else sel_texts[i],
                               history_cut=cuts.get(topic.spec.name) if cuts else None,
                               stored=not merged,  # (only sent: kept as stored if it can)
                               into=None if stream is None else stream.records)
             for i, topic in enumerate(topics))  # (each made as it starts)
    snapshot, each = _snapshots(broker, on_snapshot, [t.spec.name for t in topics],
                                bool(cuts) or replacing is not None, cuts)
    qid, results = yield from run_topic_steps(client, cmd, steps, snapshot, each,
                                              None if stream is None else stream.send_read)
    matches = sum(res.matches for res in results)
    topic_matches = sum(res.topic_matches for res in results)
    if merged:
        if replacing is not None:
            for topic, res in zip(topics, results, strict=True):
                res.records = yield from replacing.split_steps(topic, res.records, filt)
            matches = replacing.matches
        sels = {topic.spec.name: sel if text is sel_text else selection(text)
                for topic, text in zip(topics, sel_texts, strict=True)}
        runs = yield from _merged_runs(topics, results, cmd.orderby, top_n, skip_n, sels)
    else:
        runs, remaining = [], top_n
        for topic, res in zip(topics, results, strict=True):
            records = res.records if remaining is None else res.records[:remaining]
            if remaining is not None:
                remaining -= len(records)
            runs.append((topic.spec.name, records))
    returned = 0
    for k, (name, records) in enumerate(runs):
        if k:
            yield None  # (thousands of topics of a few records each: slices between them too)
        if stream is not None and records is stream.records:
            returned += yield from stream.send_rest(qid)
        else:
            returned += yield from send_records(client, qid, name, records, batch, opts,
                                                broker.processors.sow)
    client.end_group(cmd, qid)
    if replacing is not None:
        for name, rec in replacing.left:
            client.send(oof_frame(name, cmd.sub_id or "", rec.sow_key, reasons.OOF_MATCH,
                                selected(rec.data, sel, rec.doc, broker.bodies.encoder(name)),
                                rec.bookmark or None))
    return {"records_returned": returned, "matches": matches, "topic_matches": topic_matches}


def _snapshots(broker: Broker, on_snapshot: Callable[[float | None], Any] | None,
               keys: list[str], at_once: bool, cuts: dict[str, float] | None
               ) -> tuple[Callable[[], None] | None, Callable[[int], None] | None]:
    """How a query's topics take their snapshots (``run_topic_steps``' ``on_snapshot`` and
    ``each``). A ``sow_and_subscribe`` over several topics (a regex may name thousands)
    does not take them all in one step: it registers its subscription with the first one,
    and withholds from it each other topic's messages until that topic's own snapshot, which
    holds them (:meth:`Router.release`). So no message is lost or seen twice, topic by topic,
    exactly as when every snapshot and the subscription were taken at one instant.
    ``at_once``: all in one step, a historical query (it replays the log from one instant,
    ``cuts``) and one that replaces a subscription (the old one goes at the first snapshot)."""
    if on_snapshot is None:
        return None, None
    if len(keys) < 2 or at_once:
        return (lambda: on_snapshot(min(cuts.values()) if cuts else None)), None
    subs: list[Subscription] = []

    def each(i: int) -> None:
        if i == 0:
            sub = on_snapshot(None)
            subs.append(sub)
            broker.router.withhold(sub, keys[1:])
        else:
            broker.router.release(subs[0], keys[i])

    return None, each


def _merged_runs(topics: list[Any], results: list[Any], orderby: str | None,
                 top_n: int | None, skip_n: int | None, sels: dict[str, Any]
                 ) -> Generator[None, None, list[tuple[str, list[Any]]]]:
    """The matches of several topics ordered and paged as one result, as runs of
    consecutive records of the same topic (one ``sow`` batch names one topic). In steps of
    :data:`MERGE_CHUNK` records: gathering, sorting (sorted parts, then merged up to the
    page's end: :func:`sow.scan.sorted_page_steps`) and projecting each go a slice at a
    time, so a regex over thousands of topics or a large result does not hold the loop."""
    owner: dict[int, str] = {}
    encoders = {t.spec.name: t.encode for t in topics}  # select lists write in each type
    order = parse_order_by(orderby)
    rows: list[Any] = []
    n = 0
    for topic, res in zip(topics, results, strict=True):
        name = topic.spec.name
        for rec in res.records:
            owner[id(rec)] = name
            rows.append((rec, rec.doc) if order is not None else rec)
            n += 1
            if n % MERGE_CHUNK == 0:
                yield
    if order is not None:
        records = yield from sorted_page_steps(rows, order, top_n, skip_n, MERGE_CHUNK)
    else:
        records = page(rows, top_n, skip_n)
    runs: list[tuple[str, list[Any]]] = []
    for i, rec in enumerate(records):
        if i and i % MERGE_CHUNK == 0:
            yield
        name = owner[id(rec)]
        sel = sels.get(name)  # each topic's select list (its entitlement's, then the query's)
        if sel is not None:
            rec = project(rec, sel, encoders[name])
        if runs and runs[-1][0] == name:
            runs[-1][1].append(rec)
        else:
            runs.append((name, [rec]))
    return runs


def _paginated_steps(client: Client, cmd: Command, filt: Any, topic: Any,
                     window: PageWindow, on_snapshot: Callable[[], None], meter: Meter
                     ) -> Generator[None, None, dict[str, int]]:
    """A paginated ``sow_and_subscribe`` (``top_n`` and ``skip_n``): the subscription's
    ``window`` (:mod:`server.delivery.pagination`) starts from every record matching at the snapshot
    (read in steps) and its records are the query's result; the caller applies what changed
    meanwhile (``window.catch_up()``) once the query is acknowledged."""
    batch = sow_results.batch_size(cmd)
    sel = selection(cmd.opts.get("select"))
    # every match, unsorted: the window sorts them (orderby, then SowKey)
    qid, results = yield from run_topic_steps(client, cmd, [topic.query_steps(filt)], on_snapshot)
    result = results[0]
    window.load(result.records)
    by_key = {r.sow_key: r for r in result.records}
    records = [by_key[k] for k in window.window()]
    if sel is not None:
        records = [project(r, sel, topic.encode) for r in records]
    yield from send_records(client, qid, topic.spec.name, records, batch, cmd.opts, meter)
    client.end_group(cmd, qid)
    return {"records_returned": len(records), "matches": result.matches,
            "topic_matches": result.topic_matches}


def drive(broker: Broker, client: Client, cmd: Command,
          steps: Steps, finish: Callable[[Any], None],
          on_failure: Callable[[], None] | None = None, complete: bool = False) -> None:
    """Run ``steps``: the first step now; if it is not done, the rest in later loop steps
    while the connection is busy (see :mod:`server.net.connection`). ``finish(result)`` sends
    the final acks; a failure after the first step fails ``cmd`` (and calls
    ``on_failure``). A failure in the first step propagates to the dispatcher as usual.
    ``complete``: run to the end even if the client goes away (a write already logged)."""
    try:
        waited = next(steps)
    except StopIteration as stop:
        finish(stop.value)
        return
    except BaseException:
        if on_failure is not None:
            on_failure()
        raise
    client.begin_busy()
    _later(broker, waited, client, cmd, steps, finish, on_failure, complete)


def _later(broker: Broker, waited: Future[None] | None, *args: Any) -> None:
    """The next :func:`_step` (``args``: its arguments after ``broker``): in the loop's next
    pass, or once ``waited`` (a read done off the loop: a compressed journal segment being
    decompressed) is done."""
    if waited is None:
        broker.loop.call_soon(_step, broker, *args)
    else:
        waited.add_done_callback(lambda _f: from_any_thread(broker.loop, _step, broker, *args))


def _step(broker: Broker, client: Client, cmd: Command,
          steps: Steps, finish: Callable[[Any], None],
          on_failure: Callable[[], None] | None, complete: bool = False) -> None:
    """Steps of the command for one slice of the loop's time (:data:`SLICE_SECONDS`), then
    the rest in a later pass."""
    if client.closed and not complete:
        steps.close()
        return
    broker.turn.settle()  # the others' replies first
    client._direct = True
    end = time.monotonic() + SLICE_SECONDS
    try:
        while True:
            waited = next(steps)
            if waited is not None:  # a read being done off the loop: the rest once it is
                _later(broker, waited, client, cmd, steps, finish, on_failure, complete)
                return
            if time.monotonic() >= end or (client.closed and not complete):
                break
    except StopIteration as stop:
        finish(stop.value)
    except CommandError as exc:
        log.info("%s: %s failed: %s", client.describe(), cmd.command, exc)
        _failed(client, cmd, exc.reason, on_failure)
    except Exception:
        log.exception("%s: internal error in %r", client.describe(), cmd)
        _failed(client, cmd, reasons.UNKNOWN_ERROR, on_failure)
    else:
        broker.loop.call_soon(_step, broker, client, cmd, steps, finish, on_failure, complete)
        return
    finally:
        client._direct = False
    if not client.closed:
        client.end_busy()


def _failed(client: Client, cmd: Command, reason: str,
            on_failure: Callable[[], None] | None) -> None:
    if on_failure is not None:
        on_failure()
    client.fail(cmd, reason)


def _query_queue(queues: QueueService, client: Client, cmd: Command, queue: Any,
                 filt: Any, meter: Meter) -> Generator[Future[None] | None, None, dict[str, int]]:
    """A ``sow`` query on a queue: the messages that could be delivered now, read-only
    (in steps: a generator)."""
    batch = sow_results.batch_size(cmd)
    records, total = yield from queues.query_records(queue, filt, sow_results.top_n(cmd))
    qid = begin_results(client, cmd, cmd.query_id or cmd.cid or "")
    for start in range(0, len(records), batch):
        chunk = records[start:start + batch]
        data = sow_batch(queue.name, qid, [({"bm": r.bookmark_str}, r.body) for r in chunk])
        meter.give(len(data), len(chunk))
        client.send(data)
        yield None  # (the driver runs steps for a slice of the loop's time: see _step)
    client.end_group(cmd, qid)
    return {"records_returned": len(records), "matches": len(records), "topic_matches": total}


def sow(broker: Broker, client: Client, cmd: Command) -> None:
    acks_early(client, cmd)
    broker.processors.sow.take(0)  # a query received (the sow processor's messages)
    if not cmd.topic:
        raise CommandError(reasons.INVALID_TOPIC, "sow without a topic")
    refuse_unsupported_options(broker.bodies, cmd)
    drive(broker, client, cmd, query_steps(broker, client, cmd, compile_filter_for(cmd.filter)),
          lambda counts: acks_final(client, cmd, processed=False, **counts))


def sow_and_subscribe(broker: Broker, client: Client, cmd: Command) -> None:
    acks_early(client, cmd)
    broker.processors.sow.take(0)
    if not cmd.topic:
        raise CommandError(reasons.INVALID_TOPIC, f"{cmd.command} without a topic")
    sub_id = cmd.sub_id or cmd.query_id or cmd.cid
    if not sub_id:
        raise CommandError(reasons.INVALID_SUBID, f"{cmd.command} needs a sub_id or cid")
    cmd.sub_id = sub_id
    existing = client.subs.get(sub_id)
    if existing is not None and "replace" not in cmd.opts:
        raise CommandError(reasons.SUBID_IN_USE, sub_id)
    refuse_aggregated_replace(existing, cmd)
    filt = compile_filter_for(cmd.filter)
    refuse_unsupported_options(broker.bodies, cmd)
    registered: list[Subscription] = []
    delta = cmd.command == "sow_and_delta_subscribe"
    replacing = None
    if existing is not None and existing.queried and existing.topic == cmd.topic \
            and existing.cursor is None and existing.live is None \
            and existing.queue is None and not cmd.bookmark:
        replacing = Replacing(existing.filter, "oof" in cmd.opts)

    def unsubscribe() -> None:
        for sub in registered:
            if client.subs.get(sub.sub_id) is sub:
                del client.subs[sub.sub_id]
                broker.remove_subscription(sub)

    def finish(counts: dict[str, int]) -> None:
        acks_final(client, cmd, processed=False, **counts)

    topic = broker.sow_service.get(cmd.topic) if broker.sow_service is not None else None
    if "grouping" in cmd.opts or "projection" in cmd.opts:
        _aggregated_subscription(broker, client, cmd, sub_id, filt, delta, topic, registered,
                                 finish, unsubscribe)
        return
    top_n, skip_n = sow_results.top_n(cmd), sow_results.count_option(cmd, "skip_n", cmd.skip_n)
    if top_n is not None and skip_n is not None and topic is not None and (
            not cmd.bookmark or topic.history is None):

        window = PageWindow(None, topic, parse_order_by(cmd.orderby), top_n, skip_n)
        _with_live_state(broker, client, cmd, sub_id, filt, delta, window,
                         lambda subscribe: _paginated_steps(client, cmd, filt, topic, window,
                                                            subscribe, broker.processors.sow),
                         registered, finish, unsubscribe)
        return

    def subscribe(cut: float | None) -> Subscription:
        if cut is not None:  # historical: replay the log from where the SOW state was read
            registered.append(_historical_subscription(broker, client, cmd, sub_id, filt, delta,
                                                       cut))
            return registered[-1]
        # Same loop step as the snapshots: nothing can be published in between. What is
        # published while the query runs is held (busy connection) and goes out after it.
        sub = register_subscription(broker, client, cmd, sub_id, filt, delta=delta)
        sub.queried = True
        registered.append(sub)
        return sub

    drive(broker, client, cmd, query_steps(broker, client, cmd, filt, on_snapshot=subscribe,
                                         replacing=replacing), finish, unsubscribe)


def _aggregated_subscription(broker: Broker, client: Client, cmd: Command, sub_id: str,
                             filt: Any, delta: bool, topic: Any, registered: list[Subscription],
                             finish: Callable[[dict[str, int]], None],
                             unsubscribe: Callable[[], None]) -> None:
    """``sow_and_subscribe`` with grouping/projection: the aggregated query, then the groups
    kept up to date (:mod:`server.delivery.aggregated`)."""
    from amps_emulator.sow.aggregate import parse_aggregation

    spec = parse_aggregation(cmd.opts)
    queues = broker.queue_service
    queue = queues.get(cmd.topic or "") if queues is not None else None
    if (topic is None and queue is None) or spec is None:
        raise CommandError(reasons.INVALID_OPTIONS,
                           "an aggregated subscription needs grouping, projection and one "
                           "SOW topic or queue")
    if cmd.bookmark and (queue is not None or topic.history is not None):
        raise CommandError(reasons.INVALID_OPTIONS,
                           "an aggregated subscription cannot start from a historical bookmark")
    if "select" in cmd.opts:  # (refused by the query too: before following a queue)
        raise CommandError(reasons.INVALID_OPTIONS,
                           "select cannot be used with grouping/projection")
    if queue is None:
        state = AggregatedSubscription(topic, spec, delta)
    else:  # (the queue service is the server's, so are its queues)
        assert isinstance(queues, Queues)
        state = QueueAggregation(QueueWatch.of(queues), queue, spec, delta,
                                 broker.bodies.encoder(queue.key))
    state.definition = aggregation_definition(cmd)

    def failed() -> None:
        unsubscribe()
        state.close()  # (a queue's: it follows the queue from its creation)

    _with_live_state(broker, client, cmd, sub_id, filt, delta, state,
                     lambda subscribe: aggregated_query_steps(broker, client, cmd, filt, state,
                                                              subscribe),
                     registered, finish, failed)


def _with_live_state(broker: Broker, client: Client, cmd: Command, sub_id: str,
                     filt: Any, delta: bool, state: Any,
                     steps: Callable[[Callable[[], None]], Steps],
                     registered: list[Subscription], finish: Callable[[dict[str, int]], None],
                     unsubscribe: Callable[[], None]) -> None:
    """Run a query whose subscription keeps :mod:`server.delivery.live_state` state: the subscription is
    registered at the snapshot (``steps(subscribe)``) with ``state`` as its ``live``; the
    changes made meanwhile are applied after the query's acks."""

    def subscribe() -> None:
        sub = register_subscription(broker, client, cmd, sub_id, filt, delta=delta,
                                    routed=not isinstance(state, QueueAggregation))
        state.sub = sub
        state.delivered = broker.delivered
        sub.live = state
        registered.append(sub)

    def finish_live(counts: dict[str, int]) -> None:
        finish(counts)
        state.catch_up()

    drive(broker, client, cmd, steps(subscribe), finish_live, unsubscribe)


def _historical_subscription(broker: Broker, client: Client, cmd: Command, sub_id: str,
                             filt: Any, delta: bool, cut: float) -> Subscription:
    """The subscription of a historical ``sow_and_subscribe``: a transaction-log cursor from
    the first message logged at or after ``cut``, the instant the SOW state was read as of
    (the SOW records carry their log timestamps, so nothing is missed or repeated)."""

    txlog = broker.txlog
    if txlog is None or not (txlog.recorded(cmd.topic or "") or is_regex_topic(cmd.topic or "")):
        raise CommandError(reasons.TX_LOG_NOT_FOUND,
                           f"a historical {cmd.command} needs {cmd.topic!r} in the transaction log")
    sub = Subscription(client, sub_id, cmd.topic or "", filt, cmd.opts, delta=delta)
    journal = txlog.journal
    # where that is is found by the cursor's first step, which may wait (off the loop) for a
    # compressed segment to be decompressed; until then it holds the whole log
    cursor = replay.Cursor(broker, sub, cmd, journal.first_position, None)
    cursor.since = (replay.at_time(round(cut * 1_000_000)), journal.next_position)
    cursor.want_completed = False  # the query's completed ack is the one
    cursor.remaining = None  # top_n is the query's
    existing = client.subs.get(sub_id)
    if existing is not None:
        broker.remove_subscription(existing)
    client.subs[sub_id] = sub
    sub.cursor = cursor
    txlog.cursors.add(cursor)
    replay.schedule(broker, cursor)  # runs after the query's frames (the connection is busy)
    return sub
