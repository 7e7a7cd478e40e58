"""What a connection keeps of its frames: a :class:`FrameQueue` (frames with their total size,
which the memory budget counts), and its monitoring :class:`Counters`."""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Counters", "FrameQueue"]


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


class FrameQueue:
    """Frames kept for later, with their total size (the memory budget counts it)."""

    __slots__ = ("frames", "nbytes")

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.nbytes = 0

    def __bool__(self) -> bool:
        return bool(self.frames)

    def append(self, frame: bytes) -> None:
        self.frames.append(frame)
        self.nbytes += len(frame)

    def extend(self, frames: list[bytes]) -> None:
        self.frames.extend(frames)
        self.nbytes += sum(map(len, frames))

    def push_front(self, frames: list[bytes]) -> None:
        self.frames[:0] = frames
        self.nbytes += sum(map(len, frames))

    def take(self) -> list[bytes]:
        """Every frame, in order, leaving the queue empty."""
        frames, self.frames, self.nbytes = self.frames, [], 0
        return frames
