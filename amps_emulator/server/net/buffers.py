"""What a connection keeps of its frames: a :class:`FrameQueue` (frames with their total size,
which the memory budget counts), its monitoring :class:`Counters`, and when the bytes of its
pending output are next measured (:class:`Pending`)."""

from __future__ import annotations

from collections.abc import Sized
from typing import Generic, NamedTuple, TypeVar

__all__ = ["BUDGET_STEP", "OVER_LIMIT", "OVER_MARK", "Counters", "FrameQueue", "Pending"]

BUDGET_STEP = 256 << 10  # a connection's buffers growing by this much re-check the budget
#: what :meth:`Pending.measure` found: the bytes pending are over the outbound limit, over the
#: memory budget's next mark
OVER_LIMIT, OVER_MARK = 1, 2


class Counters(NamedTuple):
    """A connection's monitoring counters at one moment (:meth:`Connection.counters`)."""

    bytes_in: int
    bytes_out: int
    messages_in: int
    messages_out: int
    queue_depth_out: int  # frames not yet handed to the transport (this turn's, held)
    #: bytes the server holds for the client: those frames, and what the transport could
    #: not write because the socket's send buffer is full
    queued_bytes_out: int
    #: seconds the oldest of those bytes has waited (0: the socket takes everything)
    queue_max_latency: float


F = TypeVar("F", bound=Sized)


class FrameQueue(Generic[F]):
    """Frames kept for later, with their total size (the memory budget counts it): encoded
    output, or received payloads (a large one a ``codec.SplitPayload``)."""

    __slots__ = ("frames", "nbytes")

    def __init__(self) -> None:
        self.frames: list[F] = []
        self.nbytes = 0

    def __bool__(self) -> bool:
        return bool(self.frames)

    def append(self, frame: F) -> None:
        self.frames.append(frame)
        self.nbytes += len(frame)

    def extend(self, frames: list[F]) -> None:
        self.frames.extend(frames)
        self.nbytes += sum(map(len, frames))

    def push_front(self, frames: list[F]) -> None:
        self.frames[:0] = frames
        self.nbytes += sum(map(len, frames))

    def take(self) -> list[F]:
        """Every frame, in order, leaving the queue empty."""
        frames, self.frames, self.nbytes = self.frames, [], 0
        return frames


class Pending:
    """When a connection measures its pending output (queued, held, and what the transport
    could not write yet) against its outbound limit and the memory budget's next mark. The
    transport's part is read (a call into the event loop's transport) only when an estimate
    reaches :attr:`at`: the size it had after the last write (:attr:`wbuf`), which can only have
    shrunk since, as the socket drains. So the decision is the one the real size gives, and a
    send far from any threshold costs one addition and a comparison."""

    __slots__ = ("wbuf", "at", "mark")

    def __init__(self, limit: int = 0) -> None:
        """``limit``: the outbound limit that holds at first (before logon)."""
        self.wbuf = 0  # the transport's buffer after the last write: at least what it holds
        #: queued bytes + wbuf above which the real size is measured (0: at the next send)
        self.at = min(limit, BUDGET_STEP)
        self.mark = BUDGET_STEP  # pending bytes at which the memory budget is checked next

    def measure(self, queued: int, wbuf: int, limit: int | None) -> int:
        """``queued`` bytes plus the transport's ``wbuf`` are pending: :data:`OVER_LIMIT` (over
        ``limit``; None: no limit applies), :data:`OVER_MARK` (the memory budget's next mark
        is passed: check it), else 0; sets the next threshold."""
        self.wbuf = wbuf
        pending = queued + wbuf
        if limit is not None and pending > limit:
            return OVER_LIMIT
        found = 0
        if pending > self.mark:
            self.mark = pending + BUDGET_STEP
            found = OVER_MARK
        elif self.mark > BUDGET_STEP and pending < BUDGET_STEP:
            self.mark = BUDGET_STEP
        self.at = self.mark if limit is None else min(limit, self.mark)
        return found

    def written(self, wbuf: int) -> None:
        """The transport holds ``wbuf`` bytes after a write (below a step: the first mark
        again, and the next send measures)."""
        self.wbuf = wbuf
        if self.mark > BUDGET_STEP and wbuf < BUDGET_STEP:
            self.mark = BUDGET_STEP
            self.at = 0
