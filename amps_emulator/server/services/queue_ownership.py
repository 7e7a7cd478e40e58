"""Replicated queues in the server: ownership, transfers and the queue records that replicate
(docs/design/replication.md, section 4).

A distributed ``Queue`` or a ``GroupLocalQueue`` on an instance that replicates holds every
message on every instance, and only the message's owner delivers it (:class:`queues.ownership.
Ownership`, one per such queue, on :attr:`ConfiguredQueue.ownership`). This module is what moves
messages between owners and keeps the instances' copies of the queue in step:

* **Removals replicate.** The queue journals its acks, expiries and at-most-once sends with
  the message's bookmark; those records travel over the replication links (``link.QUEUE_KINDS``)
  and :meth:`QueueReplication.apply_replicated` removes the message here by bookmark.
* **Transfers on demand.** While this instance has subscriptions with room and messages owned
  elsewhere have waited longer than they usually take to be acked, it asks their owner
  (``repl_qreq`` over the link the owner replicates to us on). The owner grants a request for a
  message it owns that is still available (no local subscription could take it: it delivers
  eagerly) and that it has not given away already, by journaling a ``Transfer`` record; that
  record replicates, and the instance named in it may deliver the message. Nobody else does.
* **Proxied transfer** (Admin ``enable_proxied_transfer``, the ``amps-action-do-enable-proxied-
  transfer`` action through :class:`server.core.ports.ProxiedTransferControl`): this instance
  claims, for its own subscriptions, messages whose owner is not connected, and grants
  others' requests for them, journaling the transfer the same way.
  Duplicates are possible if the owner is alive after all: AMPS documents the same risk.
* **Group local queues** carry their identity (``GroupLocalQueueDomain``, else the instance's
  ``Group``) on their records: an instance ignores the records of a same-named queue of another
  domain.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import msgspec

from amps_emulator.journal import RecordKind
from amps_emulator.journal.identity import path_of
from amps_emulator.protocol import reasons
from amps_emulator.protocol.reasons import CommandError
from amps_emulator.queues import Ack, Expire, Lease, QueueEngine, Transfer, decode_event
from amps_emulator.queues.ownership import Ownership

if TYPE_CHECKING:
    from amps_emulator.config.model import Queue
    from amps_emulator.journal.record import JournalRecord
    from amps_emulator.queues import Action, QueueEvent
    from amps_emulator.server.core.ports import ServiceHost

log = logging.getLogger("amps_emulator.queues")

#: the record header naming a group local queue's identity (its domain, or its Group)
DOMAIN_HEADER = "x-emu-queue-domain"

_TRANSFER = int(RecordKind.QUEUE_TRANSFER)
_BATCH = int(RecordKind.QUEUE_BATCH)
_unpack = msgspec.msgpack.Decoder(list[tuple[int, bytes]]).decode


class SharedQueue(Protocol):
    """One queue as this module reads it (:class:`server.services.queue_service.ConfiguredQueue`)."""

    @property
    def name(self) -> str: ...

    @property
    def cfg(self) -> Queue: ...

    @property
    def engine(self) -> QueueEngine: ...

    @property
    def subs(self) -> Mapping[Any, object]: ...

    @property
    def ownership(self) -> Ownership | None: ...

    @property
    def domain(self) -> str | None: ...


Q = TypeVar("Q", bound=SharedQueue)


class SharedQueues(Protocol[Q]):
    """The queue service as this module uses it (:class:`server.services.queue_service.QueueService`)."""

    @property
    def broker(self) -> ServiceHost: ...

    @property
    def queues(self) -> Mapping[str, Q]: ...

    def get(self, name: str) -> Q | None: ...

    def now(self) -> float: ...

    def handle(self, q: Q, actions: list[Action], touched: Any = ()) -> None: ...

    def journal_events(self, q: Q, events: list[QueueEvent]) -> None: ...

    def room(self, q: Q) -> int: ...

    def some_subscription_takes(self, q: Q, position: int) -> bool: ...


class TransferPeers(Protocol):
    """The replication links as the queues use them (:class:`replication.service.
    ReplicationService`)."""

    def reachable(self, name: str) -> bool: ...

    def request_transfer(self, owner: str, queue: str, bookmarks: list[str]) -> bool: ...


def record_events(rec: JournalRecord) -> list[QueueEvent]:
    """The queue events one journaled queue record holds (one, or a batch)."""
    if rec.kind == _BATCH:
        return [decode_event(k, p) for k, p in _unpack(rec.body)]
    return [decode_event(rec.kind, rec.body)]


def removed_bookmark(ev: object) -> str | None:
    """The bookmark of the message a replicated event takes out of the queue (an ack, an
    expiry, an at-most-once send), None for anything else."""
    if type(ev) is Ack or type(ev) is Expire or type(ev) is Lease:
        return ev.bookmark or None
    return None


class QueueReplication(Generic[Q]):
    """The replicated queues of one instance (see the module docstring)."""

    def __init__(self, svc: SharedQueues[Q]) -> None:
        self.svc = svc
        self.local = svc.broker.instance_name
        self.peers: TransferPeers | None = None
        self._timer: Any = None
        self._timer_at: float | None = None

    @property
    def queue_names(self) -> frozenset[str]:
        return frozenset(n for n, q in self.svc.queues.items() if q.ownership is not None)

    def attach(self, peers: TransferPeers) -> None:
        """The replication links are up: transfers can be asked for and granted."""
        self.peers = peers
        self.arm()

    def reachable(self, name: str) -> bool:
        return self.peers is not None and self.peers.reachable(name)

    # -- records from other instances (the ApplyPort, for queue records) ------------------------
    def apply_replicated(self, rec: JournalRecord) -> None:
        """A queue record replicated here (already in the journal): its removals and transfers
        apply to this instance's copy of the queue, found by bookmark."""
        q = self.svc.get(rec.topic)
        if q is None or q.ownership is None or not self.same_queue(q, rec):
            return
        try:
            events = record_events(rec)
        except (ValueError, msgspec.DecodeError) as exc:
            log.error("queue %s: replicated queue record %s unreadable: %s", q.name,
                      rec.bookmark_str, exc)
            return
        now = self.svc.now()
        gone = [bm for bm in map(removed_bookmark, events) if bm is not None]
        if gone:
            positions, actions = q.engine.remove(gone, now)
            for p in positions:
                q.ownership.left(p, now)
            self.svc.handle(q, actions, positions)
        gained = False
        for ev in events:
            if type(ev) is Transfer:
                pos = q.engine.position_of(ev.bookmark)
                if pos is not None:
                    gained = q.ownership.moved(pos, ev.owner) or gained
        if gained:  # this instance may deliver them now
            self.svc.handle(q, q.engine.dispatch(now))

    @staticmethod
    def same_queue(q: SharedQueue, rec: JournalRecord) -> bool:
        """A group local queue's records name its identity; another domain's are not ours."""
        return q.domain is None or (rec.headers or {}).get(DOMAIN_HEADER) == q.domain

    # -- transfers -------------------------------------------------------------------------------
    def transfer_requested(self, queue: str, bookmarks: list[str], requester: str) -> None:
        """The :class:`replication.service.QueueTransferPort`: ``requester`` asks for messages.
        Granted for each one this instance owns (or, with proxied transfer, whose owner is
        unreachable) that is available here; refused silently otherwise."""
        q = self.svc.get(queue)
        if q is None or q.ownership is None or requester == self.local:
            return
        own = q.ownership
        granted: list[Transfer] = []
        for bm in bookmarks:
            pos = q.engine.position_of(bm)
            if pos is None or not q.engine.is_available(pos) or not own.may_grant(pos, self.reachable):
                continue
            own.moved(pos, requester)
            granted.append(Transfer(pos, bm, requester))
        if granted:
            self.journal(q, granted)

    def journal(self, q: Q, events: list[Transfer]) -> None:
        """Journal transfers decided here; they replicate like any queue record."""
        out: list[QueueEvent] = list(events)
        self.svc.journal_events(q, out)

    def claim(self, q: Q, positions: list[int]) -> None:
        """Proxied transfer: take over messages whose owner is unreachable."""
        own = q.ownership
        if own is None:
            return
        events = []
        for pos in positions:
            bm = q.engine.bookmark_at(pos)
            if bm is None or not q.engine.is_available(pos):
                continue
            own.moved(pos, self.local)
            events.append(Transfer(pos, bm, self.local))
        if events:
            log.warning("queue %s: proxied transfer took over %d message(s) whose owner is not "
                        "reachable", q.name, len(events))
            self.journal(q, events)
            self.svc.handle(q, q.engine.dispatch(self.svc.now()))

    def set_proxied_transfer(self, topic: str, message_type: str, enabled: bool) -> None:
        """The :class:`server.core.ports.ProxiedTransferControl` port (Admin and the action modules)."""
        q = self.svc.get(topic)
        if q is None or q.ownership is None:
            raise CommandError(reasons.INVALID_TOPIC,
                               f"{topic!r} is not a replicated queue on this instance")
        if message_type and message_type != q.cfg.message_type:
            raise CommandError(reasons.INVALID_TOPIC, f"queue {topic!r} has MessageType "
                                                      f"{q.cfg.message_type!r}, not {message_type!r}")
        if q.ownership.proxied != enabled:
            log.warning("queue %s: proxied transfer %s", topic, "enabled" if enabled else "disabled")
        q.ownership.proxied = enabled
        if enabled:
            self.arm()

    # -- asking for messages ----------------------------------------------------------------------
    def arm(self) -> None:
        """Look for messages to ask for at the next moment one may be worth asking for."""
        now = self.svc.now()
        due = None
        for q in self.svc.queues.values():
            own = q.ownership
            if own is None or not q.subs:
                continue
            at = own.next_request_at(now)
            if at is not None and (due is None or at < due):
                due = at
        if due is None or (self._timer is not None and self._timer_at is not None
                           and self._timer_at <= due):
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = due
        self._timer = self.svc.broker.call_later(max(0.0, due - now), self._tick)

    def _tick(self) -> None:
        self._timer = None
        self._timer_at = None
        now = self.svc.now()
        for q in self.svc.queues.values():
            if q.ownership is not None and q.ownership.foreign and q.subs:
                try:
                    self.ask(q, now)
                except Exception:  # one queue's failure must not stop the others' transfers
                    log.exception("queue %s: transfer requests failed", q.name)
        self.svc.broker.turn.request()
        self.arm()

    def ask(self, q: Q, now: float) -> None:
        """Ask the owners for what this instance's subscriptions have room for."""
        own = q.ownership
        if own is None:
            return
        room = self.svc.room(q)
        if room <= 0:
            return
        engine = q.engine

        def wanted(position: int) -> bool:
            return engine.is_available(position) and self.svc.some_subscription_takes(q, position)

        # the messages owned elsewhere, oldest first (a transfer request is a message each)
        ask, claim = own.to_request(list(own.foreign), room, now, self.reachable, wanted)
        if claim:
            self.claim(q, claim)
        peers = self.peers
        if peers is None:
            return
        for owner, positions in ask.items():
            bms = [bm for bm in map(q.engine.bookmark_at, positions) if bm is not None]
            if bms:
                peers.request_transfer(owner, q.name, bms)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def replicated_events(rec: JournalRecord, events: list[QueueEvent], by_bookmark: dict[str, int],
                      owners: dict[int, str]) -> list[QueueEvent]:
    """Recovery: the events of a queue record of a replicated queue as this instance replays
    them. A record that came by replication names messages by bookmark (its positions are
    the other instance's): its removals become acks by bookmark. Transfers update
    ``owners`` (position -> owner of the messages entered so far)."""
    out: list[QueueEvent] = []
    remote = bool(path_of(rec))
    for ev in events:
        if type(ev) is Transfer:
            pos = by_bookmark.get(ev.bookmark) if remote else ev.position
            if pos is not None:
                owners[pos] = ev.owner
            continue
        if remote:
            bm = removed_bookmark(ev)
            if bm is not None:
                out.append(Ack(None, bm))
            continue
        out.append(ev)
    return out


def origin_of(rec: JournalRecord) -> str | None:
    """The instance a journaled message was first published to (None: this one)."""
    path = path_of(rec)
    return path[0] if path else None


def owned_only(own: Ownership, eligible: Callable[[int], bool | None] | None
               ) -> Callable[[int], bool | None]:
    """A subscription's eligibility on a replicated queue: messages this instance owns only
    (None: ``eligible`` cannot tell yet)."""
    foreign = own.foreign
    if eligible is None:
        return lambda position: position not in foreign
    return lambda position: position not in foreign and eligible(position)


__all__ = ["DOMAIN_HEADER", "QueueReplication", "SharedQueue", "SharedQueues", "origin_of", "owned_only",
           "TransferPeers", "record_events", "removed_bookmark", "replicated_events"]
