"""The end of an event-loop turn, as ordered and named stages.

Whatever a turn's input produced is finished in one pass when the turn ends: first the
stages the owner registered, in order (the SOW commit, then the journal's end of turn, which
writes, starts the group sync and releases what became durable), then the writes of every
client that has output. Persist, then reply: a client never reads an ack for something that
is not yet where the ack says it is.

:class:`Turn` owns the "end of turn is scheduled" flag and the list of clients with output;
handlers and services ask for the end of the turn with :meth:`Turn.request` and a
connection with output joins it with :meth:`Turn.dirty`, so none of them needs the server.
The composition root registers the stages (``Server.start``) and binds the loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from amps_emulator.server.core.ports import Client

log = logging.getLogger("amps_emulator.server")

#: how long one long operation (a query, a delete, a replay, a queue query) holds the event
#: loop at a time: past it, the operation goes on in the loop's next pass, after the end of
#: the turn and the other clients' input. Each step of such an operation is well under it
#: (about a thousand records), so a pass lasts at most a few milliseconds more.
SLICE_SECONDS = 0.004


def contain(client: Client, what: str) -> None:
    """Call from an ``except`` block: an unforeseen error in work for one client is logged
    once, naming it, and costs that client its connection, nobody else."""
    if client.closed:
        return
    log.exception("%s: internal error in %s; disconnecting it", client.describe(), what)
    client.close(f"internal error in {what}", abort=True)


def from_any_thread(loop: asyncio.AbstractEventLoop, callback: Callable[..., None],
                    *args: object) -> None:
    """Run ``callback(*args)`` in ``loop``'s next pass; any thread may call this (a worker's
    result is applied on the loop). Nothing happens once the loop is closed (server stopped)."""
    try:
        loop.call_soon_threadsafe(callback, *args)
    except RuntimeError:
        pass


class Turn:
    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None  # bound when the server starts
        #: set when the server stops: the stages no longer run, output still goes out
        self.stopping = False
        self._stages: list[tuple[str, Callable[[], None]]] = []
        self._dirty: list[Client] = []
        self._after: list[Callable[[], None]] = []
        self._scheduled = False

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def stage(self, name: str, run: Callable[[], None]) -> None:
        """Add a stage that runs at the end of every turn, after those added before it and
        before the writes."""
        self._stages.append((name, run))

    def dirty(self, client: Client) -> None:
        self._dirty.append(client)
        if not self._scheduled:
            self._scheduled = True
            self._schedule()

    def after(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` in the loop's next pass, after this turn's end (which it
        requests). A connection's frames past its pass's budget go on so: the journal write,
        the group sync's start and the persisted acks of this turn come first, not after
        another pass of frames."""
        self._after.append(callback)
        self.request()

    def settle(self) -> None:
        """End the turn now if its end is due: a long operation calls this before each slice,
        so that what the other clients' commands produced since the last one (their replies
        above all) goes out first instead of waiting behind the slice."""
        if self._scheduled and self.loop is not None:
            self.end()

    def request(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            self._schedule()

    def _schedule(self) -> None:
        if self.loop is None:
            raise RuntimeError("Turn.request before the server started")
        self.loop.call_soon(self.end)

    def end(self) -> None:
        """End of turn: the stages in order, then the writes. An unforeseen error in one
        stage is logged and the rest still runs: the flag must never stay set, or no client
        would get another byte."""
        try:
            if not self.stopping:
                for name, run in self._stages:
                    try:
                        run()
                    except Exception:
                        log.exception("internal error at the end of a turn (%s); carrying on",
                                      name)
            dirty, self._dirty = self._dirty, []
        finally:
            self._scheduled = False
        for client in dirty:  # writes: after everything above is durable
            try:
                client.flush_output()
            except Exception:
                contain(client, "writing its output")
        if self._after and self.loop is not None:
            after, self._after = self._after, []
            for callback in after:
                self.loop.call_soon(callback)
        if self._dirty:
            self.request()
