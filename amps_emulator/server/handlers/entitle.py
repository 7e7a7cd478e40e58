"""Entitlement checks at command time (docs/design/beyond-json.md B.3, B.4).

:func:`check` runs before a command's handler, only for a connection whose logon was decided by
the configured security modules (``client.session``): a connection of a server without
Authentication/Entitlement blocks never gets here, so the message path pays nothing.

* reads (``subscribe``, ``delta_subscribe``, ``sow``, ``sow_and_subscribe``,
  ``sow_and_delta_subscribe``) on a literal topic: refused with ``not entitled``, or the
  entitlement's read filter ANDed into the command's filter, so that live delivery, the SOW
  query, a bookmark replay and an aggregated query all see it (the handlers read ``cmd.filter``);
  the two are joined as parsed expressions (``TopicGrant.combined_filter``): a command filter
  that does not parse on its own is refused with ``bad filter``, here as in the handlers;
* writes (``publish``, ``delta_publish``): refused with ``not entitled`` when the topic is not
  writable or the message (for a delta, the delta itself, before any merge) fails the write
  filter; a publish-store publish gets the failure on its persisted ack, so the client's
  failed-write handler sees it;
* ``sow_delete``: refused when the topic is not writable; otherwise only the records the
  write filter admits are deleted, the others stay: a filter delete ANDs the two filters, a
  delete by keys or data asks :func:`delete_filter` and checks each record it names; a
  delete whose topic is a regex checks each SOW topic it matches (:func:`topic_delete_grant`),
  leaving those the user may not write;
* queues: subscribing to a queue (consuming) and acking it (``sow_delete`` on the queue) need
  read; publishing to it needs write on the queue's name.

Refusals are counted in ``broker.denied`` (``reads`` / ``writes``) for the Admin tree.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from amps_emulator.auth import ALLOW, Session, TopicGrant
from amps_emulator.protocol import reasons
from amps_emulator.protocol.reasons import CommandError
from amps_emulator.protocol.topics import display_name, is_regex_topic, qualify
from amps_emulator.server.core.router import ReadEntitlement
from amps_emulator.server.delivery.acks import early as acks_early
from amps_emulator.server.delivery.acks import refused as acks_refused
from amps_emulator.server.messaging.registration import compile_filter_for
from amps_emulator.sow.query import compose_select, parse_select

if TYPE_CHECKING:
    from amps_emulator.protocol.command import Command
    from amps_emulator.server.core.ports import Client
    from amps_emulator.server.messaging.broker import Broker

__all__ = ["check", "attach", "delete_filter", "topic_delete_grant", "compose_select", "sow_topics",
           "READS", "WRITES"]

T = TypeVar("T")

READS = frozenset({"subscribe", "delta_subscribe", "sow", "sow_and_subscribe",
                   "sow_and_delta_subscribe"})
WRITES = frozenset({"publish", "delta_publish"})


def check(broker: Broker, client: Client, session: Session, cmd: Command) -> bool:
    """Apply the session's entitlements to ``cmd`` (its filter may be narrowed). False: the
    command was refused and answered here; raises ``CommandError(not entitled)`` for the usual
    failure ack."""
    name = cmd.command
    topic = cmd.topic
    if not topic:
        return True  # the handler reports the missing topic
    perms = session.permissions
    mt = client.message_type
    if name in READS:
        try:
            grant = perms.check_subscribe(mt, topic, regex=_regex(cmd, topic))
        except CommandError:
            _denied(broker, client, "reads")
            raise
        if grant is not None:
            if grant.filter_text is not None:
                cmd.filter = grant.combined_filter(cmd.filter)
            if grant.select is not None:
                _entitlement_select(cmd, grant)
        return True
    if name in WRITES:
        grant = perms.write_grant(mt, topic)
        if grant is not None and (grant.filter_text is None
                                  or grant.admits(broker.bodies.decode_typed(cmd.body, mt))):
            return True
        _denied(broker, client, "writes")
        reason = reasons.NOT_ENTITLED
        seq = cmd.seq  # an int once parsed (Command.__post_init__)
        if isinstance(seq, int) and "persisted" in cmd.acks:
            acks_early(client, cmd)
            if "processed" in cmd.acks:
                client.ack(cmd, "processed", "failure", reason)
            acks_refused(client, cmd, seq, reason, broker.txlog)
            return False
        raise CommandError(reason, f'User "{perms.user}" not entitled to topic "{topic}".')
    if name == "sow_delete":
        queues = broker.queue_service
        if queues is not None and queues.get(topic) is not None:
            try:  # on a queue, sow_delete is an ack (or a cancel/expire): reading lets one ack
                perms.check_queue_ack(mt, topic)
            except CommandError:
                _denied(broker, client, "reads")
                raise
            return True
        if _regex(cmd, topic) and (broker.sow_service is None
                                   or broker.sow_service.get(qualify(topic, mt)) is None):
            return True  # a regex delete: the handler asks topic_delete_grant() per topic
        try:
            grant = perms.check_write(mt, topic)
        except CommandError:
            _denied(broker, client, "writes")
            raise
        if grant.filter_text is not None and cmd.filter:
            cmd.filter = grant.combined_filter(cmd.filter)
        # by keys or data: the handler asks delete_filter() and keeps the records it refuses
    return True


def topic_delete_grant(client: Client, topic: str) -> TopicGrant | None:
    """For a ``sow_delete`` whose topic is a regex, each SOW topic ``topic`` (a key) it
    matches, as AMPS checks them: the write grant (its filter, if any, applies to each
    record), or None: the user may not write that topic, which the delete then leaves."""
    session = client.session
    if session is None:
        return ALLOW
    return session.permissions.write_grant(client.message_type, display_name(topic))


def delete_filter(client: Client, topic: str) -> TopicGrant | None:
    """The write grant whose filter each record a ``sow_delete`` by keys or data must pass
    (AMPS deletes the records it admits and keeps the others); None: no filter applies."""
    session = client.session
    if session is None:
        return None
    grant = session.permissions.write_grant(client.message_type, display_name(topic))
    if grant is None or grant.filter_text is None:
        return None
    return grant


def _regex(cmd: Command, topic: str) -> bool:
    """Whether a read command names a regex topic (``non_regex_topic``: a name, whatever it holds)."""
    return is_regex_topic(topic) and "non_regex_topic" not in cmd.opts


def sow_topics(client: Client, cmd: Command, topics: list[T], names: list[str],
               read: Callable[..., bool] | None, select: str | None = None
               ) -> tuple[list[T], list[Callable[..., bool] | None], list[str | None]]:
    """A SOW query over a regex topic: the topics the user may read, each with the query's
    filter ANDed with that topic's read filter, and the select list its records go out with
    (the topic's entitlement list, then the query's ``select``). A literal topic's are in
    ``cmd.filter`` and the ``select`` option already."""
    session = client.session
    if session is None or not cmd.topic or not _regex(cmd, cmd.topic):
        return topics, [read] * len(topics), [select] * len(topics)
    mt = client.message_type
    kept: list[T] = []
    reads: list[Callable[..., bool] | None] = []
    selects: list[str | None] = []
    for topic, name in zip(topics, names, strict=True):
        grant = session.permissions.read_grant(mt, display_name(name))
        if grant is None:
            continue  # skipped silently, as deliveries are
        kept.append(topic)
        if grant.filter_text is None:
            reads.append(read)
        else:
            reads.append(compile_filter_for(grant.combined_filter(cmd.filter)))
        mine = parse_select(grant.select) if grant.select is not None else None
        selects.append(select if mine is None else compose_select(mine, parse_select(select)).text)
    return kept, reads, selects


def _denied(broker: Broker, client: Client, kind: str) -> None:
    broker.denied[kind] += 1
    if kind == "reads":
        client.denied_reads += 1
    else:
        client.denied_writes += 1


def attach(client: Client, session: Session, cmd: Command) -> None:
    """After a read command's handler: its subscription (if it made one) learns what the
    subscriber may read, when that is more than everything: a regex topic's concrete topics
    are checked on delivery, and an update leaving the read filter is an OOF ``entitlement``."""
    sub_id = cmd.sub_id  # the handler set it (the command's sub_id, query_id or cid)
    sub = client.subs.get(str(sub_id)) if sub_id is not None else None
    if sub is None or sub.entitlement is not None:
        return
    mt = client.message_type
    perms = session.permissions
    if sub.regex is not None:
        sub.entitlement = ReadEntitlement(perms, mt, True)
        return
    grant = perms.read_grant(mt, display_name(sub.topic))
    if grant is not None and grant.filter_text is not None:
        sub.entitlement = ReadEntitlement(perms, mt, False)
        if sub.live is not None:  # a paginated window or aggregated groups: OOF reasons
            sub.live.entitlement = sub.entitlement


def _entitlement_select(cmd: Command, grant: TopicGrant) -> None:
    """The entitlement's select list goes before the subscriber's (``select`` option)."""
    mine = parse_select(grant.select)
    if mine is None:
        return
    opts = cmd.opts
    theirs = opts.get("select")
    own = parse_select(theirs) if isinstance(theirs, str) else None
    opts["select"] = compose_select(mine, own).text
