"""Queue work that waits, off the event loop, for a record in a compressed journal segment.

A delivery (or the on-sow-expire actions of a message that left a queue) needs the message's
record. One that is neither in the queue service's cache of recent records nor in a plain
segment may be in a compressed segment (``<segment>.journal.gz``) that is not decompressed
yet: it is then decompressed in the journal cache's worker thread (a :class:`ReadHold`), and
the work waits here meanwhile, in the order the queue engines asked for it. Any work asked for
while some waits, waits behind it (a subscriber gets its messages in the order it would have
without the wait); once the segment is decompressed, the waiting work is carried out on the
loop, in order, and may stop again at the next compressed segment.

The engines' state does not wait: a message is leased (and its lease period runs) when the
engine delivers it, as before; only the sending waits. A delivery whose lease ended while it
waited is not sent: the lease's end returned the message to the queue, which delivers it
again (with a lease of its own), so it is neither sent twice nor sent with a lease already over.
An at-most-once queue's message left the queue as it was leased, so its delivery is sent
whatever the wait: skipping it would lose the message.
The queue engine is told which deliveries wait and which of them were sent after all
(:func:`tell_engine`): a lease that ends unsent is no delivery, it does not count toward the
queue's MaxDeliveries.

A subscription's content filter (:class:`HeldFilter`) reads the records it tests the same way:
a record being decompressed is not eligible yet, nor anything after it for that subscription
(its messages keep their order); once decompressed, the queue dispatches again. Meanwhile the
filter answers None (not known yet), not False: a barrier released then is owed to the
subscription, which gets it (if its filter takes it) before anything after it, once the
queue dispatches again. Another subscription may take a message the waiting one would have
got: a queue does not promise which subscription gets a message, only that each gets the
oldest it can take when it has room, and the waiting one has no way to take one meanwhile.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable, Generator
from concurrent.futures import Future
from functools import partial
from typing import Any

from amps_emulator.journal import JournalClosedError, ReadHold, SegmentPending
from amps_emulator.protocol.filter import MessageContext
from amps_emulator.queues import Deliver
from amps_emulator.server.core.turn import SLICE_SECONDS, from_any_thread

log = logging.getLogger("amps_emulator.queues")
STEP_SECONDS = SLICE_SECONDS  # how long a sow query on a queue holds the event loop at a time

#: reads the record at a position (None: not in the log), with a hold (SegmentPending)
Read = Callable[[int, ReadHold], Any]
#: carries out an engine action for a queue with the action's record (or None)
Carry = Callable[[Any, Any, Any], None]
#: the time now, on the engines' clock
Now = Callable[[], float]
#: told of an action for a queue that begins to wait (False) or is carried out after a wait (True)
Tell = Callable[[Any, Any, bool], None]


class HeldWork:
    """Engine actions (a delivery, an expiry) that need their message's record, carried out
    in order; those whose record is being decompressed wait (see the module)."""

    def __init__(self, loop: Callable[[], Any], read: Read, carry: Carry,
                 now: Now | None = None, tell: Tell | None = None) -> None:
        self._loop = loop
        self._read = read
        self._carry = carry
        self._now = now
        self._tell = tell
        self.hold = ReadHold(self._woken)
        #: (queue, action) waiting, oldest first
        self.waiting: collections.deque[tuple[Any, Any]] = collections.deque()

    def run(self, q: Any, action: Any) -> None:
        """Carry out ``action`` for ``q`` now, or once what waits before it was."""
        if not self.waiting:
            try:
                rec = self._read(action.position, self.hold)
            except SegmentPending:
                pass
            else:
                self._carry(q, action, rec)
                return
        self.waiting.append((q, action))
        if self._tell is not None:
            self._tell(q, action, False)

    def _woken(self) -> None:
        """(the decompressing thread) The segment is decompressed (or refused)."""
        from_any_thread(self._loop(), self.drain)

    def drain(self) -> None:
        """Carry out what waits, in order, until a record is pending again."""
        waiting = self.waiting
        while waiting:
            q, action = waiting[0]
            try:
                rec = self._read(action.position, self.hold)
            except SegmentPending:
                return  # (woken again once that one is decompressed)
            except JournalClosedError:
                waiting.clear()  # the server stops
                return
            except Exception:  # (an unreadable record: that action only is given up)
                waiting.popleft()
                log.exception("queue %s: the record of a delivery that waited could not be read",
                              q.name)
                continue
            waiting.popleft()
            lease = getattr(action, "lease_expiry", None)
            if lease is not None and self._now is not None and lease <= self._now() \
                    and not q.engine.spec.at_most_once:
                continue  # (returned to the queue when its lease ended: delivered again)
            try:
                if self._tell is not None:
                    self._tell(q, action, True)
                self._carry(q, action, rec)
            except Exception:  # one action's failure must not keep the others waiting
                log.exception("queue %s: a delivery that waited for its record failed", q.name)


def tell_engine(q: Any, action: Any, sent: bool) -> None:
    """Tell ``q``'s engine that a delivery waits for its record (its lease is no delivery
    unless it is sent), or that it is sent after its wait."""
    if type(action) is Deliver:
        if sent:
            q.engine.delivery_sent(action.position, action.sub_key)
        else:
            q.engine.delivery_waits(action.position, action.sub_key)


class HeldFilter:
    """``eligible(position)`` of a queue subscription with a content filter, as the engine
    asks it while it dispatches: ``test(record)`` of the message's record. A record in a
    compressed segment not decompressed yet is read off the loop (see the module): meanwhile
    the answer is None (not known) for it and any later message, none is taken by the
    subscription, and once it is decompressed ``ready()`` (on the loop) has the queue
    dispatch again."""

    def __init__(self, loop: Callable[[], Any], read: Read, test: Callable[[Any], bool],
                 ready: Callable[[], None]) -> None:
        self._loop = loop
        self._read = read
        self._test = test
        self._ready = ready
        self.hold = ReadHold(self._woken)
        self.pending = False

    def __call__(self, position: int) -> bool | None:
        if self.pending:
            return None  # (behind a message whose record is being decompressed)
        try:
            rec = self._read(position, self.hold)
        except SegmentPending:
            self.pending = True
            return None
        return rec is not None and self._test(rec)

    def _woken(self) -> None:
        """(the decompressing thread) The segment is decompressed (or refused)."""
        from_any_thread(self._loop(), self._go_on)

    def _go_on(self) -> None:
        if not self.pending:
            return  # (a read ahead's segment: nothing waited for it)
        self.pending = False
        try:
            self._ready()
        except Exception:  # (the server stops, the record cannot be read): logged, not raised
            log.exception("queue dispatch after a decompressed segment failed")


def query_steps(read: Read, decode: Callable[[bytes, str], Any], msgs: list[Any], flt: Any,
                top_n: int | None) -> Generator[Future[None] | None, None, tuple[list[Any], int]]:
    """The records of ``msgs`` (a queue's messages) that pass ``flt`` (at most ``top_n``), and
    how many messages there are. Yields (None) every few ms: a deep queue, a costly filter
    must not hold the loop (``sow.drive``); and yields the decompression it waits for when a
    record is in a compressed segment not decompressed yet (the driver goes on once it is)."""
    out = []
    clock = time.monotonic
    step_end = clock() + STEP_SECONDS
    hold = ReadHold()
    for m in msgs:
        if clock() > step_end:  # (a record can be a megabyte read from disk)
            yield None
            step_end = clock() + STEP_SECONDS
        try:
            rec = read(m.position, hold)
        except SegmentPending:
            rec = yield from hold.read_again(partial(read, m.position))
        if rec is None:
            continue
        if flt is not None and not flt(decode(rec.body, rec.key), MessageContext(topic=rec.topic)):
            continue
        out.append(rec)
    if top_n is not None:
        out = out[:top_n]
    return out, len(msgs)


__all__ = ["HeldFilter", "HeldWork", "query_steps", "tell_engine"]
