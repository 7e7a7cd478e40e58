"""Runs of plain publishes: the frames a publisher sends back to back, handled as one.

A publisher writes its publishes back to back, so one read carries dozens to hundreds of
them, and for most the whole work is: journal it, count it, maybe ack it. :class:`PublishRuns`
takes the frames of a read from a given one on while they are *plain publishes*: the header
the official clients write for ``publish(topic, data)`` (``c``, ``t``, and maybe ``cid``,
``s`` and ``a=persisted``, which a publish store asks for), to a topic that is not a queue's
own name, that no observer refuses and that does not enrich its messages. :func:`plain_run`
cuts a run of one topic out of the frames in one call (compiled in ``_speedups``; its twin
reads each header with ``codec.plain_publish``). A run is published with one call
(:func:`server.messaging.message_path.publish_plain`): one journal call for its records, then the fan-out
and the observers per message when anything subscribes to or listens on the topic. Its
persisted acks wait in the transaction log's FIFO as a single publish's do, added in one call
(``TxLog.wait_persisted_run``).

The first frame that is not such a publish ends the run and goes through
``Server.dispatch`` like any command, and so does a publish the run cannot take as it is
(a republished ``s``, a log that refuses writes): the general path handles those, and the
result is what dispatching each frame would have given. Connections with a security session
(entitlements are checked per command) and not yet logged on never take this path.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from itertools import islice
from typing import TYPE_CHECKING, cast

from amps_emulator import accel
from amps_emulator.protocol.bodies import decode_json_run
from amps_emulator.protocol.codec import Payload, plain_publish
from amps_emulator.protocol.reasons import CommandError
from amps_emulator.protocol.topics import TYPE_SEP, qualify, valid_topic_name
from amps_emulator.server.messaging.message_path import (
    LARGE_BODY,
    RunRefused,
    check_writable,
    publish_plain,
)

if TYPE_CHECKING:
    from amps_emulator.server.core.ports import Client
    from amps_emulator.server.messaging.broker import Broker
    from amps_emulator.sow import Topic

log = logging.getLogger("amps_emulator.server")

#: (the server's key of the topic, whether it is delivered one by one, its SOW topic) for a
#: topic a run can take; None for one it cannot
_Plan = tuple[str, bool, "Topic | None"] | None


class PublishRuns:
    """The plain-publish runs of every connection of one server (see the module docstring)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def __call__(self, client: Client, payloads: list[Payload], start: int) -> int:
        """Publish the plain publishes at ``payloads[start:]`` up to the first frame that is
        not one, or that a run cannot take; return that frame's index (``start``: none)."""
        broker = self.broker
        client_name = client.client_name or ""
        named = client.client_name is not None
        last = broker.client_seqs.get(client_name) if named else None
        plans: dict[str, _Plan] = {}
        i = start
        n = len(payloads)
        if max(map(len, islice(payloads, start, None)), default=0) > LARGE_BODY:
            # a large publish goes the general way, in stages (handlers.publish): the run
            # ends before it
            n = next(k for k in range(start, n) if len(payloads[k]) > LARGE_BODY)
            payloads = payloads[:n]
        # (a frame the decoder assembled apart is larger than LARGE_BODY: all these are bytes)
        frames = cast("list[bytes]", payloads)
        while i < n:
            run = plain_run(frames, i, named, last)
            if run is None:
                break
            stop, topic, bodies, seqs, acked = run
            if topic in plans:
                plan = plans[topic]
            else:
                plan = plans[topic] = self._plan(client, topic)
            if plan is None:
                break
            done = self._publish(client, plan, client_name, bodies, seqs or [], acked)
            if done < len(bodies):
                return i + done
            if seqs:
                last = seqs[-1]  # (the de-duplication mark moves as each is published)
            i = stop
        return i

    def _plan(self, client: Client, topic: str) -> _Plan:
        """How a run publishes to ``topic`` (as the client named it), or None when it cannot:
        a queue's own name, a topic a observer refuses (a view's), a recorded topic while the
        log refuses writes, a SOW topic whose disk is full or that enriches its messages
        (each is rewritten before it is journalled: ``publish_message`` does it), a name the
        server refuses (a control character in it)."""
        if not valid_topic_name(topic):
            return None
        broker = self.broker
        if client.message_type != "json":
            topic = qualify(topic, client.message_type)
        sow = broker.sow_service
        sow_topic = sow.get(topic) if sow is not None else None
        if sow_topic is not None and ((sow is not None and sow.refusing(topic))
                                      or sow_topic.enrichment is not None):
            return None
        queues = broker.queue_service
        if queues is not None and queues.publish_target(topic) != topic:
            return None
        txlog = broker.txlog
        if txlog is not None and txlog.failed is not None and txlog.recorded(topic):
            return None
        try:
            check_writable(broker, topic)
        except CommandError:
            return None
        observers = broker.observers
        deliver = sow_topic is not None or bool(broker.router.match(topic)) or any(
            observer.covers(topic) for observer in observers)
        return topic, deliver, sow_topic

    def _publish(self, client: Client, plan: _Plan, client_name: str, bodies: list[bytes],
                 seqs: list[int], acked: list[int]) -> int:
        """Publish one run of one topic and register the persisted acks it asked for (the
        indexes ``acked``); how many of ``bodies`` were published: all, or those before the
        first that a SOW topic refuses (no SowKey), or none when the log cannot take a run
        now. The rest go the general way."""
        if plan is None:  # (a run only grows under a plan)
            return 0
        broker = self.broker
        topic, deliver, sow_topic = plan
        keyed = None
        if sow_topic is not None:  # each body's document and SowKey, up to the first without
            if TYPE_SEP not in topic:  # (as publish_message reads a json body)
                docs = decode_json_run(bodies)
            else:
                decode = broker.bodies.decode
                docs = [decode(body, topic) for body in bodies]
            keyed = sow_topic.keyed(docs)
            if len(keyed) < len(bodies):
                n = len(keyed)
                if not n:
                    return 0
                bodies, seqs = bodies[:n], seqs[:n]
                acked = [k for k in acked if k < n]
        try:
            recs = publish_plain(broker, topic, deliver, client_name, bodies, seqs or None,
                                 sow_topic, keyed)
            broker.processors.external.received_bytes += sum(map(len, bodies))
            if seqs:
                broker.client_seqs[client_name] = seqs[-1]
            if acked:
                txlog = broker.txlog
                if txlog is None:
                    client.note_persisted(seqs[acked[-1]])  # nothing is journalled: conflated now
                elif len(acked) == len(bodies):
                    txlog.wait_persisted_run(client, seqs, recs)
                else:
                    for k in acked:
                        txlog.wait_persisted(client, seqs[k],
                                             None if recs is None else recs[k].position)
        except RunRefused:
            return 0
        except Exception:  # a bug must not take the server down: what is journalled stays
            log.exception("%s: internal error publishing %d messages to %s", client.describe(),
                          len(bodies), topic)
        return len(bodies)


_RunParts = tuple[int, str, list[bytes], list[int] | None, list[int]]


def plain_run_py(payloads: list[bytes], start: int, named: bool, last: int | None
                 ) -> _RunParts | None:
    """The run of plain publishes to one topic at ``payloads[start:]``: the frames whose header
    ``codec.plain_publish`` reads, with the first one's topic (not empty), no ``a`` or
    ``a=persisted`` with an ``s``, and either no ``s`` or an ``s`` on each, each above the one
    before and above ``last`` (None: no bound), none unless ``named`` (the connection logged
    on with a client name). Returns the index of the first frame not taken, the topic, the
    bodies, their ``s`` (None: none has one) and the indexes in the run of those that asked
    for a persisted ack; None when ``payloads[start]`` starts no run. The pure-Python twin
    of ``_speedups.plain_run``."""
    topic: str | None = None
    bodies: list[bytes] = []
    seqs: list[int] = []
    acked: list[int] = []
    with_s = False
    i = start
    for i in range(start, len(payloads)):  # (after the loop: the first frame not taken)
        payload = payloads[i]
        parts = plain_publish(payload)
        if parts is None:
            break
        end, t, ack_type, _cid, seq = parts
        if not t or (ack_type is not None and (ack_type != "persisted" or seq is None)):
            break
        if topic is None:
            topic, with_s = t, seq is not None
        elif t != topic or (seq is not None) != with_s:
            break
        if seq is not None:
            if not named or (last is not None and seq <= last):
                break  # a republished message: one by one
            last = seq
            seqs.append(seq)
            if ack_type is not None:
                acked.append(len(bodies))
        bodies.append(payload[end:])
    else:
        i = len(payloads)
    if topic is None or not bodies:
        return None
    return i, topic, bodies, seqs if with_s else None, acked


#: the run reader of :class:`PublishRuns`: compiled when built, else its pure twin
plain_run: Callable[[list[bytes], int, bool, int | None], _RunParts | None] = plain_run_py
if accel.COMPILED:
    from amps_emulator._speedups import plain_run
