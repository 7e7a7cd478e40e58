"""Frames on a replication link: reading one (a 4-byte big-endian length, then the payload)
and writing to a link whose peer may have gone."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterable
from typing import Protocol

from amps_emulator.protocol.codec import ProtocolError

#: the largest replication frame accepted (a record is one message)
MAX_FRAME = 64 * 1024 * 1024
#: the largest frame accepted before the peer has logged on (its hello is small)
PRE_AUTH_FRAME = 1024 * 1024
#: a link's stream reader buffers up to twice this before it stops reading the socket: room
#: for a whole ``repl_batch`` frame (``batch.BATCH_BYTES`` of bodies), where the asyncio
#: default (64 KiB) paused and resumed the socket a few times within each frame
READ_LIMIT = 1024 * 1024


class FrameSource(Protocol):
    """What :func:`read_frame` reads from: an ``asyncio.StreamReader``, a reader that wraps
    one (the accepted side's, which counts the frame it reads in the server's memory budget),
    or the decompressing reader of a compressed link (``replication.compression``)."""

    async def readexactly(self, n: int) -> bytes: ...


class LinkWriter(Protocol):
    """What :func:`send` needs of a stream writer."""

    def is_closing(self) -> bool: ...
    def write(self, data: bytes | bytearray) -> None: ...
    def writelines(self, data: Iterable[bytes | bytearray]) -> None: ...


def send(writer: LinkWriter, data: bytes | bytearray | list[bytes | bytearray]) -> None:
    """Write to a link (``data``: one frame, or several, given to the transport as they
    are, without joining them first); a link whose peer went away raises
    ``ConnectionResetError`` (uvloop raises RuntimeError for a write on a closed transport,
    which would end the connector)."""
    if writer.is_closing():
        raise ConnectionResetError("replication peer closed the link")
    if isinstance(data, list):
        if len(data) != 1:
            writer.writelines(data)
            return
        data = data[0]
    writer.write(data)


def no_delay(writer: asyncio.StreamWriter) -> None:
    """TCP_NODELAY on the link's socket (asyncio and uvloop set it on TCP sockets already; a
    link must not depend on it): a small frame, an ack above all, is not held back waiting
    for the peer's ack of the previous segment."""
    sock = writer.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class Wakeup:
    """What a link's loop waits on between its turns: :meth:`set` by whatever gives it work
    (records appended or made durable, the peer's acks, a timer, its reader ending). One
    future per wait, none while set (an ``asyncio.Event`` waited on alongside the reader,
    with ``asyncio.wait``, made a task and two callbacks per wait)."""

    __slots__ = ("_flag", "_waiter")

    def __init__(self) -> None:
        self._flag = False
        self._waiter: asyncio.Future[None] | None = None

    def set(self) -> None:
        self._flag = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def clear(self) -> None:
        self._flag = False

    def is_set(self) -> bool:
        return self._flag

    async def wait(self) -> None:
        """Return once set (at once if it is)."""
        if self._flag:
            return
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        try:
            await waiter
        finally:
            self._waiter = None


async def read_frame(reader: FrameSource, limit: int = MAX_FRAME) -> bytes:
    """One frame's payload (without its 4-byte length). A length over ``limit`` is refused
    before any of the payload is read: nothing of an oversized frame is held."""
    size = int.from_bytes(await reader.readexactly(4), "big")
    if size > limit:
        raise ProtocolError(f"replication frame of {size} bytes (limit {limit})")
    return await reader.readexactly(size)


__all__ = ["MAX_FRAME", "PRE_AUTH_FRAME", "READ_LIMIT", "FrameSource", "LinkWriter", "Wakeup", "no_delay",
           "read_frame", "send"]
