"""``QueueSpec``: the queue settings the engine needs, frozen and validated.

The server maps its config struct (``config.model.Queue``) to a ``QueueSpec`` with
:meth:`QueueSpec.from_config` (duck-typed: this package imports nothing from ``config/``), or
builds one directly. Construction validates; every problem found is reported at once in a
:class:`QueueConfigError` (a ``ValueError``) whose message names the queue and the AMPS
element at fault.

Units: durations are float seconds, ``None`` means "unset" in the AMPS sense (infinite lease,
no expiration, no queue-wide backlog limit, no TargetQueueDepth). Counter limits use AMPS's
own convention: ``0`` = no maximum (MaxCancels, MaxDeliveries).

Defaults follow the AMPS queue configuration table: Semantics ``at-least-once``,
MaxPerSubscriptionBacklog ``1``, Leasing ``sublet``, FairnessModel ``proportional`` for
at-least-once and ``round-robin`` (the only valid model) for at-most-once, RecoveryPoint
``epoch``, DeferredAckExpiration one day.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "AT_LEAST_ONCE",
    "AT_MOST_ONCE",
    "FAIRNESS_MODELS",
    "LEASING_MODELS",
    "MIN_TARGET_QUEUE_DEPTH",
    "QueueConfigError",
    "QueueSpec",
    "validate_spec",
]

AT_LEAST_ONCE = "at-least-once"
AT_MOST_ONCE = "at-most-once"
SEMANTICS = (AT_LEAST_ONCE, AT_MOST_ONCE)
FAIRNESS_MODELS = ("fast", "round-robin", "proportional")
LEASING_MODELS = ("strict", "sublet")
#: AMPS documents a minimum of 1000 for TargetQueueDepth.
MIN_TARGET_QUEUE_DEPTH = 1000
DEFAULT_DEFERRED_ACK_EXPIRATION = 86400.0


class QueueConfigError(ValueError):
    """A queue definition AMPS would refuse. ``problems`` lists every issue found."""

    def __init__(self, queue: str, problems: list[str]) -> None:
        self.queue = queue
        self.problems = tuple(problems)
        super().__init__(f"queue {queue!r}: " + "; ".join(problems))


@dataclass(frozen=True, slots=True)
class QueueSpec:
    """One queue's delivery policy. Validated on construction (see :func:`validate_spec`)."""

    name: str
    semantics: str = AT_LEAST_ONCE  # Semantics
    lease_period: float | None = None  # LeasePeriod, seconds; None = leases never expire
    max_per_subscription_backlog: int | None = 1  # MaxPerSubscriptionBacklog; None = no cap
    max_backlog: int | None = None  # MaxBacklog: leases outstanding for the whole queue
    fairness: str | None = None  # FairnessModel; None = the default for the semantics
    leasing: str = "sublet"  # Leasing: "strict" | "sublet"
    max_cancels: int = 0  # MaxCancels (0 = no maximum)
    max_deliveries: int = 0  # MaxDeliveries (0 = no maximum)
    expiration: float | None = None  # Expiration, seconds (per-message ``e`` overrides)
    target_queue_depth: int | None = None  # TargetQueueDepth (None = every message active)
    priority: str | None = None  # Priority expression text (the server evaluates it)
    barrier_expression: str | None = None  # BarrierExpression filter text (server evaluates)
    recovery_point: str = "epoch"  # RecoveryPoint: epoch|now|creation|bookmark|timestamp
    deferred_ack_expiration: float = DEFAULT_DEFERRED_ACK_EXPIRATION  # DeferredAckExpiration
    # Resolved fairness (filled in by __post_init__; not a constructor argument).
    fairness_model: str = field(default="", init=False, compare=False)

    def __post_init__(self) -> None:
        validate_spec(self)
        resolved = self.fairness
        if resolved is None:
            resolved = "proportional" if self.semantics == AT_LEAST_ONCE else "round-robin"
        object.__setattr__(self, "fairness_model", resolved)

    # -- derived ---------------------------------------------------------------------------
    @property
    def at_most_once(self) -> bool:
        return self.semantics == AT_MOST_ONCE

    @property
    def has_priority(self) -> bool:
        return self.priority is not None

    @property
    def has_barrier(self) -> bool:
        return self.barrier_expression is not None

    @property
    def strict_leasing(self) -> bool:
        return self.leasing == "strict"

    def subscription_limit(self, max_backlog: int | None) -> int:
        """The backlog a subscription gets on this queue: the smaller of the queue's
        MaxPerSubscriptionBacklog and the subscriber's ``max_backlog`` option (default 1)."""
        requested = 1 if max_backlog is None else max_backlog
        if requested < 0:
            raise ValueError(f"max_backlog must be >= 0, got {max_backlog!r}")
        cap = self.max_per_subscription_backlog
        return requested if cap is None else min(requested, cap)

    # -- mapping from the config struct ------------------------------------------------------
    @classmethod
    def from_config(cls, queue: Any) -> QueueSpec:
        """Build from a ``config.model.Queue``-shaped object (attribute names as there).

        The config struct defaults ``fairness_model`` to ``proportional`` whatever the
        semantics, so for an at-most-once queue the fairness is forced to ``round-robin``,
        which AMPS documents as the only valid model for at-most-once.
        """
        semantics = getattr(queue, "semantics", AT_LEAST_ONCE)
        fairness = getattr(queue, "fairness_model", None)
        if semantics == AT_MOST_ONCE:
            fairness = "round-robin"
        return cls(
            name=queue.name,
            semantics=semantics,
            lease_period=getattr(queue, "lease_period", None),
            max_per_subscription_backlog=getattr(queue, "max_per_subscription_backlog", 1),
            max_backlog=getattr(queue, "max_backlog", None),
            fairness=fairness,
            leasing=getattr(queue, "leasing", "sublet"),
            max_cancels=getattr(queue, "max_cancels", 0) or 0,
            max_deliveries=getattr(queue, "max_deliveries", 0) or 0,
            expiration=getattr(queue, "expiration", None),
            target_queue_depth=getattr(queue, "target_queue_depth", None),
            priority=getattr(queue, "priority", None),
            barrier_expression=getattr(queue, "barrier_expression", None),
            recovery_point=getattr(queue, "recovery_point", "epoch") or "epoch",
            deferred_ack_expiration=getattr(
                queue, "deferred_ack_expiration", DEFAULT_DEFERRED_ACK_EXPIRATION
            ),
        )


def _positive_duration(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 and not math.isnan(v)


def _count(v: Any, minimum: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= minimum


def validate_spec(spec: QueueSpec) -> None:
    """Raise :class:`QueueConfigError` listing every problem with ``spec``; return if valid.

    Includes the AMPS rule that ``TargetQueueDepth`` cannot be combined with ``Priority`` or
    ``BarrierExpression`` (nor ``Priority`` with ``BarrierExpression``).
    """
    p: list[str] = []
    if not isinstance(spec.name, str) or not spec.name:
        p.append("Name must be a non-empty string")
    if spec.semantics not in SEMANTICS:
        p.append(f"Semantics must be one of {', '.join(SEMANTICS)}, got {spec.semantics!r}")
    if spec.fairness is not None:
        if spec.fairness not in FAIRNESS_MODELS:
            p.append(
                f"FairnessModel must be one of {', '.join(FAIRNESS_MODELS)}, got {spec.fairness!r}"
            )
        elif spec.semantics == AT_MOST_ONCE and spec.fairness != "round-robin":
            p.append(
                f"FairnessModel {spec.fairness!r} is not valid for an at-most-once queue "
                "(round-robin is the only valid model)"
            )
    if spec.leasing not in LEASING_MODELS:
        p.append(f"Leasing must be one of {', '.join(LEASING_MODELS)}, got {spec.leasing!r}")
    if spec.lease_period is not None and not _positive_duration(spec.lease_period):
        p.append(f"LeasePeriod must be a positive duration, got {spec.lease_period!r}")
    if spec.expiration is not None and not _positive_duration(spec.expiration):
        p.append(f"Expiration must be a positive duration, got {spec.expiration!r}")
    if not _positive_duration(spec.deferred_ack_expiration):
        p.append(
            f"DeferredAckExpiration must be a positive duration, got {spec.deferred_ack_expiration!r}"
        )
    if spec.max_per_subscription_backlog is not None and not _count(
        spec.max_per_subscription_backlog, 0
    ):
        p.append(
            "MaxPerSubscriptionBacklog must be an integer >= 0, "
            f"got {spec.max_per_subscription_backlog!r}"
        )
    if spec.max_backlog is not None and not _count(spec.max_backlog, 0):
        p.append(f"MaxBacklog must be an integer >= 0, got {spec.max_backlog!r}")
    if not _count(spec.max_cancels, 0):
        p.append(f"MaxCancels must be an integer >= 0 (0 = no maximum), got {spec.max_cancels!r}")
    if not _count(spec.max_deliveries, 0):
        p.append(
            f"MaxDeliveries must be an integer >= 0 (0 = no maximum), got {spec.max_deliveries!r}"
        )
    tqd = spec.target_queue_depth
    if tqd is not None:
        if not _count(tqd, MIN_TARGET_QUEUE_DEPTH):
            p.append(f"TargetQueueDepth must be an integer >= {MIN_TARGET_QUEUE_DEPTH}, got {tqd!r}")
        if spec.priority is not None:
            p.append("TargetQueueDepth cannot be set for a queue that specifies a Priority")
        if spec.barrier_expression is not None:
            p.append("TargetQueueDepth cannot be set for a queue that specifies a BarrierExpression")
    if spec.priority is not None and spec.barrier_expression is not None:
        p.append("Priority cannot be specified on a queue that specifies a BarrierExpression")
    for label, text in (("Priority", spec.priority), ("BarrierExpression", spec.barrier_expression)):
        if text is not None and (not isinstance(text, str) or not text.strip()):
            p.append(f"{label} must be a non-empty expression when present")
    if not isinstance(spec.recovery_point, str) or not spec.recovery_point.strip():
        p.append("RecoveryPoint must be a non-empty string (epoch, now, creation, a bookmark "
                 "or a timestamp)")
    if p:
        raise QueueConfigError(spec.name if isinstance(spec.name, str) else repr(spec.name), p)
