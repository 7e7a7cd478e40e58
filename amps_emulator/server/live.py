"""State a live subscription keeps from its query's snapshot on (a paginated window, the
groups of an aggregated subscription).

The state is read with the query's snapshot, but the query may run over several loop steps
while the topic changes. :class:`LiveState` makes those changes wait: ``published`` and
``removed`` defer them until :meth:`LiveState.catch_up`, which the server calls once the
query's results and acks are out; from then on changes apply (and are delivered) as they
happen.
"""

from __future__ import annotations

from typing import Any

__all__ = ["LiveState"]


class LiveState:
    sub: Any = None  # the subscription (set when it is registered, at the snapshot)

    def __init__(self) -> None:
        self._pending: list[tuple[Any, ...]] | None = []

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

    def published(self, msg: Any) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def removed(self, rec: Any, reason: str) -> None:  # pragma: no cover - overridden
        raise NotImplementedError
