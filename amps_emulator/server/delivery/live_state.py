"""State a live subscription keeps from its query's snapshot on (a paginated window, the
groups of an aggregated subscription).

The state is read with the query's snapshot, but the query may run over several loop steps
while the topic changes. :class:`LiveState` makes those changes wait: ``published`` and
``removed`` defer them until :meth:`LiveState.catch_up`, which the server calls once the
query's results and acks are out; from then on changes apply (and are delivered) as they
happen.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from amps_emulator.protocol import reasons

if TYPE_CHECKING:
    from amps_emulator.server.core.ports import DeliveryWatch
    from amps_emulator.server.core.router import ReadEntitlement

__all__ = ["LiveState"]


class LiveState:
    sub: Any = None  # the subscription (set when it is registered, at the snapshot)

    def __init__(self) -> None:
        self._pending: list[tuple[Any, ...]] | None = []
        #: the subscriber's read entitlement when it has a read filter (server.entitle sets
        #: it with the subscription's): it names why a record left, see :meth:`leave_reason`
        self.entitlement: ReadEntitlement | None = None
        #: told of each message the state delivers (the broker's, set with ``sub``)
        self.delivered: DeliveryWatch | None = None

    def _defer(self, *change: Any) -> bool:
        """Keep ``change`` for :meth:`catch_up` if the query still runs (True)."""
        if self._pending is None:
            return False
        self._pending.append(change)
        return True

    def catch_up(self) -> None:
        """Apply, and deliver, what changed while the query ran; then follow live."""
        pending, self._pending = self._pending, None
        for change in pending or ():
            if len(change) == 1:
                self.published(change[0])
            else:
                self.removed(*change)

    def leave_reason(self, msg: Any) -> str:
        """Why a record the subscription held left it with the update ``msg``: ``entitlement``
        when the subscriber's read filter hides the update (the subscription's filter holds
        it, ANDed with the subscriber's), else ``match``."""
        ent = self.entitlement
        if ent is not None:
            grant = ent.grant(msg.topic)
            if grant is not None and not grant.admits(msg.doc, msg.context()):
                return reasons.OOF_ENTITLEMENT
        return reasons.OOF_MATCH

    def close(self) -> None:
        """The subscription is gone (or its command failed): stop following its source."""

    def published(self, msg: Any) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def removed(self, rec: Any, reason: str) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def removed_many(self, records: list[Any], reason: str) -> None:
        """:meth:`removed` for the records one command removed, together."""
        for rec in records:
            self.removed(rec, reason)
