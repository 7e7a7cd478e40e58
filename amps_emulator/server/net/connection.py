"""One client connection: the IO shell between a socket and the command handlers.

The asyncio protocol turns socket facts into calls: bytes are fed to the sans-IO
:class:`protocol.FrameDecoder`, each complete frame becomes a :class:`protocol.Command` and is
handed to the server's dispatch table. Outbound frames are queued per connection and
written once per event-loop turn by the server (after anything that must be durable first),
so a burst of deliveries costs one ``write`` call.

Outbound memory is bounded: when the bytes queued here plus the transport's own buffer exceed
the transport's limit, the client is disconnected as a slow consumer and its buffers are
dropped. All connections together share a memory budget for buffered frames
(``ConnectionHost.check_memory``, :mod:`server.core.budget`), which counts the partial frames
a wrapping framing (WebSocket, legacy) holds too (``inbound_extra``). A connection that does
not log on within ``ConnectionHost.logon_timeout`` of its socket's accept is closed. Before
its logon a connection is held to a small size (``ListenerInfo.logon_frame_limit``): a frame
announcing more is refused as soon as its length is read, and queued output past it
disconnects the client (:meth:`Connection.frame_before_logon`). A transport with slow client
offlining (a ``MessageMemoryLimit``: :mod:`.offlining`) works otherwise: its connections write
only what the socket takes, keep the rest, and are offlined (the rest goes to a file) or
disconnected by their pool's limits. A filter too long to compile in a few milliseconds
compiles in a worker thread while the connection is busy (``_compile_aside``).

A long SOW query runs in steps so that the event loop keeps serving everyone else
(:mod:`server.handlers.sow`). For the client that sent it, it still looks like one command
processed in order: while it runs the connection is *busy* (frames that arrive are stashed
and dispatched when it ends; reading pauses if the stash grows past :data:`STASH_LIMIT`) and
its other output (deliveries to its subscriptions, above all) is *held* and written after the
query's own frames, exactly where a query done in one step would have put it. Heartbeats and
the conflated persisted ack, which have no place in that order, are not held.

Fairness: a connection handles at most :data:`FRAMES_PER_PASS` frames per event-loop pass.
A read that carries more (a publisher streaming faster than the server can go: the loop
reads up to megabytes from its socket at once) keeps the rest in a backlog, pauses reading
and goes on in the next pass, after the end of the turn (the journal write, the group sync's
start, the persisted acks it released) and the other connections' input. Without this, one saturating
publisher made every other client wait for hundreds of milliseconds, and everyone's persisted acks too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from contextvars import Context, copy_context
from typing import TYPE_CHECKING, Any

from amps_emulator.protocol import reasons
from amps_emulator.protocol.codec import FrameDecoder, Payload, ProtocolError, frame, parse_command
from amps_emulator.protocol.codec import ack as encode_ack
from amps_emulator.protocol.command import Command
from amps_emulator.protocol.filter import compile_filter
from amps_emulator.protocol.filter.compiler import MAX_TEXT as MAX_FILTER_TEXT
from amps_emulator.protocol.reasons import CommandError
from amps_emulator.protocol.topics import display_name
from amps_emulator.server.core.amps_names import (
    HEARTBEAT_DISCONNECT,
    NAME_IN_USE_DISCONNECT,
    SLOW_CLIENT_DISCONNECT,
    amps_id,
)
from amps_emulator.server.core.heartbeat import Heartbeat
from amps_emulator.server.core.ports import ConnectionHost, ListenerInfo
from amps_emulator.server.net.admission import Admits, accepted_at, reset
from amps_emulator.server.net.beat_timer import BeatTimer
from amps_emulator.server.net.buffers import BUDGET_STEP, OVER_LIMIT, OVER_MARK, Counters, FrameQueue, Pending

if TYPE_CHECKING:
    from amps_emulator.auth import Session
    from amps_emulator.server.core.router import Subscription
    from amps_emulator.server.net.offlining import OfflinePool, Spool

log = logging.getLogger("amps_emulator.connection")

_HEARTBEAT_FRAME = frame({"c": "heartbeat"})
#: the disconnects AMPS logs under an id of their own (reason -> id, level)
_CLOSE_IDS = {reasons.DISCONNECT_HEARTBEAT: (HEARTBEAT_DISCONNECT, logging.ERROR),
              reasons.DISCONNECT_NAME_IN_USE: (NAME_IN_USE_DISCONNECT, logging.WARNING),
              reasons.DISCONNECT_SLOW_CLIENT: (SLOW_CLIENT_DISCONNECT, logging.ERROR)}
WRITE_HIGH_WATER = 1 << 20  # journal replays pause above this many unsent bytes
STASH_LIMIT = 4 << 20  # bytes of frames stashed while busy before reading pauses
PUMP_BYTES = 256 << 10  # what a connection of an offlining pool writes at a time
INLINE_FILTER = 2048  # longer filter texts compile off the event loop (~20 us a character)


def _precompile(text: str, context: Context) -> None:  # (context: the function libraries)
    with contextlib.suppress(Exception):  # (reported when the command runs)
        context.run(compile_filter, text)  # fills the compile cache, errors included


def _nothing() -> int:
    return 0


#: frames one connection handles per event-loop pass before yielding (see the module docstring):
#: about a millisecond or two of publishes
FRAMES_PER_PASS = 256


class Connection(asyncio.Protocol):
    def __init__(self, host: ConnectionHost, listener: ListenerInfo,
                 cap: Admits | None = None) -> None:
        """``cap``: the transport's connection cap, when this connection faces the socket
        itself (a wrapping framing admits its socket itself)."""
        self.host = host
        self._cap = cap
        self._admitted = False
        self._turn = host.turn  # where this connection's output waits for the end of the turn
        self._timebase = host.timebase
        self.listener = listener
        self.decoder = FrameDecoder(listener.max_frame)  # (split: once logged on)
        self.out_limit = listener.out_limit
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.conn_id = 0
        self.client_name: str | None = None
        self.user_id: str | None = None
        self.logged_on = False
        #: the logon's type (``mt``), else the transport's, else json (set by the logon)
        self.message_type = "json"
        self.session: Session | None = None  # the accepted logon, when security is configured
        self.closed = False
        self.subs: dict[str, Subscription] = {}
        self.heartbeat = Heartbeat()
        self.beats = BeatTimer(self.heartbeat, self._timebase, self._send_beat, self._beat_silent)
        self._out: list[bytes] = []
        self._out_bytes = 0
        self.persisted_seq: int | None = None  # highest publish seq to ack as persisted
        self.writing_paused = False
        # a command in progress over several loop steps (see the module docstring)
        self.busy = False
        # frames that arrived while busy, dispatched when the command in progress ends
        self._stash: FrameQueue[Payload] = FrameQueue()
        self._reading_paused = False
        # frames past this pass's FRAMES_PER_PASS, handled in the next pass (reading paused)
        self._backlog: FrameQueue[Payload] = FrameQueue()
        self._backlog_paused = False
        # output held back while busy (None: not busy), written when the command ends
        self._held: FrameQueue[bytes] | None = None
        self._direct = False
        # the query whose group_begin went out and whose group_end has not, with its query
        # id (begin_group / end_group): its failure closes the group first (fail)
        self._open_group: tuple[Command, str] | None = None
        # monitoring counters (read by server.stats; cheap integer adds on the message path)
        self.bytes_in = 0
        self.bytes_out = 0
        self.messages_in = 0
        self.messages_out = 0
        self.denied_reads = 0  # commands refused by entitlement (server.entitle)
        self.denied_writes = 0
        self.connect_time = 0.0  # set by the server when the connection opens
        self.client_version: str | None = None
        self.correlation_id: str | None = None
        self._ready_filter: str | None = None  # a long filter compiled aside (_compile_aside)
        self._logon_timer: asyncio.TimerHandle | None = None
        #: when the logon timeout ends (loop time); a wrapping framing sets it to its
        #: socket's accept time plus the timeout, else it starts at connection_made
        self.logon_deadline: float | None = None
        #: bytes of partial input a wrapping framing holds for this connection
        self.inbound_extra: Callable[[], int] = _nothing
        self._in_mark = BUDGET_STEP  # buffered bytes at which the memory budget is checked
        self._pending = Pending(min(self.out_limit, listener.logon_frame_limit))  # (see send)
        #: the transport's slow client offlining (None: none, see the module docstring)
        self.pool: OfflinePool | None = getattr(listener, "offline_pool", None)
        #: ClientMaxCapacity: the share of the pool's limits this connection may use
        self.capacity: float = getattr(listener, "offline_capacity", 0.5)
        #: frames the socket does not take yet (a connection of a pool, online)
        self._waiting: FrameQueue[bytes] = FrameQueue()
        #: where its frames wait once offlined (None: online)
        self.spool: Spool | None = None
        self._disk_mark = BUDGET_STEP
        #: since when the transport has held output the socket would not take (None: it
        #: holds nothing): the age of the oldest unsent byte, ``queue_max_latency``
        self._backed_since: float | None = None

    # -- asyncio.Protocol -------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self._cap is not None:
            if not self._cap.admit(transport):  # over the transport's MaxConnections
                self.closed = True
                return
            self._admitted = True
        self.transport = transport  # type: ignore[assignment]
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)  # type: ignore[attr-defined]
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer or self.listener.path)
        self.host.opened(self)
        timeout = self.host.logon_timeout
        if timeout:
            loop = self.host.loop
            deadline = self.logon_deadline
            if deadline is None:
                deadline = accepted_at(self._cap, loop.time()) + timeout
            self._logon_timer = loop.call_at(deadline, self._logon_expired)

    def _logon_expired(self) -> None:
        self._logon_timer = None
        if not self.logged_on:
            self.close(f"no logon within {self.host.logon_timeout:g}s", abort=True)

    def counters(self) -> Counters:
        """The monitoring counters, read-only (for :mod:`server.ops.stats`)."""
        held = self._held
        waiting = self.transport.get_write_buffer_size() \
            if self.transport is not None and not self.closed else 0
        since = self._backed_since
        if not waiting:
            since = self._backed_since = None
        return Counters(self.bytes_in, self.bytes_out, self.messages_in, self.messages_out,
                        len(self._out) + (len(held.frames) if held is not None else 0),
                        self._out_bytes + (held.nbytes if held is not None else 0) + waiting,
                        0.0 if since is None else max(0.0, self._timebase.monotonic() - since))

    def buffered_bytes(self) -> int:
        """Memory this connection holds in frames: a partial inbound frame, stashed frames,
        and output not yet taken by the kernel."""
        wbuf = self.transport.get_write_buffer_size() if self.transport is not None else 0
        held = self._held.nbytes if self._held is not None else 0
        return (self.decoder.buffered + self.inbound_extra() + self._stash.nbytes
                + self._backlog.nbytes + self._out_bytes + held + wbuf + self._waiting.nbytes)

    def budget_bytes(self) -> int:
        """What the server's memory budget counts of this connection: all it buffers, or,
        for a connection of an offlining pool (whose output the pool's limits govern), its
        input only."""
        if self.pool is None:
            return self.buffered_bytes()
        return (self.decoder.buffered + self.inbound_extra() + self._stash.nbytes
                + self._backlog.nbytes)

    def queued_bytes(self) -> int:
        """Bytes of frames not yet handed to the socket: what offlining moves to disk."""
        held = self._held.nbytes if self._held is not None else 0
        return self._out_bytes + self._waiting.nbytes + held

    def spool_bytes(self) -> int:
        """Bytes of frames waiting on disk (an offlined connection)."""
        return self.spool.pending if self.spool is not None else 0

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self.decoder.split = self.logged_on  # (no large frame is allocated before a logon)
        try:
            payloads = self.decoder.feed_payloads(data)
        except ProtocolError as exc:
            self.close(f"{reasons.DISCONNECT_PROTOCOL}: {exc}")
            return
        self.bytes_in += len(data)
        if not self.note_inbound(self.decoder.buffered):
            return
        self.received(payloads)
        if not self.logged_on and self.decoder.pending > self.listener.logon_frame_limit:
            self.frame_before_logon(self.decoder.pending)

    def note_inbound(self, buffered: int) -> bool:
        """``buffered`` bytes of a partial inbound frame are held for this connection now
        (by its decoder, or a wrapping framing's): each step of growth checks the memory
        budget. False when that closed this connection."""
        if buffered > self._in_mark:  # a large frame is arriving
            self._in_mark = buffered + BUDGET_STEP
            if not self.host.check_memory() and self.closed:
                return False
        elif self._in_mark > BUDGET_STEP and buffered < BUDGET_STEP:
            self._in_mark = BUDGET_STEP
        return True

    def frame_before_logon(self, size: int) -> None:
        """A frame of ``size`` bytes, more than the transport takes before a logon, is
        arriving: refused, and the connection closed, before it is buffered. While a logon
        is being decided (the connection is busy) reading pauses instead, until it is."""
        if self.closed or self.logged_on:
            return
        if self.busy:
            if not self._reading_paused and self.transport is not None:
                self._reading_paused = True  # (end_busy resumes reading)
                self.transport.pause_reading()
            return
        self.close(f"{reasons.DISCONNECT_PROTOCOL}: a frame of {size} bytes before logon "
                   f"(at most {self.listener.logon_frame_limit} before logon)", abort=True)

    def received(self, payloads: list[Payload]) -> None:
        """Bytes arrived (a heartbeat's worth of liveness) carrying these complete command
        payloads; the entry point for every framing (TCP here, :mod:`server.net.websocket`)."""
        if self.closed:
            return
        if self.heartbeat.active:
            self.heartbeat.received(self._timebase.monotonic())
        self.messages_in += len(payloads)
        if self._backlog:  # behind frames that arrived earlier
            self._backlog.extend(payloads)
            return
        self._run(payloads)

    def _run(self, payloads: list[Payload]) -> None:
        if len(payloads) > FRAMES_PER_PASS:
            self._defer(payloads[FRAMES_PER_PASS:])
            payloads = payloads[:FRAMES_PER_PASS]
        dispatch = self.host.dispatch
        # plain publishes go in runs (server.publish_run) once logged on, without a security
        # session (entitlements are checked command by command)
        runs = self.host.publish_runs if self.logged_on and self.session is None else None
        i = 0
        n = len(payloads)
        while i < n:
            if self.closed:
                return
            if self.busy:
                self._stash_frames(payloads[i:])
                return
            if runs is not None:
                j = runs(self, payloads, i)
                if j > i:
                    i = j
                    continue
            payload = payloads[i]
            i += 1
            try:
                cmd = parse_command(payload)
            except ProtocolError as exc:
                self.close(f"{reasons.DISCONNECT_PROTOCOL}: {exc}")
                return
            except CommandError as exc:
                self._reject_unparsed(exc)
                continue
            text = cmd.filter
            if text is not None and INLINE_FILTER < len(text) <= MAX_FILTER_TEXT \
                    and text != self._ready_filter:
                self._compile_aside(text, payloads[i - 1:])
                return
            dispatch(self, cmd)
            if runs is None and self.logged_on and self.session is None:
                runs = self.host.publish_runs  # (this command was the logon)

    def _defer(self, payloads: list[Payload]) -> None:
        """Keep ``payloads`` (the frames past this pass's budget) for the next pass; read
        nothing more until they are handled."""
        first = not self._backlog
        self._backlog.push_front(payloads)  # (ahead of any that arrived meanwhile)
        if first:
            self._turn.after(self._next_pass)
        if not self._backlog_paused and self.transport is not None:
            self._backlog_paused = True
            self.listener.throttled += 1  # the processors' throttle_count
            self.transport.pause_reading()

    def _next_pass(self) -> None:
        """Handle the backlog's next :data:`FRAMES_PER_PASS` frames (scheduling another pass
        for the rest); read again once it is empty."""
        backlog = self._backlog.take()
        if self.closed:
            return
        self._run(backlog)
        if not self._backlog and self._backlog_paused and not self.closed:
            self._backlog_paused = False
            if not self._reading_paused and self.transport is not None:
                self.transport.resume_reading()

    def _compile_aside(self, text: str, payloads: list[Payload]) -> None:
        """A long filter compiles in a worker thread (its lane: :mod:`.filter_lanes`) while this
        connection is busy (one compile at a time); its command runs once the filter is cached."""
        self.begin_busy()
        self._stash_frames(payloads)
        fut = self.host.loop.run_in_executor(self.host.filter_pool(len(text)), _precompile,
                                             text, copy_context())

        def compiled(_fut: Any) -> None:
            if self.closed:
                return
            self._ready_filter = text  # cached now (or its error): dispatch it inline
            self.end_busy()

        fut.add_done_callback(compiled)

    # -- a command over several loop steps -----------------------------------------------
    def _stash_frames(self, payloads: list[Payload]) -> None:
        self._stash.extend(payloads)
        # (before a logon: what arrives while it is decided, at most the small limit)
        limit = STASH_LIMIT if self.logged_on else self.listener.logon_frame_limit
        if self._stash.nbytes > limit and not self._reading_paused and self.transport:
            self._reading_paused = True
            self.listener.throttled += 1
            self.transport.pause_reading()

    def begin_busy(self) -> None:
        """A command continues in later loop steps: stash what arrives, hold other output."""
        self.busy = True
        self._held = FrameQueue()

    def end_busy(self) -> None:
        """The command is done: write the held output, then dispatch the stashed frames."""
        self.busy = False
        held, self._held = self._held, None
        for data in held.frames if held is not None else ():
            self.send(data)
        stash = self._stash.take()
        if stash:
            self._run(stash)
        if not self.busy and self._reading_paused and not self.closed and self.transport:
            self._reading_paused = False
            if not self._backlog_paused:  # (else the backlog's last pass resumes reading)
                self.transport.resume_reading()

    def send_direct(self, data: bytes) -> None:
        """Output of the command in progress itself: not held back."""
        self._direct = True
        try:
            self.send(data)
        finally:
            self._direct = False

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        if self.pool is not None and not self.closed:
            self._pump()
        self.host.writable(self)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._cap is not None:
            if not self._admitted:  # refused at connection_made: never opened
                return
            self._admitted = False
            self._cap.release()
        self.closed = True
        self._release()
        self.host.closed(self)

    def _release(self) -> None:
        """Closed: its timers stop and its buffers go."""
        self.beats.cancel()
        if self._logon_timer is not None:
            self._logon_timer.cancel()
            self._logon_timer = None
        if self.decoder.buffered:
            self.decoder = FrameDecoder(self.listener.max_frame)  # a partial frame's memory
        self._out.clear()
        self._out_bytes = 0
        self._held = None
        self._stash.take()
        self._backlog.take()
        self._waiting.take()
        if self.spool is not None:
            self.spool.close()
            self.spool = None

    # -- output -----------------------------------------------------------------------
    def send(self, data: bytes) -> None:
        """Queue one encoded frame for this turn's write (or hold it, see ``begin_busy``)."""
        if self.closed:
            return
        self.messages_out += 1
        if self._held is not None and not self._direct:
            self._held.append(data)
            self._measure()
            return
        if self.spool is not None:  # offlined: to its file, after what waits there
            self._spool_frames([data])
            return
        if not self._out:
            self._turn.dirty(self)
        self._out.append(data)
        self._out_bytes += len(data)
        # measured only near a threshold (see buffers.Pending)
        if self._out_bytes + self._waiting.nbytes + self._pending.wbuf > self._pending.at \
                or self._held is not None:
            self._measure()

    def _measure(self) -> None:
        limit = self.out_limit if self.logged_on else min(self.out_limit, self.listener.logon_frame_limit)
        # (once logged on, a connection of an offlining pool answers to the pool's limits)
        wbuf = self.transport.get_write_buffer_size()  # type: ignore[union-attr]
        found = self._pending.measure(self.queued_bytes(), wbuf,
                                      limit if self.pool is None or not self.logged_on else None)
        if found == OVER_LIMIT:
            self.close(f"{reasons.DISCONNECT_SLOW_CLIENT}: more than {limit} bytes pending"
                       + ("" if self.logged_on else " before logon"), abort=True)
        elif found == OVER_MARK:
            self.host.check_memory()

    def flush_output(self) -> None:
        """Write everything queued this turn (called by the server once per turn)."""
        if self.closed:
            return
        if self.persisted_seq is not None:
            self._out.append(encode_ack(None, "persisted", s=self.persisted_seq))
            self.persisted_seq = None
        out = self._out
        if self.pool is not None:
            self._flush_pooled()
            return
        if not out:
            return
        self._out = []
        self._out_bytes = 0
        data = out[0] if len(out) == 1 else b"".join(out)
        self.bytes_out += len(data)
        tr = self.transport
        if self._backed_since is not None and not tr.get_write_buffer_size():  # type: ignore[union-attr]
            self._backed_since = None  # it drained since: this write starts afresh
        tr.write(data)  # type: ignore[union-attr]
        self._pending.written(tr.get_write_buffer_size())  # type: ignore[union-attr]
        if self._backed_since is None and self._pending.wbuf:
            self._backed_since = self._timebase.monotonic()
        if self.heartbeat.active:
            self.heartbeat.sent(self._timebase.monotonic())

    # -- slow client offlining (a transport with a pool) ----------------------------------
    def _flush_pooled(self) -> None:
        """This turn's output after what waits already, then as much as the socket takes."""
        out, self._out, self._out_bytes = self._out, [], 0
        if self.spool is None:
            self._waiting.extend(out)
        elif out:  # (the persisted ack)
            self._spool_frames(out)
        if not self.closed:
            self._pump()

    def _spool_frames(self, frames: list[bytes]) -> None:
        """An offlined connection's output: to its file, for the next turn's write."""
        spool = self.spool
        if spool is None:
            return
        try:
            spool.append(frames)
        except OSError as exc:
            self.close(f"{reasons.DISCONNECT_SLOW_CLIENT}: its offline file failed: {exc}",
                       abort=True)
            return
        if spool.pending > self._disk_mark:  # the disk limits may be reached
            self._disk_mark = spool.pending + BUDGET_STEP
            if not self.host.check_memory() and self.closed:
                return
        self._turn.dirty(self)

    def _pump(self) -> None:
        """Write what waits (in memory, or on disk once offlined) while the socket takes it;
        an offlined connection whose file is all written is online again."""
        spool = self.spool
        before = self.bytes_out
        if spool is None:
            frames = self._waiting.take()
            i = 0
            while i < len(frames) and not self.writing_paused and not self.closed:
                j, size = i, 0
                while j < len(frames) and size < PUMP_BYTES:
                    size += len(frames[j])
                    j += 1
                self._write(b"".join(frames[i:j]))
                i = j
            if i < len(frames):
                self._waiting.push_front(frames[i:])
        else:
            while spool.pending and not self.writing_paused and not self.closed:
                self._write(b"".join(spool.take(PUMP_BYTES)))
        if self.bytes_out != before and self.heartbeat.active:
            self.heartbeat.sent(self._timebase.monotonic())
        if spool is not None and not spool.pending and not self.closed:
            spool.close()
            self.spool = None
            self._disk_mark = BUDGET_STEP
            log.warning("%s is consuming its messages again: back online", self.describe())
            self._turn.after(lambda: self.host.offline_changed(self, False))

    def _write(self, data: bytes) -> None:
        self.bytes_out += len(data)
        self.transport.write(data)  # type: ignore[union-attr]
        self._pending.written(self.transport.get_write_buffer_size())  # type: ignore[union-attr]

    def go_offline(self, spool: Spool) -> None:
        """From now on what waits for this connection, and what comes after, waits in
        ``spool`` (``OSError``: the file system refused it; nothing changed)."""
        spool.append([*self._waiting.frames, *self._out])
        self._waiting.take()
        self._out, self._out_bytes = [], 0
        self.spool = spool
        self._turn.dirty(self)  # its file starts being written out this turn
        # (told after this turn: the actions it runs publish, and may fill buffers again)
        self._turn.after(lambda: self.host.offline_changed(self, True))

    def note_persisted(self, seq: int) -> None:
        """Publishes up to ``seq`` are persisted: one conflated ack per turn, marked for once."""
        if (held := self.persisted_seq) is None or seq > held:
            self.persisted_seq = seq
            if held is None and not self._out:  # (not again for each of a run's, one by one)
                self._turn.dirty(self)

    def quiet(self) -> bool:
        """Nothing is queued for this turn's write (see ``TxLog._between_turns``)."""
        return not self._out

    def emit_persisted(self) -> None:
        """Queue the conflated persisted ack covering every publish seq accepted so far."""
        seq = self.persisted_seq
        if seq is None:
            return
        self.persisted_seq = None
        self.send(encode_ack(None, "persisted", s=seq))

    def persisted_failure(self, seq: int, reason: str) -> None:
        """A publish could not be persisted: the client's failed-write handler gets ``reason``."""
        self.send(encode_ack(None, "persisted", "failure", reason, s=seq))

    def ack(self, cmd: Command, ack_type: str, status: str = "success",
            reason: str | None = None, **extra: Any) -> None:
        """Send one ack for ``cmd`` echoing its cid, sub_id and query_id."""
        if cmd.sub_id is not None and "sub_id" not in extra:
            extra["sub_id"] = cmd.sub_id
        if cmd.query_id is not None and "query_id" not in extra:
            extra["query_id"] = cmd.query_id
        self.send(encode_ack(cmd.cid, ack_type, status, reason, **extra))

    def begin_group(self, cmd: Command, qid: str) -> None:
        """The results of the query ``cmd`` begin: ``group_begin``. Until :meth:`end_group`,
        a failure of ``cmd`` ends the group before it is reported (:meth:`fail`)."""
        self._open_group = (cmd, qid)
        self.send(frame({"c": "group_begin", "t": display_name(cmd.topic), "query_id": qid}))

    def end_group(self, cmd: Command, qid: str) -> None:
        """The results of the query ``cmd`` are all sent: ``group_end``."""
        if self._open_group is not None and self._open_group[0] is cmd:
            self._open_group = None
        self.send(frame({"c": "group_end", "t": display_name(cmd.topic), "query_id": qid}))

    def fail(self, cmd: Command, reason: str) -> None:
        """Failure ack on the ``processed`` ack (or the first one requested).

        A query that fails once its ``group_begin`` is out has had its ``processed`` ack
        (success): its ``group_end`` goes out, then the failure on the acks that end the
        query, ``completed`` and ``stats`` (the official client's query stream ends on
        ``group_end`` plus the ack it waits for, and a ``completed`` ack before
        ``group_end`` would drop the route). Without either, the failure goes on
        ``processed`` as for any command."""
        acks = cmd.acks
        group = self._open_group
        if group is not None and group[0] is cmd:
            self.end_group(cmd, group[1])
            ending = [a for a in ("completed", "stats") if a in acks]
            if ending:
                for final in ending:
                    self.ack(cmd, final, "failure", reason)
                return
        if not acks:
            log.info("%s: %s failed (%s); no ack requested", self.describe(), cmd.command, reason)
            return
        ack_type = "processed" if "processed" in acks else sorted(acks)[0]
        self.ack(cmd, ack_type, "failure", reason)

    def refuse_logon(self, cmd: Command, reason: str, why: str) -> None:
        """A refused logon: the failure ack (if one was asked for) goes out now, then the
        connection closes (what AMPS does on an authentication failure)."""
        self._stash.take()
        self._held = None
        self.busy = False
        self.fail(cmd, reason)
        self.flush_output()
        self.close(f"logon refused ({reason}): {why}")

    def _reject_unparsed(self, exc: CommandError) -> None:
        log.warning("%s: bad command: %s", self.describe(), exc)
        bad = exc.command
        if isinstance(bad, Command) and bad.ack_type:
            self.fail(bad, exc.reason)
        elif exc.cid is not None:
            self.send(encode_ack(exc.cid, "processed", "failure", exc.reason))

    # -- heartbeats --------------------------------------------------------------------
    def start_heartbeat(self, interval: float) -> None:
        if not self.closed:
            self.beats.start(interval)

    def stop_heartbeat(self) -> None:
        self.beats.stop()

    def _send_beat(self) -> None:
        self.send_direct(_HEARTBEAT_FRAME)  # not held back by a query in progress

    def _beat_silent(self, silent: float) -> None:
        self.close(f"{reasons.DISCONNECT_HEARTBEAT}: nothing received for {silent:.3g}s "
                   f"(heartbeat interval {self.heartbeat.interval or 0:g}s)")

    # -- lifecycle ---------------------------------------------------------------------
    def describe(self) -> str:
        return f"client {self.client_name or '(no logon)'} [{self.peer}]"

    def close(self, why: str, abort: bool = False) -> None:
        if self.closed:
            return
        self.closed = True
        ident, level = _CLOSE_IDS.get(why.partition(":")[0], (None, logging.WARNING))
        log.log(level, "disconnecting %s: %s", self.describe(), why,
                extra=None if ident is None else amps_id(ident))
        self._release()
        if self.transport is not None:
            if abort:
                reset(self.transport)
            else:
                self.transport.close()
