"""Fault injection, for ``/emulator/faults`` (what a test of an application's failure handling
sets up instead of mocking the client).

A fault is a JSON document; each is applied when it is added and undone when it is cleared
(``DELETE /emulator/faults``, or ``/emulator/faults/<id>`` for one):

* ``{"kind": "delay", "client": NAME, "ms": N}``: output to the connections logged on as
  ``NAME`` (now, and those that log on under it while the fault is set) is written ``N`` ms
  later on the server clock (so the test clock holds it until it is advanced), in order.
  Their transport is wrapped; other clients' output path is not touched.
* ``{"kind": "drop", "client": NAME}``: that client is disconnected now (as a network failure:
  the connection is reset, nothing queued is written); with ``"every": S`` it is disconnected
  again every ``S`` seconds on the server clock whenever a connection holds that name.
* ``{"kind": "refuse", "transport": NAME}``: the transport stops listening, so new
  connections are refused (open ones go on); clearing the fault listens again.
* ``{"kind": "hold_acks", "seconds": S}``: persisted acks are withheld for ``S`` seconds on
  the server clock, then released (everything durable by then at once).
* ``{"kind": "disk_full"}``: the journal's writes fail as on ``ENOSPC`` (the journal's
  injected file layer, :class:`journal.testing.DiskFull`): publishes to recorded topics fail
  with ``tx store failure`` until the fault is cleared, when the log takes writes at once.

A document that is not one of these is refused with the reason (:class:`FaultError`, a 400);
a fault that cannot be applied to this server (no transaction log, ``--memory``) is a
:class:`FaultConflict` (a 409), a client or transport that does not exist a ``LookupError``.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from amps_emulator.journal import FileJournal
from amps_emulator.journal.segment import FileOps
from amps_emulator.journal.testing import DiskFull

if TYPE_CHECKING:
    from amps_emulator.server.core.ports import Timer
    from amps_emulator.server.core.turn import Turn
    from amps_emulator.server.messaging.broker import Broker
    from amps_emulator.server.net.connection import Connection
    from amps_emulator.server.services.txlog import TxLog

log = logging.getLogger("amps_emulator.faults")

REASON = "dropped by a fault injected through the emulator's admin interface"

#: kind -> {field: (types, required)}
_FIELDS: dict[str, dict[str, tuple[tuple[type, ...], bool]]] = {
    "delay": {"client": ((str,), True), "ms": ((int, float), True)},
    "drop": {"client": ((str,), True), "every": ((int, float), False)},
    "refuse": {"transport": ((str,), True)},
    "hold_acks": {"seconds": ((int, float), True)},
    "disk_full": {},
}


class FaultError(ValueError):
    """A fault document that is not one (HTTP 400)."""


class FaultConflict(Exception):
    """A fault this server cannot take (HTTP 409)."""


class FaultHost(Protocol):
    """What the faults read and change of the server (``server.app.Server``)."""

    connections: set[Connection]
    broker: Broker
    turn: Turn

    @property
    def listeners(self) -> list[Any]: ...
    @property
    def txlog(self) -> TxLog | None: ...
    def call_later(self, delay: float, callback: Callable[[], Any]) -> Any: ...
    def closed(self, client: Any) -> None: ...
    async def enable_listener(self, lst: Any) -> None: ...


@dataclasses.dataclass
class Fault:
    id: int
    doc: dict[str, Any]
    undo: Callable[[], None]
    #: what happened because of it so far (connections delayed, drops, ...)
    effect: dict[str, Any] = dataclasses.field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        return {"id": self.id, **self.doc, **self.effect}


def validate(doc: Any) -> dict[str, Any]:
    """The fault document ``doc`` checked (FaultError with the reason when it is not one)."""
    if not isinstance(doc, dict):
        raise FaultError("a fault is a JSON object with a \"kind\"")
    kind = doc.get("kind")
    if kind not in _FIELDS:
        raise FaultError(f"unknown fault kind {kind!r}: one of {', '.join(_FIELDS)}")
    fields = _FIELDS[kind]
    unknown = sorted(set(doc) - set(fields) - {"kind"})
    if unknown:
        raise FaultError(f"{kind}: unknown field(s) {', '.join(unknown)}; "
                         f"it takes {', '.join(fields) or 'nothing else'}")
    for name, (types, required) in fields.items():
        if name not in doc:
            if required:
                raise FaultError(f"{kind}: {name!r} is required")
            continue
        value = doc[name]
        if isinstance(value, bool) or not isinstance(value, types):
            want = "a string" if types == (str,) else "a number"
            raise FaultError(f"{kind}: {name!r} must be {want}, not {value!r}")
        if isinstance(value, str):
            if not value:
                raise FaultError(f"{kind}: {name!r} must not be empty")
        elif isinstance(value, (int, float)) and (
                not (value >= 0 if name == "ms" else value > 0) or not math.isfinite(value)):
            raise FaultError(f"{kind}: {name!r} must be {'>= 0' if name == 'ms' else '> 0'}")
    return dict(doc)


class Faults:
    def __init__(self, server: FaultHost) -> None:
        self.server = server
        self.active: dict[int, Fault] = {}
        self._next_id = 1
        self._tasks: set[asyncio.Task] = set()
        self._refill: list[Callable[[], None]] = []  # see journal_replaced

    def listed(self) -> list[dict[str, Any]]:
        return [f.describe() for f in self.active.values()]

    def add(self, doc: Any) -> dict[str, Any]:
        doc = validate(doc)
        fault = Fault(self._next_id, doc, lambda: None)
        getattr(self, "_" + doc["kind"])(fault)
        self._next_id += 1
        if doc["kind"] != "drop" or "every" in doc:  # a single drop is over once done
            self.active[fault.id] = fault
        log.warning("fault injected: %s", fault.describe())
        return fault.describe()

    def clear(self, ident: int | None = None) -> dict[str, Any]:
        if ident is not None and ident not in self.active:
            raise LookupError(f"no fault {ident}")
        ids = [ident] if ident is not None else list(self.active)
        for i in ids:
            fault = self.active.pop(i)
            fault.undo()
            log.warning("fault cleared: %s", fault.describe())
        return {"cleared": len(ids)}

    # -- the kinds ---------------------------------------------------------------------------
    def _named(self, name: str) -> list[Connection]:
        return sorted((c for c in self.server.connections
                       if c.client_name == name and not c.closed), key=lambda c: c.conn_id)

    def _delay(self, fault: Fault) -> None:
        name = fault.doc["client"]
        conns = self._named(name)
        if not conns:
            raise LookupError(f"no client {name!r} is connected")
        delay = fault.doc["ms"] / 1000.0
        wrapped: list[tuple[Connection, DelayedTransport]] = []
        fault.effect["connections"] = 0

        def wrap(client: Connection) -> None:
            inner = client.transport
            if inner is None or isinstance(inner, DelayedTransport):
                return
            dt = DelayedTransport(inner, delay, self.server.call_later)
            client.transport = dt
            wrapped.append((client, dt))
            fault.effect["connections"] += 1

        def logged_on(client: Any) -> None:  # a reconnect under the name is delayed too
            if client.client_name == name:
                for conn in self._named(name):
                    if conn is client:
                        wrap(conn)

        for conn in conns:
            wrap(conn)
        self.server.broker.logon_callbacks.append(logged_on)

        def undo() -> None:
            self.server.broker.logon_callbacks.remove(logged_on)
            for conn, dt in wrapped:
                dt.release()  # what waits goes out now, in order
                if conn.transport is dt:
                    conn.transport = dt.inner
        fault.undo = undo

    def _drop(self, fault: Fault) -> None:
        name = fault.doc["client"]
        every: float | None = fault.doc.get("every")
        if every is None and not self._named(name):
            raise LookupError(f"no client {name!r} is connected")
        fault.effect["drops"] = 0
        timer: list[Timer | None] = [None]

        def drop() -> None:
            for conn in self._named(name):
                conn.close(REASON, abort=True)
                self.server.closed(conn)
                fault.effect["drops"] += 1
            self.server.turn.request()

        def tick() -> None:
            timer[0] = None
            if fault.id in self.active:
                drop()
                timer[0] = self.server.call_later(period, tick)

        drop()
        period = float(every) if every is not None else 0.0
        if every is not None:
            timer[0] = self.server.call_later(period, tick)

        def undo() -> None:
            if timer[0] is not None:
                timer[0].cancel()
                timer[0] = None
        fault.undo = undo

    def _refuse(self, fault: Fault) -> None:
        name = fault.doc["transport"]
        lst = next((x for x in self.server.listeners if x.name == name), None)
        if lst is None:
            raise LookupError(f"no transport {name!r}")
        closed = lst.server is not None
        if lst.server is not None:
            lst.server.close()
            lst.server = None

        def undo() -> None:
            if closed and lst.server is None:
                task = asyncio.ensure_future(self.server.enable_listener(lst))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        fault.undo = undo

    def _txlog(self, kind: str) -> TxLog:
        tx = self.server.txlog
        if tx is None or not tx.is_open:
            raise FaultConflict(f"{kind}: the server has no transaction log")
        return tx

    def _hold_acks(self, fault: Fault) -> None:
        tx = self._txlog("hold_acks")
        if any(f.doc["kind"] == "hold_acks" for f in self.active.values()):
            raise FaultConflict("hold_acks: persisted acks are already withheld")
        tx.holding_acks = True
        timer: list[Timer | None] = [None]

        def release() -> None:
            timer[0] = None
            self.active.pop(fault.id, None)  # done: no longer active
            tx.release_held()

        timer[0] = self.server.call_later(float(fault.doc["seconds"]), release)

        def undo() -> None:
            if timer[0] is not None:
                timer[0].cancel()
                timer[0] = None
                tx.release_held()
        fault.undo = undo

    def _disk_full(self, fault: Fault) -> None:
        tx = self._txlog("disk_full")
        if not isinstance(tx.journal, FileJournal):
            raise FaultConflict("disk_full: the transaction log is in memory (--memory): "
                                "it writes no files")
        if any(f.doc["kind"] == "disk_full" for f in self.active.values()):
            raise FaultConflict("disk_full: the disk is already full")
        # (journal, its file layer before the fault): the journal a reset or a restore opens
        # is filled up too (:meth:`journal_replaced`)
        filled: list[tuple[FileJournal, FileOps]] = []

        def fill() -> None:
            journal = tx.journal if tx.is_open else None
            if isinstance(journal, FileJournal) and all(j is not journal for j, _ in filled):
                filled.append((journal, journal.file_ops))
                journal.file_ops = DiskFull(free=0)

        def undo() -> None:
            self._refill.remove(fill)
            for journal, previous in filled:
                journal.file_ops = previous
            if tx.is_open and tx.failed is not None:  # take writes again now,
                if tx._probe_timer is not None:  # not at the next probe
                    tx._probe_timer.cancel()
                tx._probe()

        fill()
        self._refill.append(fill)
        fault.undo = undo

    def journal_replaced(self) -> None:
        """The transaction log opened a new journal (a reset, a snapshot restore): the faults
        on the journal apply to it too."""
        for fill in list(self._refill):
            fill()


class DelayedTransport(asyncio.Transport):
    """A connection's transport whose writes reach the socket ``delay`` seconds later (on the
    server clock), in order; closing waits for them, aborting does not."""

    def __init__(self, inner: asyncio.Transport, delay: float,
                 call_later: Callable[[float, Callable[[], Any]], Any]) -> None:
        super().__init__()
        self.inner = inner
        self.delay = delay
        self._call_later = call_later
        self._waiting: collections.deque[bytes] = collections.deque()
        self._waiting_bytes = 0
        self._timers: list[Any] = []
        self._close_after = False

    def write(self, data: Any) -> None:
        data = bytes(data)
        self._waiting.append(data)
        self._waiting_bytes += len(data)
        self._timers.append(self._call_later(self.delay, self._one))

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def _one(self) -> None:
        if self._timers:
            self._timers.pop(0)
        if self._waiting:
            data = self._waiting.popleft()
            self._waiting_bytes -= len(data)
            if not self.inner.is_closing():
                self.inner.write(data)
        if self._close_after and not self._waiting:
            self.inner.close()

    def release(self) -> None:
        """Write everything waiting now (the fault was cleared)."""
        for t in self._timers:
            t.cancel()
        self._timers.clear()
        while self._waiting:
            self._one()

    def get_write_buffer_size(self) -> int:
        return self._waiting_bytes + self.inner.get_write_buffer_size()

    def close(self) -> None:
        if self._waiting:
            self._close_after = True
        else:
            self.inner.close()

    def abort(self) -> None:
        for t in self._timers:
            t.cancel()
        self._timers.clear()
        self._waiting.clear()
        self._waiting_bytes = 0
        self.inner.abort()

    def is_closing(self) -> bool:
        return self._close_after or self.inner.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.inner.get_extra_info(name, default)

    def pause_reading(self) -> None:
        self.inner.pause_reading()

    def resume_reading(self) -> None:
        self.inner.resume_reading()

    def is_reading(self) -> bool:
        return self.inner.is_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self.inner.set_write_buffer_limits(high, low)

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self.inner.get_write_buffer_limits()

    def can_write_eof(self) -> bool:
        return False

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.inner.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self.inner.get_protocol()
