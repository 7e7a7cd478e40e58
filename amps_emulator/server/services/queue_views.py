"""A queue as the underlying topic of a view (or a conflated topic): its available messages.

AMPS computes a view over a queue from the messages that are available in it now: a message
leased to a subscriber is not in the view, one returned to the queue (a cancel, an expired
lease, a subscriber gone) is in it again, one acknowledged or expired is gone for good;
messages beyond ``TargetQueueDepth`` are not considered. The view only reads the queue: it
leases nothing and changes no delivery.

:class:`QueueRows` is that set, kept as the records a view reads of a SOW topic
(``get``, ``query().records``, the topic's ``spec``), each message keyed by its bookmark.
The queue service tells it what changed (:attr:`QueueService.watch`: the engine's actions
and the positions that entered or left otherwise); :meth:`QueueRows.sync` checks each
position against the engine and returns what entered and left, in log order. A message that
leaves ``TargetQueueDepth``'s inactive part is not named by any action: when the inactive
count falls, every message is checked again.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from amps_emulator.protocol.filter import MessageContext
from amps_emulator.protocol.topics import display_name
from amps_emulator.queues import Expired
from amps_emulator.server.core.message import Message
from amps_emulator.sow import TopicSpec
from amps_emulator.sow.record import Record

if TYPE_CHECKING:
    from amps_emulator.server.services.queue_service import ConfiguredQueue, QueueService

__all__ = ["QueueRows"]


class _Query(NamedTuple):
    records: list[Record]


class QueueRows:
    """The available messages of queue ``q``, as the records of a SOW topic (see the module
    docstring)."""

    def __init__(self, service: QueueService, q: ConfiguredQueue) -> None:
        self.service = service
        self.q = q
        #: the queue as a topic: its key (name and type), so a view names it as any topic
        self.spec = TopicSpec(q.key, message_type=q.message_type, durability="transient")
        self.rows: dict[str, Record] = {}  # bookmark -> record
        self._key_at: dict[int, str] = {}  # journal position -> bookmark
        self._seq = 0
        self._inactive = q.engine.inactive_count

    # -- what a view reads of its underlying topic ------------------------------------------
    def get(self, key: str) -> Record | None:
        return self.rows.get(key)

    def query(self) -> _Query:
        """Every available message, in queue order."""
        return _Query(sorted(self.rows.values(), key=lambda r: r.seq))

    def _ctx_of(self, rec: Record) -> MessageContext:
        return MessageContext(topic=display_name(self.spec.name), bookmark=rec.bookmark,
                              sow_key=rec.sow_key)

    def message(self, rec: Record) -> Message:
        """``rec`` as a published message of the queue (what a view over it takes in)."""
        msg = Message(self.spec.name, rec.data, rec.bookmark, None, rec.sow_key, None, None,
                      rec.doc)
        msg.timestamp = int(rec.timestamp * 1_000_000)
        return msg

    # -- following the queue ----------------------------------------------------------------
    def load(self) -> None:
        """Start from what the queue holds available now."""
        self.rows.clear()
        self._key_at.clear()
        self.sync(None)

    def sync(self, positions: Iterable[int] | None) -> tuple[list[Record], list[Record]]:
        """Check ``positions`` (None: every message) against the queue; returns the records
        that became available and those that are no longer, each in log order."""
        engine = self.q.engine
        inactive = engine.inactive_count
        if positions is None or inactive < self._inactive:  # promoted from the inactive part
            now = self.service.now()
            available = {m.position for m in engine.messages(include_leased=False, now=now)}
            check = sorted(available | self._key_at.keys())
        else:
            available = None
            check = sorted(set(positions))
        self._inactive = inactive
        entered: list[Record] = []
        left: list[Record] = []
        for pos in check:
            now_in = pos in available if available is not None else engine.is_available(pos)
            key = self._key_at.get(pos)
            if now_in and key is None:
                rec = self._read(pos)
                if rec is not None:
                    entered.append(rec)
            elif key is not None and not now_in:
                del self._key_at[pos]
                gone = self.rows.pop(key, None)
                if gone is not None:
                    left.append(gone)
        return entered, left

    def _read(self, position: int) -> Record | None:
        jrec = self.service._record(position)
        if jrec is None:  # no longer in the journal: nothing a view can show
            return None
        bookmark = jrec.bookmark_str
        self._seq += 1
        rec = Record(bookmark, jrec.body, bookmark, jrec.timestamp / 1_000_000, None, position,
                     None, self.service.broker.bodies.decode(jrec.body, jrec.key), self._seq)
        self.rows[bookmark] = rec
        self._key_at[position] = bookmark
        return rec


def expired_positions(actions: Iterable[Any]) -> set[int]:
    """The positions the engine's ``actions`` expired (a view's records leave ``expired``)."""
    return {a.position for a in actions if type(a) is Expired}
