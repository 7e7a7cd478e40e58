"""What the engine tells the server to do. Every engine method returns ``list[Action]``.

Actions are emitted in the order things happened, so a consumer that applies them in order
(the server, a view over the queue, the property-test model) always sees a consistent state:
a message is ``Returned`` before it is delivered again, a barrier's ``Deliver`` actions come
before the ``Acked`` that removes it (but for one owed to a subscription whose filter could not
tell yet, which comes at a later dispatch: ``QueueDispatch._release_barrier``).

=============  ================================================================================
action         server's job
=============  ================================================================================
``Deliver``    read the record at ``position`` from the journal and send it on subscription
               ``sub_key`` with ``bm`` = ``bookmark`` and, when ``lease_expiry`` is not None,
               ``lp`` = that instant (float seconds, same clock as ``now``) formatted as an AMPS
               timestamp. ``barrier=True``: a barrier message (no lease, not acked, not counted
               in the backlog).
``Acked``      nothing to send: the message left the queue (client ack, at-most-once backlog
               release, or a released barrier). Journal it (see :mod:`queues.events`).
``Returned``   a lease ended without an ack (``reason`` = ``cancel``, ``lease_expired``,
               ``unsubscribe``); the message is available again. Views over the queue see it
               again.
``Expired``    the message left the queue without being processed: fire
               ``amps-action-on-sow-expire-message`` with ``{{AMPS_REASON}}`` = ``reason``
               (comma-joined when several apply, e.g. ``max_cancels,max_deliveries``).
=============  ================================================================================

``QueuedMessage`` is not an action: it is what :meth:`QueueEngine.messages` yields for a
``sow`` query, a view, or a ``sow_delete`` by filter.
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = [
    "Action",
    "Acked",
    "Deliver",
    "Expired",
    "QueuedMessage",
    "Returned",
    "REASON_TIME_LIMIT",
    "REASON_FORCED_EXPIRE",
    "REASON_MAX_CANCELS",
    "REASON_MAX_DELIVERIES",
    "RETURN_CANCEL",
    "RETURN_LEASE_EXPIRED",
    "RETURN_UNSUBSCRIBE",
]

# AMPS_REASON values of amps-action-on-sow-expire-message.
REASON_TIME_LIMIT = "time_limit"
REASON_FORCED_EXPIRE = "forced_expire"
REASON_MAX_CANCELS = "max_cancels"
REASON_MAX_DELIVERIES = "max_deliveries"

# Why a lease ended without an acknowledgement.
RETURN_CANCEL = "cancel"
RETURN_LEASE_EXPIRED = "lease_expired"
RETURN_UNSUBSCRIBE = "unsubscribe"  # unsubscribe, subscription removed, or client disconnect


class Deliver(msgspec.Struct, frozen=True, gc=False):
    sub_key: Any
    position: int
    bookmark: str
    lease_expiry: float | None  # absolute time; None = no lease expiry (infinite / barrier)
    delivery_count: int  # deliveries of this message so far, this one included
    barrier: bool = False


class Acked(msgspec.Struct, frozen=True, gc=False):
    position: int | None  # None only for a deferred ack (message not in the queue yet)
    bookmark: str
    barrier: bool = False  # True: a barrier message removed after delivery


class Returned(msgspec.Struct, frozen=True, gc=False):
    position: int
    bookmark: str
    reason: str  # RETURN_CANCEL | RETURN_LEASE_EXPIRED | RETURN_UNSUBSCRIBE
    sub_key: Any  # the subscription that held the lease
    unsent: bool = False  # the lease's delivery was never sent (it did not count)


class Expired(msgspec.Struct, frozen=True, gc=False):
    position: int
    bookmark: str
    reason: str  # AMPS_REASON: time_limit | forced_expire | max_cancels | max_deliveries


Action = Deliver | Acked | Returned | Expired


class QueuedMessage(msgspec.Struct, frozen=True, gc=False):
    position: int
    bookmark: str
    state: str  # "available" | "leased"
    sub_key: Any  # lease holder's subscription, None when available
    delivery_count: int
    cancel_count: int
    expiration: float | None  # absolute expiry instant, None = never
    priority: int | None  # the value used for ordering; None = NULL / non-numeric / no Priority
    barrier: bool
