"""queues: AMPS message queues as a pure state machine (no IO, no clock, no asyncio).

* :mod:`queues.spec`    -- ``QueueSpec`` (validated queue settings) and ``QueueConfigError``
* :mod:`queues.engine`  -- ``QueueEngine``: enqueue / subscribe / ack / poll -> actions
* :mod:`queues.actions` -- ``Deliver``, ``Acked``, ``Returned``, ``Expired``, ``QueuedMessage``
* :mod:`queues.events`  -- the journaled queue events, ``replay`` inputs, recovery planning
* :mod:`queues.ownership` -- ``Ownership``: who owns the messages of a replicated queue
"""

from .actions import (
    REASON_FORCED_EXPIRE,
    REASON_MAX_CANCELS,
    REASON_MAX_DELIVERIES,
    REASON_TIME_LIMIT,
    RETURN_CANCEL,
    RETURN_LEASE_EXPIRED,
    RETURN_UNSUBSCRIBE,
    Acked,
    Action,
    Deliver,
    Expired,
    QueuedMessage,
    Returned,
)
from .engine import QueueEngine, SubscriptionBacklog, parse_bookmark
from .events import (
    Ack,
    Cancel,
    Enqueue,
    Expire,
    Lease,
    LeaseExpire,
    QueueCheckpoint,
    QueueEvent,
    RecoveryStart,
    Transfer,
    decode_event,
    encode_event,
    event_for,
    events_for,
    plan_recovery,
)
from .spec import QueueConfigError, QueueSpec, validate_spec

__all__ = [
    "Ack", "Acked", "Action", "Cancel", "Deliver", "Enqueue", "Expire", "Expired", "Lease",
    "LeaseExpire", "QueueCheckpoint", "QueueConfigError", "QueueEngine", "QueueEvent",
    "QueueSpec", "QueuedMessage", "RecoveryStart", "Returned", "SubscriptionBacklog", "Transfer",
    "REASON_FORCED_EXPIRE", "REASON_MAX_CANCELS", "REASON_MAX_DELIVERIES", "REASON_TIME_LIMIT",
    "RETURN_CANCEL", "RETURN_LEASE_EXPIRED", "RETURN_UNSUBSCRIBE",
    "decode_event", "encode_event", "event_for", "events_for", "parse_bookmark",
    "plan_recovery", "validate_spec",
]
