"""Slow client offlining: a resource pool of memory and disk for the messages waiting for
slow clients, as AMPS's ``MessageMemoryLimit``, ``MessageDiskLimit``, ``MessageDiskPath`` and
``ClientMaxCapacity`` configure it (the instance's pool, or a transport's own).

A connection of a pool keeps what its socket cannot take yet in memory (it writes no more
than the socket takes, :data:`connection.WRITE_HIGH_WATER`): those frames are the memory the
pool counts (``Connection.queued_bytes``). :meth:`OfflinePool.enforce` (run when a
connection's buffers grew by a step) then decides, in the order AMPS documents:

* a client holding more than its share (``ClientMaxCapacity``) of the memory limit, and,
  while the pool's clients together hold more than the limit, the one holding the most, are
  *offlined*: what waits for them, and everything after, goes to a file of their own under
  ``MessageDiskPath`` (a :class:`Spool`), read back as their socket takes it;
* an offlined client holding more than its share of memory and disk together, and, while the
  offlined clients together hold more than the disk limit, the one holding the most, is
  disconnected (its file is removed).

A client whose file is read to its end is back online. Each change is logged and reported
to the server (``ConnectionHost.offline_changed``: the ``on-offline-start`` and
``on-offline-stop`` actions).
"""

from __future__ import annotations

import logging
import os
import struct
import tempfile
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from amps_emulator.protocol import reasons

if TYPE_CHECKING:
    from amps_emulator.server.net.connection import Connection

__all__ = ["OfflinePool", "Spool"]

log = logging.getLogger("amps_emulator.connection")

_LEN = struct.Struct(">I")


class Spool:
    """The frames an offlined connection has not written yet, in a file of its own, in order
    (each with its length, so they are read back whole)."""

    def __init__(self, directory: str) -> None:
        os.makedirs(directory, exist_ok=True)
        self._file = tempfile.TemporaryFile(dir=directory, prefix="amps-offline-")
        self._end = 0  # where the next frame is written
        self._at = 0  # where the next frame is read
        #: bytes of frames written and not read yet (what the disk limit counts)
        self.pending = 0

    def append(self, frames: Iterable[bytes]) -> None:
        """Add ``frames`` after the others (``OSError``: the file system refused them)."""
        f = self._file
        f.seek(self._end)
        n = 0
        for data in frames:
            f.write(_LEN.pack(len(data)))
            f.write(data)
            n += len(data)
            self._end += 4 + len(data)
        self.pending += n

    def take(self, limit: int) -> list[bytes]:
        """The next frames, about ``limit`` bytes of them (at least one)."""
        f = self._file
        f.flush()
        f.seek(self._at)
        out: list[bytes] = []
        size = 0
        while self._at < self._end and (not out or size < limit):
            (n,) = _LEN.unpack(f.read(4))
            out.append(f.read(n))
            self._at += 4 + n
            size += n
        self.pending -= size
        if self._at >= self._end:  # all read: start the file again
            f.seek(0)
            f.truncate()
            self._at = self._end = 0
        return out

    def close(self) -> None:
        self._file.close()  # (a temporary file: removed)


class OfflinePool:
    """One resource pool (see the module docstring)."""

    def __init__(self, name: str, policy: Any) -> None:
        """``policy``: the :class:`config.model.SlowClients` of the pool (its memory limit set;
        each connection has its own ``ClientMaxCapacity``, ``Connection.capacity``)."""
        self.name = name
        self.memory_limit: int = policy.memory_limit
        self.disk_limit: int = policy.disk_bytes
        self.disk_path: str = policy.disk_path

    def enforce(self, members: Iterable[Connection]) -> bool:
        """Offline and disconnect the pool's clients as the limits say; False when one was
        disconnected."""
        conns = [c for c in members if not c.closed]
        # what waits for each in memory (the socket's own buffer aside: it is the socket's)
        held = {c: c.queued_bytes() for c in conns}
        for c in conns:
            if c.spool is None and held[c] > c.capacity * self.memory_limit:
                self._offline(c, held[c], f"more than its {c.capacity:.0%} share")
        total = sum(c.queued_bytes() for c in conns if not c.closed)
        online = sorted((c for c in conns if c.spool is None and not c.closed),
                        key=lambda c: held[c], reverse=True)
        for c in online:
            if total <= self.memory_limit or held[c] == 0:
                break
            self._offline(c, held[c], "the most of the pool")
            total = sum(c.queued_bytes() for c in conns if not c.closed)
        return self._disk(conns)

    def _offline(self, conn: Connection, held: int, why: str) -> None:
        try:
            conn.go_offline(Spool(self.disk_path))
        except OSError as exc:
            conn.close(f"{reasons.DISCONNECT_SLOW_CLIENT}: cannot offline its messages to "
                       f"{self.disk_path}: {exc}", abort=True)
            return
        log.warning("%s is a slow client, holding %d bytes (%s; the limit of transport pool %s "
                    "is %d): offlining its messages to %s", conn.describe(), held, why, self.name,
                    self.memory_limit, self.disk_path)

    def _disk(self, conns: list[Connection]) -> bool:
        ok = True
        limits = self.memory_limit + self.disk_limit
        offline = [c for c in conns if c.spool is not None and not c.closed]
        for c in offline:
            if c.queued_bytes() + c.spool_bytes() > c.capacity * limits:
                self._disconnect(c, f"more than its {c.capacity:.0%} share of memory and disk")
                ok = False
        offline = sorted((c for c in offline if not c.closed), key=lambda c: c.spool_bytes(),
                         reverse=True)
        disk = sum(c.spool_bytes() for c in offline)
        for c in offline:
            if disk <= self.disk_limit:
                break
            disk -= c.spool_bytes()
            self._disconnect(c, f"the most of the pool's disk limit ({self.disk_limit} bytes)")
            ok = False
        return ok

    def _disconnect(self, conn: Connection, why: str) -> None:
        conn.close(f"{reasons.DISCONNECT_SLOW_CLIENT}: not consuming its messages, holding "
                   f"{conn.spool_bytes()} bytes offline ({why})", abort=True)
