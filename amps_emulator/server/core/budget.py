"""The one memory budget for what the server's sockets buffer.

Every socket that can make the server hold bytes for it (a client connection's partial
inbound frame, frames stashed or backlogged, output not yet written; a WebSocket still in
its HTTP upgrade) is a :class:`Holder` registered here while it is open. When a holder's
buffers grow by a step it asks :meth:`MemoryBudget.check`: if everything held together is
over the limit, the largest holders are closed until it is not. The budget does not poll;
holders report growth, so a check costs one pass over the open holders and happens once
per step of growth (``server.net.connection.BUDGET_STEP``), not per read.

The other listeners join by registering their open sockets with :meth:`MemoryBudget.add`
when they open and :meth:`MemoryBudget.discard` when they close, and by calling
:meth:`MemoryBudget.check` when one of them has grown: the replication links, both
the ones accepted on the replication port and the ones a Destination's connector opens
(``server.services.replication_accept.MeteredLink``: the frame being read, at its announced
size, or inflated, at its inflated size) and the Admin interface
(``server.ops.admin_http.Exchange``: the request held so far).
"""

from __future__ import annotations

import logging
from typing import Protocol

from amps_emulator.protocol import reasons

log = logging.getLogger("amps_emulator.server")

__all__ = ["Holder", "MemoryBudget"]


class Holder(Protocol):
    """One open socket as the budget sees it."""

    @property
    def closed(self) -> bool:
        """Closed: its buffers are dropped, it holds nothing any more."""

    def budget_bytes(self) -> int:
        """Bytes the server holds for it now, as the budget counts them."""

    def describe(self) -> str:
        """Who it is, for the log line that names it."""

    def close(self, why: str, abort: bool = False) -> None:
        """Close it and drop its buffers (``abort``: reset, without flushing output)."""


class MemoryBudget:
    """At most :attr:`limit` bytes buffered by all registered holders together."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._holders: set[Holder] = set()

    def __len__(self) -> int:
        return len(self._holders)

    def add(self, holder: Holder) -> None:
        """``holder`` opened: count what it buffers from now on."""
        self._holders.add(holder)

    def discard(self, holder: Holder) -> None:
        """``holder`` closed (or was handed to another holder that counts its bytes)."""
        self._holders.discard(holder)

    def held(self) -> int:
        """Bytes held by every open holder together."""
        return sum(h.budget_bytes() for h in self._holders if not h.closed)

    def check(self) -> bool:
        """Keep the total within :attr:`limit`: over it, close the holders holding the most
        until it holds again. False when someone was closed."""
        held = [(h.budget_bytes(), h) for h in self._holders if not h.closed]
        total = sum(n for n, _ in held)
        if total <= self.limit:
            return True
        held.sort(key=lambda t: t[0], reverse=True)
        for n, holder in held:
            if total <= self.limit:
                break
            log.warning("memory budget for buffered frames exceeded (%d bytes held, budget "
                        "%d): disconnecting %s, which holds %d bytes", total, self.limit,
                        holder.describe(), n)
            holder.close(f"{reasons.DISCONNECT_SLOW_CLIENT}: server memory budget exceeded",
                         abort=True)
            total -= n
        return False
