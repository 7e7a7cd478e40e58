"""The asyncio side of ``Bootstrap`` (the sans-IO side, what is sent and when an instance
bootstraps, is :mod:`.bootstrap`): an instance that starts empty fills itself from a source
before its links start (:func:`fill_then_start`), logging on with its Bootstrap Transport's
Authenticator, and a source answers a bootstrap hello on its replication transport once that
logon is accepted (:func:`serve_bootstrap`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol

from amps_emulator.config.model import Bootstrap, DestinationTransport
from amps_emulator.journal import Journal, JournalRecord
from amps_emulator.protocol.codec import ProtocolError, split_frame
from amps_emulator.replication.bootstrap import BootstrapSource, mark
from amps_emulator.replication.link import Receiver
from amps_emulator.replication.stream import READ_LIMIT, FrameSource, Wakeup, read_frame, send
from amps_emulator.replication.wire import (
    BootstrapAsk,
    Hello,
    LinkRefused,
    Logon,
    NotAnEmulator,
    classify_first_frame,
)

if TYPE_CHECKING:
    from amps_emulator.sow import Sow

log = logging.getLogger("amps_emulator.replication")


class _Turn(Protocol):
    def request(self) -> None: ...


class _SowService(Protocol):
    @property
    def sow(self) -> Sow: ...


class BootstrapBroker(Protocol):
    """What a bootstrap reads of the server's broker: its turn (records applied here are
    written at its end) and its SOW, if any (what a bootstrap sends first)."""

    @property
    def turn(self) -> _Turn: ...
    @property
    def sow_service(self) -> _SowService | None: ...


class MeteredSource(FrameSource, Protocol):
    """A link's frames, read within the memory budget: ``why`` the budget closed it (None:
    it did not)."""

    why: str | None


class Metering(Protocol):
    """Counts what a link's peer makes the server hold in its memory budget (the service's
    ``Intake``): a link too costly for the budget is closed (with one log line)."""

    def meter(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str,
              name: str | None = None) -> MeteredSource: ...
    def unmeter(self, link: FrameSource) -> None: ...


class BootstrapHost(Protocol):
    """What a bootstrap needs of the replication service."""

    name: str
    group: str
    stopping: bool

    @property
    def intake(self) -> Metering:
        """What the source sends counts in the memory budget, as on the service's other links."""
    #: set by the service when records become durable (the waits here look again)
    wakeups: set[Wakeup]

    @property
    def broker(self) -> BootstrapBroker: ...
    def journal(self) -> Journal: ...
    def hello(self) -> Hello: ...
    async def logon_for(self, transport: DestinationTransport) -> Logon: ...
    async def wait(self, seconds: float) -> None: ...
    async def start_links(self) -> None: ...
    def apply_replicated(self, rec: JournalRecord) -> None: ...


async def fill_then_start(host: BootstrapHost, boot: Bootstrap, directory: str | None) -> None:
    """Fill this instance from the first reachable Bootstrap source (retried on the server
    clock until one answers), then start its replication links."""
    mark(directory, True)
    addresses = [(a, tr.reconnect_timeout(i), tr.client_context(), tr)
                 for tr in boot.transports for i, a in enumerate(tr.addresses)]
    done = False
    while not done and not host.stopping:
        for addr, retry, tls, tr in addresses:
            try:
                reader, writer = await asyncio.open_connection(addr.host, addr.port, ssl=tls,
                                                               limit=READ_LIMIT)
            except OSError as exc:
                log.warning("bootstrap: %s unreachable (%s)", addr.inet_addr, exc)
                await host.wait(retry)
                continue
            link = host.intake.meter(reader, writer, addr.inet_addr, f"bootstrap from {addr.inet_addr}")
            try:
                n = await _fill(host, boot, link, writer, await host.logon_for(tr))
            except (OSError, asyncio.IncompleteReadError, ProtocolError, NotAnEmulator,
                    LinkRefused) as exc:  # (closed by the budget: its own line said why)
                log.log(logging.WARNING if link.why is None else logging.DEBUG,
                        "bootstrap from %s failed: %s", addr.inet_addr, exc)
                await host.wait(retry)
                continue
            except Exception:  # a bug must not stop the bootstrap for good: say it, retry
                log.exception("bootstrap from %s failed", addr.inet_addr)
                await host.wait(retry)
                continue
            finally:
                writer.close()
                host.intake.unmeter(link)
            log.info("bootstrap from %s: %d records copied", addr.inet_addr, n)
            done = True
            break
    mark(directory, False)
    await host.start_links()

async def _fill(host: BootstrapHost, boot: Bootstrap, reader: FrameSource,
                writer: asyncio.StreamWriter, logon: Logon) -> int:
    """Fill this instance from the source at the other end; returns the records applied once
    they are durable here."""
    journal = host.journal()
    ask = BootstrapAsk(topics=tuple((t.name, t.message_type) for t in boot.topics),
                       data_types=tuple(boot.data_types))
    local = host.hello()
    send(writer, Hello(name=local.name, group=local.group, hw=local.hw, bootstrap=ask).encode(logon))
    await writer.drain()
    first = await read_frame(reader)
    h, _ = split_frame(first)
    if h.get("c") == "repl_refuse":
        raise LinkRefused(str(h.get("reason")))
    classify_first_frame(first)
    # no loop check: the messages this instance once published come back to it on purpose
    receiver = Receiver(journal, host)
    while True:
        h, body = split_frame(await read_frame(reader))
        if h.get("c") == "repl_boot":
            break
        receiver.handle_frame(h, body)
        host.broker.turn.request()
    wake = Wakeup()
    host.wakeups.add(wake)
    try:
        target = journal.last_position
        while journal.durable_position < target:
            wake.clear()
            host.broker.turn.request()
            await wake.wait()
    finally:
        host.wakeups.discard(wake)
    return receiver.applied

def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
    """``callback`` in ``loop``'s next pass, from any thread (nothing once the loop is closed)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback)


async def _send_all(writer: asyncio.StreamWriter, frames: Iterable[bytes]) -> None:
    for i, f in enumerate(frames):
        send(writer, f)
        if i % 500 == 499:
            await writer.drain()


async def serve_bootstrap(host: BootstrapHost, remote: Hello, ask: BootstrapAsk, writer: asyncio.StreamWriter,
                           reader: asyncio.StreamReader) -> None:
    sow = host.broker.sow_service
    source = BootstrapSource(ask, host.journal(), sow.sow.topics if sow is not None else {},
                             local_name=host.name, local_group=host.group)
    upto = host.journal().durable_position
    wake = Wakeup()  # (a compressed segment the source reads is decompressed in a worker)
    loop = asyncio.get_running_loop()
    source.hold.wake = lambda: _call_soon(loop, wake.set)
    while not source.ready():
        await wake.wait()
        wake.clear()
    await _send_all(writer, source.sow_frames())
    while True:
        wake.clear()
        await _send_all(writer, source.log_frames(upto))
        if not source.waiting:
            break
        await wake.wait()  # then it reads on from where it stopped
    send(writer, source.done_frame())
    await writer.drain()
    if source.without_bookmark:
        log.warning("bootstrap of %r: %d SOW records without a bookmark (topics not in the "
                    "transaction log) were not copied", remote.name, source.without_bookmark)
    log.info("bootstrap of %r: %d records sent", remote.name, source.sent)
    await reader.read()  # until it closes: it has applied them


__all__ = ["BootstrapHost", "fill_then_start", "serve_bootstrap"]
