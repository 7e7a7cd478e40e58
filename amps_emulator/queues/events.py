"""Queue events: what the server journals so a queue can be rebuilt, and the recovery plan.

AMPS records queue state in the transaction log next to the messages: the messages are the
publish records of the underlying topics (never copied), and each change of a message's
queue state is a small record. This module defines those records.

Events (one msgpack array each; ``kind`` codes are the ``journal.record.RecordKind`` queue
codes reserved for this purpose, duplicated here so ``queues/`` imports nothing from
``journal/``). Write the record with ``topic`` = the queue name and ``payload``/body =
:func:`encode_event`'s bytes; the record's own position is irrelevant to the queue.

=================  ====  ====================================  ==================  ========
event              kind  payload                               from action         needed
=================  ====  ====================================  ==================  ========
``Ack``            16    ``[position, bookmark]``              ``Acked``           always
``Cancel``         17    ``[position, unsent]``                ``Returned(cancel)``  full
``Expire``         18    ``[position, reason]``                ``Expired``         always
``Lease``          19    ``[position]``                        ``Deliver``         AMO: always; ALO: full
``LeaseExpire``    20    ``[position, unsent]``                ``Returned(other)`` full
``Transfer``       21    ``[position, bookmark, owner]``       (ownership)         replicated
=================  ====  ====================================  ==================  ========

``position`` is the journal position of the *queued message*; ``Ack.bookmark`` is only set
(and ``position`` is nil) for a deferred ack: an ack for a message the queue has not seen yet.
A queue whose messages are shared by replicated instances (a distributed ``Queue`` or a
``GroupLocalQueue``) journals ``Ack``, ``Expire`` and ``Lease`` with the message's bookmark
as well (``events_for(..., bookmarks=True)``): the records replicate, and the position is
this instance's own, meaningless on another instance. ``Transfer`` records that the message
at ``position`` (``bookmark``) is owned by instance ``owner`` from now on: a grant of an
ownership transfer, or a proxied claim (docs/design/replication.md section 4); it is not engine state,
:func:`~queues.recovery.replay` skips it and the server keeps ownership.

``needed = always``: recovery is wrong without it. ``full``: only restores the delivery and
cancel counters, which AMPS itself resets on restart (``MaxCancels``/``MaxDeliveries``
counters "are reset if the server restarts"); :func:`event_for` emits them only with
``full=True``. An at-most-once ``Lease`` is the message's removal from the queue, so it is
always needed. Barrier deliveries produce no ``Lease``: the barrier's removal is its ``Ack``.
``unsent`` (true) marks the end of a lease whose delivery the server never sent (it waited for
its record past the lease's end): that ``Lease`` was no delivery, and replay with counters
takes it back off the delivery count. (A record written without it reads as false.)

``Enqueue`` is not journaled: it is what the server builds from each publish record of an
underlying topic that passes the queue's ``Filter`` while it replays the log (it evaluates
``Priority`` and ``BarrierExpression`` again then, as AMPS does after a restart).

Recovery (AMPS "Startup and Recovery for Queues"): the server persists a
:class:`QueueCheckpoint` (AMPS keeps this in ``queues.ack``) — the engine's
``low_water_position`` plus the ``RecoveryPoint`` it was configured with — and on start asks
:func:`plan_recovery` where to begin. It then feeds ``Enqueue`` and decoded events for
every record after that point, in log order, to ``QueueEngine.replay``.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from .actions import RETURN_CANCEL, Acked, Deliver, Expired, Returned
from .spec import QueueSpec

__all__ = [
    "Ack",
    "Cancel",
    "Enqueue",
    "Expire",
    "Lease",
    "LeaseExpire",
    "QueueEvent",
    "Transfer",
    "KIND_ACK",
    "KIND_CANCEL",
    "KIND_EXPIRE",
    "KIND_LEASE",
    "KIND_LEASE_EXPIRE",
    "KIND_TRANSFER",
    "QueueCheckpoint",
    "RecoveryStart",
    "decode_event",
    "encode_event",
    "event_for",
    "events_for",
    "plan_recovery",
]

# Same values as journal.record.RecordKind.QUEUE_* (checked by a unit test).
KIND_ACK = 16
KIND_CANCEL = 17
KIND_EXPIRE = 18
KIND_LEASE = 19
KIND_LEASE_EXPIRE = 20
KIND_TRANSFER = 21


class Enqueue(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A message entering the queue (built by the server from a publish record)."""

    position: int
    bookmark: str
    timestamp: float  # seconds, the record's timestamp: expiration counts from here
    expiration: float | None = None  # the message's ``e`` (0 = never expires)
    priority: int | float | None = None  # Priority expression result (None = NULL)
    is_barrier: bool = False


class Ack(msgspec.Struct, frozen=True, array_like=True, gc=False):
    position: int | None
    bookmark: str = ""


class Cancel(msgspec.Struct, frozen=True, array_like=True, gc=False):
    position: int
    unsent: bool = False  # the lease cancelled was never sent: no delivery


class Expire(msgspec.Struct, frozen=True, array_like=True, gc=False):
    position: int
    reason: str
    bookmark: str = ""  # set for a queue shared by replicated instances


class Lease(msgspec.Struct, frozen=True, array_like=True, gc=False):
    position: int
    bookmark: str = ""  # set for a queue shared by replicated instances


class LeaseExpire(msgspec.Struct, frozen=True, array_like=True, gc=False):
    position: int
    unsent: bool = False  # the lease ended before its delivery was sent: no delivery


class Transfer(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """The message at ``position`` (this instance's) with ``bookmark`` is owned by ``owner``."""

    position: int
    bookmark: str
    owner: str


QueueEvent = Enqueue | Ack | Cancel | Expire | Lease | LeaseExpire | Transfer

_KIND_OF = {Ack: KIND_ACK, Cancel: KIND_CANCEL, Expire: KIND_EXPIRE, Lease: KIND_LEASE,
            LeaseExpire: KIND_LEASE_EXPIRE, Transfer: KIND_TRANSFER}
_DECODERS = {kind: msgspec.msgpack.Decoder(cls) for cls, kind in _KIND_OF.items()}
_encoder = msgspec.msgpack.Encoder()


def encode_event(event: QueueEvent) -> tuple[int, bytes]:
    """``(record kind, payload bytes)`` for a journaled event (not for ``Enqueue``)."""
    try:
        kind = _KIND_OF[type(event)]
    except KeyError:
        raise TypeError(f"{type(event).__name__} is not a journaled queue event") from None
    return kind, _encoder.encode(event)


def decode_event(kind: int, payload: bytes) -> QueueEvent:
    try:
        dec = _DECODERS[kind]
    except KeyError:
        raise ValueError(f"record kind {kind} is not a queue event") from None
    return dec.decode(payload)


def event_for(action: object, spec: QueueSpec, *, full: bool = False,
              bookmarks: bool = False) -> QueueEvent | None:
    """The event to journal for one engine action, or None when nothing needs journaling.
    ``bookmarks``: the queue is shared by replicated instances, its removals carry the
    message's bookmark."""
    if type(action) is Acked:
        if action.position is None:
            return Ack(None, action.bookmark)
        return Ack(action.position, action.bookmark) if bookmarks else Ack(action.position)
    if type(action) is Expired:
        if bookmarks:
            return Expire(action.position, action.reason, action.bookmark)
        return Expire(action.position, action.reason)
    if type(action) is Deliver:
        if action.barrier:
            return None
        if full or spec.at_most_once:
            return Lease(action.position, action.bookmark) if bookmarks else Lease(action.position)
        return None
    if type(action) is Returned:
        if not full:
            return None
        if action.reason == RETURN_CANCEL:
            return Cancel(action.position, action.unsent)
        return LeaseExpire(action.position, action.unsent)
    raise TypeError(f"not a queue action: {action!r}")


def events_for(actions: Iterable[object], spec: QueueSpec, *, full: bool = False,
               bookmarks: bool = False) -> list[QueueEvent]:
    out = []
    for a in actions:
        ev = event_for(a, spec, full=full, bookmarks=bookmarks)
        if ev is not None:
            out.append(ev)
    return out


class QueueCheckpoint(msgspec.Struct, frozen=True):
    """What to persist per queue between runs (AMPS: ``queues.ack``)."""

    queue: str
    recovery_point: str  # the configured RecoveryPoint when this was written
    low_water: int  # every queued message at or before this position is acknowledged


class RecoveryStart(msgspec.Struct, frozen=True):
    """Where to begin replaying the log for one queue.

    Either ``after_position`` is set (replay records with position > it; 0 = whole log), or
    ``recovery_point`` is set: the configured RecoveryPoint text for the server to resolve
    (``epoch`` = whole log, ``now`` = end of log, ``creation``, a bookmark or a timestamp).
    """

    after_position: int | None
    recovery_point: str | None
    reason: str


def plan_recovery(
    spec: QueueSpec,
    checkpoint: QueueCheckpoint | None,
    *,
    journal_first_position: int | None = None,
) -> RecoveryStart:
    """AMPS's rule: a new queue, or one whose configured ``RecoveryPoint`` changed since the
    checkpoint was written, starts at the configured recovery point; otherwise start after
    the checkpoint's low-water mark, or at the beginning of the log when that point is older
    than the oldest journal still available."""
    if checkpoint is None:
        return RecoveryStart(None, spec.recovery_point, "new queue: configured RecoveryPoint")
    if checkpoint.recovery_point != spec.recovery_point:
        return RecoveryStart(None, spec.recovery_point, "RecoveryPoint changed since last start")
    if journal_first_position is not None and checkpoint.low_water < journal_first_position - 1:
        return RecoveryStart(0, None, "low-water mark older than the oldest journal: whole log")
    return RecoveryStart(checkpoint.low_water, None, "resume after the acknowledged low-water mark")
