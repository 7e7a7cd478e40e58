"""The ``publish`` and ``delta_publish`` commands: de-duplication by the publisher's sequence
number, queue targets, the message path, and the acks the publisher asked for."""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING

from amps_emulator.journal import DuplicatePublish
from amps_emulator.protocol import reasons
from amps_emulator.protocol.reasons import CommandError
from amps_emulator.server.core.message import UNDECODED
from amps_emulator.server.delivery.acks import early as acks_early
from amps_emulator.server.delivery.acks import refused as acks_refused
from amps_emulator.server.handlers.sow import drive
from amps_emulator.server.messaging.message_path import (
    LARGE_BODY,
    check_writable,
    decode_ahead,
    prepare_ahead,
    publish_message,
)

if TYPE_CHECKING:
    from amps_emulator.protocol.command import Command
    from amps_emulator.server.core.ports import Client
    from amps_emulator.server.messaging.broker import Broker



# -- publish ------------------------------------------------------------------------------

def publish(broker: Broker, client: Client, cmd: Command) -> None:
    topic = cmd.topic
    if not topic:
        raise CommandError(reasons.INVALID_TOPIC, "publish without a topic")
    acks = cmd.acks
    if acks:
        acks_early(client, cmd)
    seq = cmd.seq
    last = None
    if seq is not None and client.client_name is not None:
        last = broker.client_seqs.get(client.client_name)
        if last is not None and seq <= last:
            # A republished message from a publish store: drop it, but still ack it.
            _publish_acks(broker, client, cmd, seq, None)
            return
        broker.client_seqs[client.client_name] = seq
    if len(cmd.body) > LARGE_BODY:
        drive(broker, client, cmd, _in_stages(broker, client, cmd, topic, seq, last),
              lambda _: None, complete=True)  # (read whole: published even if it goes away)
        return
    _guarded(broker, client, cmd, topic, seq, last, UNDECODED)


def _in_stages(broker: Broker, client: Client, cmd: Command, topic: str, seq: int | None,
               last: int | None) -> Generator[None, None, None]:
    """A large body's publish, each part in a loop pass of its own (the pass that read the
    frame copied it already): the decode, the copies that can be made ahead (a SOW value),
    then the publish itself. Meanwhile the connection is busy (its next commands wait, see
    ``handlers.sow.drive``); nothing about the message is journalled or stored before the
    last part, which does it all as a small one would."""
    yield
    queues = broker.queue_service
    target = queues.publish_target(topic) if queues is not None else topic
    doc = decode_ahead(broker, target, cmd.body)
    yield
    prepared = prepare_ahead(broker, target, cmd.body, doc, client.client_name or "", seq)
    try:
        yield
        _guarded(broker, client, cmd, topic, seq, last, doc)
    finally:  # (a value built ahead that no store took, the publish refused: not kept)
        sow = broker.sow_service
        sow_topic = sow.get(target) if prepared and sow is not None else None
        if sow_topic is not None:
            sow_topic.drop_prepared()


def _guarded(broker: Broker, client: Client, cmd: Command, topic: str, seq: int | None,
             last: int | None, doc: object) -> None:
    try:
        _publish(broker, client, cmd, topic, cmd.acks, seq, doc)
    except BaseException:
        # Not stored: its sequence must not mark a later resend of it as a duplicate.
        if seq is not None and client.client_name is not None \
                and broker.client_seqs.get(client.client_name) == seq \
                and not _journaled(broker, client.client_name, seq):
            if last is None:
                broker.client_seqs.pop(client.client_name, None)
            else:
                broker.client_seqs[client.client_name] = last
        raise


def _journaled(broker: Broker, client_name: str, seq: int) -> bool:
    txlog = broker.txlog
    return txlog is not None and txlog.is_open \
        and txlog.journal.last_seq_for_client(client_name, persisted=False) >= seq


def _publish(broker: Broker, client: Client, cmd: Command, topic: str,
             acks: frozenset[str], seq: int | None, doc: object) -> None:
    if broker.queue_service is not None:
        topic = broker.queue_service.publish_target(topic)  # a queue's own name: where it feeds from
    txlog = broker.txlog
    if txlog is not None and txlog.failed is not None and txlog.recorded(topic):
        txlog.refuse(client, cmd, seq)  # a failure ack, no log line per publish
        return
    if broker.sow_service is not None and broker.sow_service.refusing(topic):  # its disk is full
        acks_refused(client, cmd, seq, reasons.TX_STORE_FAILURE, broker.txlog)
        return
    check_writable(broker, topic)  # not a view's own topic
    try:
        # positional: (broker, topic, body, delta, client_name, client_seq, correlation_id,
        # sow_key, expiration, headers, client, doc)
        position = publish_message(
            broker, topic, cmd.body, cmd.command == "delta_publish", client.client_name or "",
            seq, cmd.correlation_id, cmd.sow_key, cmd.expiration,
            {"o": cmd.options} if cmd.options else None, client, doc)
        broker.processors.external.received_bytes += len(cmd.body)
    except DuplicatePublish:
        # held already (replication brought it): dropped and acked as a republished one is
        if acks:
            _publish_acks(broker, client, cmd, seq, None)
        return
    except CommandError as exc:
        if seq is None or "persisted" not in acks:
            raise
        # A publish-store message that cannot be stored (e.g. bad sow key): the failure goes
        # on its persisted ack, with its sequence, to the client's failed-write handler.
        if "processed" in acks:
            client.ack(cmd, "processed", "failure", exc.reason)
        acks_refused(client, cmd, seq, exc.reason, broker.txlog)
        return
    if acks:
        _publish_acks(broker, client, cmd, seq, position)


def _publish_acks(broker: Broker, client: Client, cmd: Command, seq: int | None,
                  position: int | None) -> None:
    acks = cmd.acks
    if "processed" in acks:
        client.ack(cmd, "processed")
    if "persisted" in acks:
        if seq is None:
            client.ack(cmd, "persisted")
        elif broker.txlog is not None:
            broker.txlog.wait_persisted(client, seq, position)
        else:
            client.note_persisted(seq)
    if "completed" in acks:
        client.ack(cmd, "completed")
    if "stats" in acks:
        client.ack(cmd, "stats")
