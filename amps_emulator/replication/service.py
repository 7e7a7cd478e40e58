"""The replication links over asyncio: the listener on the ``amps-replication`` transport
(downstream: records arrive, are applied through the message path and acknowledged) and one
connector per active ``Replication/Destination`` (upstream: durable journal records go out).

Both drive the sans-IO halves of :mod:`.link` and :mod:`.wire`:

* connector: connect to the Destination's InetAddr list in order, send this instance's
  :class:`~.wire.Hello`, read the peer's (or its ``repl_refuse``), check it, then start a
  :class:`~.link.Sender` at what the peer lacks (resync) and keep sending records as they
  become durable here; each ``repl_ack`` advances the sender. A failed or lost link is retried
  after the Destination's ReconnectTimeout, measured on the server clock.
* listener: read the first frame; anything but an emulator's hello gets one log line and a
  close. Otherwise answer with this instance's hello and run a :class:`~.link.Receiver`
  whose :class:`~.link.ApplyPort` is ``publish.apply_replicated``; acks go back once what
  was applied is durable here.

The journal tells the links of new and newly durable records through :meth:`notify`, which
the server calls at the end of every turn and after every group sync.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Protocol

from amps_emulator.config.model import Bootstrap, Config, Destination, ReplicationAddress
from amps_emulator.config.values import is_regex
from amps_emulator.journal import Journal, JournalRecord
from amps_emulator.protocol.codec import ProtocolError, split_frame
from amps_emulator.protocol.reasons import CommandError

from .bootstrap import BootstrapSource, mark, needs_bootstrap
from .link import Receiver, Selection, Sender, ack_position
from .wire import (
    BootstrapAsk,
    Hello,
    LinkRefused,
    NotAnEmulator,
    Route,
    RouteTopic,
    TopicFacts,
    check_peer,
    classify_first_frame,
    fact_key,
    refuse_frame,
)

if TYPE_CHECKING:
    from amps_emulator.server.broker import Broker
    from amps_emulator.server.clock import SystemClock, TestClock

log = logging.getLogger("amps_emulator.replication")

#: the largest replication frame accepted (a record is one message)
MAX_FRAME = 64 * 1024 * 1024


class LinkWriter(Protocol):
    """What :func:`send` needs of a stream writer."""

    def is_closing(self) -> bool: ...
    def write(self, data: bytes) -> None: ...


def send(writer: LinkWriter, data: bytes) -> None:
    """Write to a link; a link whose peer went away raises ``ConnectionResetError`` (uvloop
    raises RuntimeError for a write on a closed transport, which would end the connector)."""
    if writer.is_closing():
        raise ConnectionResetError("replication peer closed the link")
    writer.write(data)


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    """One frame's payload (without its 4-byte length)."""
    size = int.from_bytes(await reader.readexactly(4), "big")
    if size > MAX_FRAME:
        raise ProtocolError(f"replication frame of {size} bytes")
    return await reader.readexactly(size)


class ReplicationService:
    """Every replication link of one instance."""

    def __init__(self, config: Config, broker: Broker, journal: Callable[[], Journal],
                 timebase: SystemClock | TestClock, *, apply: Callable[[JournalRecord], None]) -> None:
        self.config = config
        self.broker = broker
        self._journal = journal
        self.timebase = timebase
        #: the message path for a replicated record (``publish.apply_replicated``)
        self.apply = apply
        self.name = config.name
        self.group = config.group_name
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._wakeups: set[asyncio.Event] = set()
        self.stopping = False
        #: destination name -> the connected peer's instance name (for the Admin and tests)
        self.connected: dict[str, str] = {}
        #: destination name -> its sender while connected (what it sent: ``messages_out``)
        self.senders: dict[str, Sender] = {}
        #: upstream instance name -> the receiver of its link while connected
        self.receivers: dict[str, Receiver] = {}
        #: destination name -> the last upstream position it acknowledged (kept while it is away)
        self.acked: dict[str, int] = {}
        self.listen_port: int | None = None

    # -- lifecycle --------------------------------------------------------------------------
    async def start(self) -> None:
        boot = self.config.replication.bootstrap
        txcfg = self.config.transaction_log
        directory = txcfg.journal_directory if txcfg is not None else None
        if boot is not None and needs_bootstrap(self._journal(), directory):
            # filled from the source first: the links (and peers' links in) start afterwards
            self._spawn(self._bootstrap_then_start(boot, directory))
            return
        await self._start_links()

    async def _start_links(self) -> None:
        listener = self.config.replication_listener
        if listener is not None:
            self._server = await asyncio.start_server(self._accepted, listener.host, listener.port,
                                                      reuse_address=True)
            self.listen_port = self._server.sockets[0].getsockname()[1]
            log.info("replication transport %r listening on port %d", listener.name, self.listen_port)
        for dest in self.config.replication.destinations:
            if not dest.passive:
                self._spawn(self._connector(dest))

    async def stop(self) -> None:
        self.stopping = True
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._server is not None:
            await self._server.wait_closed()

    def apply_replicated(self, rec: JournalRecord) -> None:
        """The :class:`~.link.ApplyPort`: through the message path like a local publish. The
        record is in the journal already; one this instance cannot apply (its SOW topic has
        other Keys) is logged, and the link goes on."""
        try:
            self.apply(rec)
        except CommandError as exc:
            log.error("replicated record %s on %r is in the transaction log but could not be "
                      "applied here: %s", rec.bookmark_str, rec.topic, exc)

    def pins(self) -> list[int]:
        """Journal positions retention must keep (replication.md 2.5): per Destination, the
        first record it has not acknowledged. A destination not connected since start-up pins
        the whole log: what its instance holds is known only once it connects."""
        journal = self._journal()
        out: list[int] = []
        for dest in self.config.replication.destinations:
            sender = self.senders.get(dest.name)
            acked = sender.acked_through if sender is not None else self.acked.get(dest.name)
            out.append(journal.first_position if acked is None else acked + 1)
        return out

    def _forget_sender(self, dest_name: str) -> None:
        sender = self.senders.pop(dest_name, None)
        if sender is not None:
            self.acked[dest_name] = sender.acked_through

    def notify(self) -> None:
        """Records were appended or became durable: the links look again."""
        for ev in self._wakeups:
            ev.set()

    def _spawn(self, coro: Coroutine[object, object, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- what this instance says about itself ------------------------------------------------
    def hello(self) -> Hello:
        """What this instance tells a peer: its Name, Group, per-publisher high-water marks, and
        the facts the validation checks read (SOW topics, queues, recorded topics, Destinations)."""
        journal = self._journal()
        config = self.config
        txcfg = config.transaction_log
        facts: dict[str, TopicFacts] = {}

        def recorded(name: str, mtype: str) -> bool:
            return txcfg is not None and txcfg.records(name, mtype)

        for dest in config.replication.destinations:  # literal topics replicated without a SOW
            for t in dest.topics:
                if not is_regex(t.name):
                    facts[fact_key(t.name, t.message_type)] = TopicFacts(
                        txlog=recorded(t.name, t.message_type), sow_keys=None, queue=None, underlying=None)
        for s in config.sow_topics:
            facts[fact_key(s.name, s.message_type)] = TopicFacts(
                txlog=recorded(s.name, s.message_type), sow_keys=tuple(s.keys), queue=None, underlying=None)
        for q in config.queues:
            facts[fact_key(q.name, q.message_type)] = TopicFacts(
                txlog=recorded(q.name, q.message_type), sow_keys=None, queue=q.kind,
                underlying=q.underlying_topic)
        routes = tuple(
            Route(name=d.name, group=d.group, pass_through=d.pass_through,
                  topics=tuple(RouteTopic(name=t.name, message_type=t.message_type, filter=t.filter,
                                          validations=tuple(sorted(t.validations))) for t in d.topics))
            for d in config.replication.destinations)
        txlog = tuple((t.name, t.message_type) for t in txcfg.topics) if txcfg is not None else ()
        return Hello(name=self.name, group=self.group, hw=journal.high_water_marks(), facts=facts,
                     txlog=txlog, routes=routes)

    @staticmethod
    def checks(dest: Destination, local: Hello) -> tuple[dict[str, frozenset[str]], dict[str, str | None]]:
        """Per topic this Destination selects, the validation checks and the Filter it keeps."""
        keep: dict[str, frozenset[str]] = {}
        filters: dict[str, str | None] = {}
        for key in local.facts:
            topic, mtype = key.split("\x00", 1)
            selected = dest.selects(topic, mtype)
            if selected is not None:
                keep[key] = selected.validations
                filters[key] = selected.filter
        return keep, filters

    # -- upstream ------------------------------------------------------------------------------
    async def _connector(self, dest: Destination) -> None:
        addresses: list[tuple[ReplicationAddress, float]] = []
        for tr in dest.transports:
            addresses += [(a, tr.reconnect_timeout(i)) for i, a in enumerate(tr.addresses)]
        refused: dict[str, str] = {}  # address -> the last refusal's reason
        while not self.stopping:
            for addr, retry in addresses:
                try:
                    reader, writer = await asyncio.open_connection(addr.host, addr.port)
                except OSError as exc:
                    log.debug("replication destination %r: %s unreachable (%s)", dest.name,
                              addr.inet_addr, exc)
                    await self._wait(retry)
                    continue
                try:
                    await self._run_upstream(dest, reader, writer)
                except (OSError, asyncio.IncompleteReadError, ProtocolError, NotAnEmulator) as exc:
                    log.warning("replication destination %r (%s): link lost: %s", dest.name,
                                addr.inet_addr, exc)
                except LinkRefused as exc:
                    # once per reason: the link is retried every ReconnectTimeout
                    level = logging.DEBUG if refused.get(addr.inet_addr) == exc.reason else logging.ERROR
                    refused[addr.inet_addr] = exc.reason
                    log.log(level, "replication destination %r (%s) refused: %s", dest.name,
                            addr.inet_addr, exc.reason)
                except Exception:  # a bug must not end the link for good: say it, retry
                    log.exception("replication destination %r (%s): link failed", dest.name,
                                  addr.inet_addr)
                finally:
                    writer.close()
                await self._wait(retry)

    async def _wait(self, seconds: float) -> None:
        """Wait ``seconds`` on the server clock (a test clock advances it by hand)."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def elapsed() -> None:
            if not done.done():
                done.set_result(None)

        handle = self.timebase.call_later(seconds, elapsed)
        try:
            await done
        finally:
            handle.cancel()

    async def _run_upstream(self, dest: Destination, reader: asyncio.StreamReader,
                            writer: asyncio.StreamWriter) -> None:
        local = self.hello()
        send(writer, local.encode())
        await writer.drain()
        first = await read_frame(reader)
        h, _ = split_frame(first)
        if h.get("c") == "repl_refuse":
            raise LinkRefused(str(h.get("reason")))
        remote = classify_first_frame(first)
        try:
            sender = self._sender(dest, local, remote)
        except LinkRefused as exc:
            send(writer, refuse_frame(exc.reason))
            await writer.drain()
            raise
        log.info("replication destination %r connected to %r (%s)", dest.name, remote.name, dest.sync_type)
        try:
            await self._run_link(remote, reader, writer, sender)
        finally:
            self.connected.pop(dest.name, None)
            self._forget_sender(dest.name)

    def _sender(self, dest: Destination, local: Hello, remote: Hello) -> Sender:
        """Check the peer for this Destination (:class:`LinkRefused`), then a sender started at
        what the peer lacks (resync), registered as the destination's."""
        keep, filters = self.checks(dest, local)
        check_peer(local, remote, expected_group=dest.group, expected_name=dest.name,
                   checks=keep, filters=filters)
        sender = Sender(self._journal(), Selection(dest, remote.name), local_name=self.name,
                        local_group=self.group)
        sender.start(remote.hw)
        self.connected[dest.name] = remote.name
        self.senders[dest.name] = sender
        return sender

    async def _run_link(self, remote: Hello, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        sender: Sender | None) -> None:
        """One connection after the handshake, in both directions: ``sender`` (if this side
        sends on it) writes records and reads the peer's acks; records the peer sends are
        applied by a receiver (created when the first arrives) and acknowledged once durable."""
        broker = self.broker
        receiver: Receiver | None = None
        wake = asyncio.Event()
        self._wakeups.add(wake)

        async def read() -> None:
            nonlocal receiver
            while True:
                payload = await read_frame(reader)
                h, body = split_frame(payload)
                c = h.get("c")
                if c == "repl_ack":
                    if sender is None:
                        raise ProtocolError("replication ack on a link this instance does not send on")
                    sender.on_ack(ack_position(payload))
                    continue
                if receiver is None:
                    receiver = Receiver(self._journal(), self, local_name=self.name)
                    self.receivers[remote.name] = receiver
                receiver.handle_frame(h, body)  # raises LinkRefused on repl_refuse
                broker.turn.request()  # the journal writes (and syncs) what arrived at the turn's end

        reading = asyncio.get_running_loop().create_task(read())
        try:
            while True:
                wake.clear()
                out: list[bytes] = sender.poll() if sender is not None else []
                if receiver is not None:
                    ack = receiver.take_ack(self.timebase.monotonic())
                    if ack is not None:
                        out.append(ack)
                if out:
                    send(writer, b"".join(out))
                    await writer.drain()
                    continue  # look again before waiting: a poll sends at most 1000 records
                waiter = asyncio.ensure_future(wake.wait())
                done, _ = await asyncio.wait({waiter, reading}, return_when=asyncio.FIRST_COMPLETED)
                if reading in done:
                    waiter.cancel()
                    reading.result()  # the link is gone: raises what ended it
                    raise ConnectionResetError("replication peer closed the link")
        finally:
            if receiver is not None and self.receivers.get(remote.name) is receiver:
                del self.receivers[remote.name]
            self._wakeups.discard(wake)
            reading.cancel()

    # -- bootstrap -----------------------------------------------------------------------------
    async def _bootstrap_then_start(self, boot: Bootstrap, directory: str | None) -> None:
        mark(directory, True)
        addresses = [(a, tr.reconnect_timeout(i))
                     for tr in boot.transports for i, a in enumerate(tr.addresses)]
        done = False
        while not done and not self.stopping:
            for addr, retry in addresses:
                try:
                    reader, writer = await asyncio.open_connection(addr.host, addr.port)
                except OSError as exc:
                    log.warning("bootstrap: %s unreachable (%s)", addr.inet_addr, exc)
                    await self._wait(retry)
                    continue
                try:
                    n = await self._bootstrap(boot, reader, writer)
                except (OSError, asyncio.IncompleteReadError, ProtocolError, NotAnEmulator,
                        LinkRefused) as exc:
                    log.warning("bootstrap from %s failed: %s", addr.inet_addr, exc)
                    await self._wait(retry)
                    continue
                except Exception:  # a bug must not stop the bootstrap for good: say it, retry
                    log.exception("bootstrap from %s failed", addr.inet_addr)
                    await self._wait(retry)
                    continue
                finally:
                    writer.close()
                log.info("bootstrap from %s: %d records copied", addr.inet_addr, n)
                done = True
                break
        mark(directory, False)
        await self._start_links()

    async def _bootstrap(self, boot: Bootstrap, reader: asyncio.StreamReader,
                         writer: asyncio.StreamWriter) -> int:
        """Fill this instance from the source at the other end; returns the records applied once
        they are durable here."""
        journal = self._journal()
        ask = BootstrapAsk(topics=tuple((t.name, t.message_type) for t in boot.topics),
                           data_types=tuple(boot.data_types))
        local = self.hello()
        send(writer, Hello(name=local.name, group=local.group, hw=local.hw, bootstrap=ask).encode())
        await writer.drain()
        first = await read_frame(reader)
        h, _ = split_frame(first)
        if h.get("c") == "repl_refuse":
            raise LinkRefused(str(h.get("reason")))
        classify_first_frame(first)
        # no loop check: the messages this instance once published come back to it on purpose
        receiver = Receiver(journal, self)
        while True:
            h, body = split_frame(await read_frame(reader))
            if h.get("c") == "repl_boot":
                break
            receiver.handle_frame(h, body)
            self.broker.turn.request()
        wake = asyncio.Event()
        self._wakeups.add(wake)
        try:
            target = journal.last_position
            while journal.durable_position < target:
                wake.clear()
                self.broker.turn.request()
                await wake.wait()
        finally:
            self._wakeups.discard(wake)
        return receiver.applied

    async def _serve_bootstrap(self, remote: Hello, ask: BootstrapAsk, writer: asyncio.StreamWriter,
                               reader: asyncio.StreamReader) -> None:
        sow = self.broker.sow
        source = BootstrapSource(ask, self._journal(), sow.sow.topics if sow is not None else {},
                                 local_name=self.name, local_group=self.group)
        upto = self._journal().durable_position
        for frames in (source.sow_frames(), source.log_frames(upto)):
            for i, f in enumerate(frames):
                send(writer, f)
                if i % 500 == 499:
                    await writer.drain()
        send(writer, source.done_frame())
        await writer.drain()
        if source.without_bookmark:
            log.warning("bootstrap of %r: %d SOW records without a bookmark (topics not in the "
                        "transaction log) were not copied", remote.name, source.without_bookmark)
        log.info("bootstrap of %r: %d records sent", remote.name, source.sent)
        await reader.read()  # until it closes: it has applied them

    # -- downstream ----------------------------------------------------------------------------
    def _passive_for(self, remote: Hello) -> Destination | None:
        """The passive Destination (no InetAddr) that names the instance which connected."""
        for dest in self.config.replication.destinations:
            if dest.passive and dest.group == remote.group and dest.name in (dest.group, remote.name):
                return dest
        return None

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        me = asyncio.current_task()
        if me is not None:  # stop() cancels the links it accepted too
            self._tasks.add(me)
        passive: Destination | None = None
        try:
            first = await read_frame(reader)
            remote = classify_first_frame(first)
            local = self.hello()
            try:
                check_peer(local, remote, expected_group=None, expected_name=None, checks={})
            except LinkRefused as exc:
                log.error("replication link from %s refused: %s", peer, exc.reason)
                send(writer, refuse_frame(exc.reason))
                await writer.drain()
                return
            send(writer, local.encode())
            await writer.drain()
            if remote.bootstrap is not None:
                await self._serve_bootstrap(remote, remote.bootstrap, writer, reader)
                return
            log.info("replication link from %r (%s) accepted", remote.name, peer)
            sender = None
            passive = self._passive_for(remote)
            if passive is not None and passive.name not in self.connected:
                try:  # replicate to it over the connection it made (replication.md 1.3)
                    sender = self._sender(passive, local, remote)
                    log.info("replication destination %r (passive) connected to %r (%s)", passive.name,
                             remote.name, passive.sync_type)
                except LinkRefused as exc:
                    log.error("replication destination %r (passive) refused: %s", passive.name, exc.reason)
            if sender is None:
                passive = None
            await self._run_link(remote, reader, writer, sender)
        except NotAnEmulator as exc:
            log.error("replication transport: connection from %s closed: %s", peer, exc)
        except LinkRefused as exc:
            log.error("replication link from %s refused by the upstream: %s", peer, exc.reason)
        except (OSError, asyncio.IncompleteReadError, ProtocolError) as exc:
            log.warning("replication link from %s lost: %s", peer, exc)
        except asyncio.CancelledError:
            # stop(): ends normally, since asyncio's stream server logs a cancelled handler
            log.debug("replication link from %s closed: the server stops", peer)
        finally:
            if passive is not None:
                self.connected.pop(passive.name, None)
                self._forget_sender(passive.name)
            writer.close()
            if me is not None:
                self._tasks.discard(me)


__all__ = ["ReplicationService", "read_frame"]
