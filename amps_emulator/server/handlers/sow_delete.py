"""The ``sow_delete`` command: by filter, by SowKeys or by data, on one topic or every topic a
regex names; on a queue, the acknowledgement of delivered messages."""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from amps_emulator.journal import RecordKind
from amps_emulator.protocol import reasons
from amps_emulator.protocol.filter import MessageContext
from amps_emulator.protocol.reasons import CommandError
from amps_emulator.protocol.topics import display_name, split_topic
from amps_emulator.server.core.router import is_regex_topic
from amps_emulator.server.delivery.acks import early as acks_early
from amps_emulator.server.delivery.acks import final as acks_final
from amps_emulator.server.delivery.acks import refused as acks_refused
from amps_emulator.server.handlers import entitle
from amps_emulator.server.handlers.sow import drive
from amps_emulator.server.messaging.message_path import check_writable, removed
from amps_emulator.server.messaging.registration import compile_filter_for
from amps_emulator.sow.keys import parse_sow_keys

#: topics of a regex delete whose grants one step reads
PLAN_CHUNK = 256

if TYPE_CHECKING:
    from amps_emulator.auth import TopicGrant
    from amps_emulator.protocol.command import Command
    from amps_emulator.server.core.ports import Client
    from amps_emulator.server.messaging.broker import Broker
    from amps_emulator.sow import Topic


def sow_delete(broker: Broker, client: Client, cmd: Command) -> None:
    acks_early(client, cmd)
    topic_name = cmd.topic
    if not topic_name:
        raise CommandError(reasons.INVALID_TOPIC, "sow_delete without a topic")
    check_writable(broker, topic_name)  # not a view's own topic
    queues = broker.queue_service
    queue = queues.get(topic_name) if queues is not None else None
    if queues is not None and queue is not None:
        # (by filter, in steps: the client's later commands and these acks wait for it; done
        # even if the client leaves meanwhile, as a delete that does not wait is)
        drive(broker, client, cmd, queues.ack(queue, client, cmd), lambda acked: _delete_acks(
            client, cmd, {"records_deleted": acked, "matches": acked,
                          "topic_matches": queue.engine.depth + acked}), complete=True)
        return
    sow_service = broker.sow_service
    topic = sow_service.get(topic_name) if sow_service is not None else None
    if sow_service is not None and topic is None and is_regex_topic(split_topic(topic_name)[0]) \
            and "non_regex_topic" not in cmd.opts:
        matched = sow_service.topics_for(topic_name)
        if matched:
            _delete_across(broker, client, cmd, matched)
            return
    if sow_service is None or topic is None:
        if cmd.filter:
            compile_filter_for(cmd.filter)  # a bad filter is reported as such
        raise CommandError(reasons.INVALID_TOPIC, f"{topic_name!r} is not a SOW topic")
    headers: dict[str, str] = {}
    if cmd.filter:
        filt = compile_filter_for(cmd.filter)
        headers["filter"] = cmd.filter
    elif cmd.sow_keys:
        headers["sow_keys"] = cmd.sow_keys
    elif cmd.body:
        key = topic.key_for(topic.decode_body(cmd.body), cmd.sow_key)  # bad sow key before journalling
        if entitle.delete_filter(client, topic_name) is not None:
            headers["sow_keys"] = key  # narrowed to the admitted record below
    else:
        raise CommandError(reasons.MISSING_FIELDS, "sow_delete needs a filter, sow_keys or data")
    if "sow_keys" in headers:
        grant = entitle.delete_filter(client, topic_name)
        if grant is not None:  # the records the write filter refuses stay: not in the delete
            headers["sow_keys"] = _admitted(topic, topic_name, headers["sow_keys"], grant)
    if sow_service.refusing(topic_name):  # its disk is full
        acks_refused(client, cmd, cmd.seq, reasons.TX_STORE_FAILURE, broker.txlog)
        return
    txlog = broker.txlog
    position = 0
    at = None  # when the deletion happened: the time it was logged, else now
    if txlog is not None and txlog.recorded(topic_name):
        logged = txlog.append_command(client, cmd, RecordKind.SOW_DELETE, headers)
        position, at = logged.position, logged.timestamp / 1_000_000
    broker.turn.request()  # the SOW commits at the end of this turn
    if "filter" in headers:  # in steps when it matches many records
        steps = _filtered_delete(broker, topic_name,
                                 topic.delete_steps(filt, position=position, now=at))
        drive(broker, client, cmd, steps, lambda result: _delete_acks(
            client, cmd, {"records_deleted": result.records_deleted, "matches": result.matches,
                          "topic_matches": result.topic_matches}, broker, position),
              complete=True)
        return
    if "sow_keys" in headers:
        result = topic.delete_by_keys(headers["sow_keys"], position=position, now=at)
    else:
        result = topic.delete_by_data(cmd.body, sow_key=cmd.sow_key, position=position, now=at)
    removed(broker, topic_name, result.records, reasons.OOF_DELETED)
    _delete_acks(client, cmd, {"records_deleted": result.records_deleted,
                               "matches": result.matches, "topic_matches": result.topic_matches},
                 broker, position)


def _delete_across(broker: Broker, client: Client, cmd: Command, topics: list[Topic]) -> None:
    """A ``sow_delete`` whose topic is a regex: the delete applies to each SOW topic it
    matches that the user may write, under that topic's write filter (AMPS checks them topic
    by topic, and the transaction log keeps one delete per topic with the filter or keys it
    applied). One set of acks counts them all.

    A regex may name thousands of topics, so all of it runs in steps (:func:`drive`): first
    the plan (each topic's grant), a slice of topics at a time, then topic after topic its
    delete, journalled and its snapshot taken when that topic's turn comes, then deleted in
    steps as on one topic. A publish to a topic whose delete has not come yet is in the log
    before that delete, so the delete applies to it: the SOW ends as a replay of the log
    gives it. The client's own later commands wait for the whole of it (busy connection)."""
    sow_service = broker.sow_service
    assert sow_service is not None  # (the caller found the topics there)
    if cmd.filter:
        compile_filter_for(cmd.filter)  # a bad filter is refused before anything is deleted
    elif not cmd.sow_keys and not cmd.body:
        raise CommandError(reasons.MISSING_FIELDS, "sow_delete needs a filter, sow_keys or data")
    last = [0]  # the position of the last delete journalled (for the persisted ack)

    def finish(counts: dict[str, int] | None) -> None:
        if counts is None:  # a disk is full
            acks_refused(client, cmd, cmd.seq, reasons.TX_STORE_FAILURE, broker.txlog)
        else:
            _delete_acks(client, cmd, counts, broker, last[0])

    drive(broker, client, cmd, _across_steps(broker, client, cmd, topics, last), finish,
          complete=True)


def _across_steps(broker: Broker, client: Client, cmd: Command, topics: list[Topic],
                  last: list[int]) -> Generator[None, None, dict[str, int] | None]:
    """:func:`_delete_across` as steps; its counts (None: refused, a disk is full)."""
    sow_service = broker.sow_service
    assert sow_service is not None
    plans: list[tuple[Topic, dict[str, str]]] = []
    for i, topic in enumerate(topics):
        if i and i % PLAN_CHUNK == 0:
            yield
        name = topic.spec.name
        grant = entitle.topic_delete_grant(client, name)
        if grant is None:
            continue  # not writable by this user: left as it is
        headers: dict[str, str] = {}
        if cmd.filter:
            headers["filter"] = grant.combined_filter(cmd.filter) or cmd.filter
        else:
            keys = cmd.sow_keys or topic.key_for(topic.decode_body(cmd.body), cmd.sow_key)
            headers["sow_keys"] = keys if grant.filter_text is None \
                else _admitted(topic, name, keys, grant)
        plans.append((topic, headers))
    if any(sow_service.refusing(topic.spec.name) for topic, _ in plans):  # a disk is full
        return None
    txlog = broker.txlog
    counts = {"records_deleted": 0, "matches": 0, "topic_matches": 0}
    for k, (topic, headers) in enumerate(plans):
        if k:
            yield  # (thousands of topics of a record or two each: a slice holds many)
        name = topic.spec.name
        pos, at = 0, None
        if txlog is not None and txlog.recorded(name):
            logged = txlog.append(name, b"", RecordKind.SOW_DELETE,
                                  client_name=client.client_name or "", client_seq=cmd.seq,
                                  correlation_id=cmd.correlation_id,
                                  headers={**headers, "o": cmd.options} if cmd.options else headers)
            pos, at = logged.position, logged.timestamp / 1_000_000
            last[0] = pos
        broker.turn.request()  # the SOW commits at the end of this turn
        if "sow_keys" in headers:
            result = topic.delete_by_keys(headers["sow_keys"], position=pos, now=at)
            removed(broker, name, result.records, reasons.OOF_DELETED)
        else:
            result = yield from _filtered_delete(
                broker, name, topic.delete_steps(compile_filter_for(headers["filter"]),
                                                 position=pos, now=at))
        counts["records_deleted"] += result.records_deleted
        counts["matches"] += result.matches
        counts["topic_matches"] += result.topic_matches
    return counts


def _filtered_delete(broker: Broker, name: str, deleting: Generator[list[Any], None, Any]
                     ) -> Generator[None, None, Any]:
    """A topic's delete by filter (``topic.delete_steps``) in steps, each step's removed
    records reported (out-of-focus messages); its result."""
    reported = 0
    while True:
        try:
            deleted = next(deleting)
        except StopIteration as stop:
            result = stop.value
            if reported < result.records_deleted:  # deleted at once
                removed(broker, name, result.records, reasons.OOF_DELETED)
            return result
        if deleted:
            reported += len(deleted)
            removed(broker, name, deleted, reasons.OOF_DELETED)
            broker.turn.request()
        yield


def _admitted(topic: Topic, topic_name: str, sow_keys: str, grant: TopicGrant) -> str:
    """The keys of ``sow_keys`` naming a record the write grant's filter admits (AMPS checks
    each record a delete would remove), as the ``sow_keys`` the delete then journals."""
    name = display_name(topic_name)
    kept: list[str] = []
    for skey in parse_sow_keys(sow_keys):
        rec = topic.get(skey)
        if rec is None:
            continue  # nothing to delete
        ctx = MessageContext(topic=name, bookmark=rec.bookmark or None, sow_key=skey)
        if grant.admits(rec.doc_by(topic.decode_body), ctx):
            kept.append(skey)
    return ",".join(kept)


def _delete_acks(client: Client, cmd: Command, counts: dict[str, int],
                 broker: Broker | None = None, position: int = 0) -> None:
    if "processed" in cmd.acks:
        client.ack(cmd, "processed")
    if "persisted" in cmd.acks and cmd.seq is not None:
        txlog = broker.txlog if broker is not None else None
        if txlog is not None:
            txlog.wait_persisted(client, cmd.seq, position or None)
        else:
            client.note_persisted(cmd.seq)
    acks_final(client, cmd, processed=False, **counts)
