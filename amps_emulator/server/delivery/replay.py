"""Bookmark subscriptions: journal cursors that replay, then follow the log live.

A bookmark subscription never goes through the live fan-out. It is a cursor over the
journal: each time the durable position advances (or, with the ``live`` option, each time the
log is written) the cursor reads on from where it stopped, applies the subscription's topic
and filter, and delivers with ``bm``. Because the replay and the live part are the same read
of the same log, the cut-over has no gap and no duplicate by construction, however fast
publishes keep arriving during the replay.

A cursor delivers at most ``CHUNK`` messages per step and yields to the event loop between
steps; it stops while the client's socket is backed up and resumes when it drains, so a
replay of a large log keeps memory bounded and other clients served. It also stops where it
reaches a compressed segment that is not decompressed yet: that is done in a worker thread
(``journal.stored``), and the cursor goes on from the same position once it is.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Callable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from amps_emulator.journal import ReadHold, RecordKind, SegmentPending
from amps_emulator.protocol import reasons
from amps_emulator.protocol.bookmarks import (
    BookmarkError,
    BookmarkRange,
    BookmarkTimestamp,
    format_timestamp,
    parse_bookmark,
)
from amps_emulator.protocol.codec import ack as encode_ack
from amps_emulator.protocol.codec import frame_raw, json_str
from amps_emulator.protocol.filter import MessageContext
from amps_emulator.protocol.reasons import CommandError
from amps_emulator.server.core.turn import SLICE_SECONDS, contain, from_any_thread
from amps_emulator.server.delivery import replay_frames
from amps_emulator.server.delivery.fanout import delivery_tail, selected

if TYPE_CHECKING:
    from amps_emulator.journal import FileJournal, JournalRecord, MemoryJournal
    from amps_emulator.protocol.bodies import Bodies
    from amps_emulator.protocol.command import Command
    from amps_emulator.server.core.ports import Client, DeliveryWatch, TxLogService
    from amps_emulator.server.core.processors import Processors
    from amps_emulator.server.core.router import ReadEntitlement, Subscription
    from amps_emulator.sow.query import Select

    #: the journal a cursor reads
    Journal = FileJournal | MemoryJournal

log = logging.getLogger("amps_emulator.replay")

CHUNK = 2000
STEP_SECONDS = SLICE_SECONDS  # how long one replay step may scan the log
_DELIVERABLE = frozenset((int(RecordKind.PUBLISH), int(RecordKind.DELTA_PUBLISH)))


class ReplayHost(Protocol):
    """What a journal cursor reads of the broker: its transaction log, loop and clock."""

    txlog: TxLogService | None
    stopping: bool
    #: the server's codecs (a filter or select list reads a typed body with its type's)
    bodies: Bodies
    #: told of each message replayed (``on-deliver-message``); None: nobody watches
    delivered: DeliveryWatch | None
    #: what a replay reads and sends is counted in ``processors.bookmark``
    processors: Processors

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    def clock(self) -> float: ...

    def call_later(self, delay: float, callback: Callable[[], Any]) -> Any: ...


#: where a replay starts (None: the bookmark was not found) and, for a range, where it stops
Positions = tuple[int | None, int | None]


def _journal(broker: ReplayHost) -> Journal:
    """The journal a cursor reads (a cursor exists only on a server with a transaction log)."""
    txlog = broker.txlog
    if txlog is None:
        raise RuntimeError("a journal cursor on a server without a transaction log")
    return txlog.journal


def _safe(broker: ReplayHost) -> int:
    """How far ``bm`` acks may go: durable here and acknowledged by every sync destination."""
    txlog = broker.txlog
    if txlog is None:
        raise RuntimeError("a journal cursor on a server without a transaction log")
    return txlog.safe_position


def _limit(broker: ReplayHost, cursor: Cursor) -> int:
    """The last position ``cursor`` may deliver: appended (``live``), acknowledged by every
    sync replication destination (``fully_durable``), else durable here."""
    journal = _journal(broker)
    if cursor.live:
        return journal.last_position
    return _safe(broker) if cursor.fully_durable else journal.durable_position


class Rate:
    """The ``rate=`` option of a bookmark replay: at most ``n`` messages a second (``1000``),
    ``n`` bytes a second (``100KB``), or ``n`` times the pace the messages were originally
    published at (``1.5X``); ``rate_max_gap=<duration>`` caps the wait between two messages.
    ``clock``: monotonic seconds."""

    __slots__ = ("kind", "value", "clock", "t0", "sent", "ts0", "max_gap", "last_at",
                 "last_ts")

    def __init__(self, text: str, clock: Callable[[], float],
                 max_gap: str | None = None) -> None:
        from amps_emulator.config.units import parse_size

        t = text.strip()
        try:
            if t[-1:] in "xX":
                self.kind, self.value = "x", float(t[:-1])
            elif t.replace(".", "", 1).isdigit():
                self.kind, self.value = "msgs", float(t)
            else:
                self.kind, self.value = "bytes", float(parse_size(t))
        except (ValueError, IndexError):
            raise CommandError(reasons.INVALID_OPTIONS, f"rate={text}") from None
        if not self.value > 0:
            raise CommandError(reasons.INVALID_OPTIONS, f"rate={text}: must be positive")
        self.max_gap: float | None = None  # rate_max_gap: the longest wait between two
        if max_gap is not None:
            from amps_emulator.config.units import parse_duration

            try:
                self.max_gap = parse_duration(max_gap)
            except ValueError:
                raise CommandError(reasons.INVALID_OPTIONS, f"rate_max_gap={max_gap}") from None
        self.clock = clock
        self.t0: float | None = None  # when the pacing (re)started
        self.sent = 0.0  # messages or bytes sent since
        self.ts0 = 0  # the publish time (microseconds) the pacing started from, for "x"
        self.last_at = 0.0  # when the last message went

    def wait(self, size: int, ts_us: int) -> float:
        """Seconds before a message of ``size`` bytes published at ``ts_us`` may go (0: now;
        it is then counted as sent)."""
        now = self.clock()
        if self.t0 is None:
            self.t0, self.ts0 = now, ts_us
        if self.kind == "x":
            due = self.t0 + (ts_us - self.ts0) / 1_000_000 / self.value
        else:
            due = self.t0 + self.sent / self.value
        if self.max_gap is not None and due > self.last_at + self.max_gap:
            due = self.last_at + self.max_gap
            if due <= now:  # the gap is capped: pace again from this message
                self.t0, self.ts0, self.sent = now, ts_us, 0.0
        if due > now:
            return due - now
        self.sent += size if self.kind == "bytes" else 1
        self.last_at = now
        return 0.0


class Cursor:
    __slots__ = (
        "sub", "conn", "cmd", "next_pos", "stop_pos", "live", "remaining", "want_completed",
        "want_persisted", "caught_up", "paused", "blocked", "done", "scheduled", "last_pos",
        "last_bm", "acked_bm", "timestamp", "rate", "delay", "catch_up_pos", "host", "fully_durable",
        "stored_at", "hold", "waiting", "since", "__weakref__",
    )

    def __init__(self, host: ReplayHost, sub: Subscription, cmd: Command, next_pos: int,
                 stop_pos: int | None) -> None:
        self.host = host  # where the cursor is pumped
        opts = cmd.opts
        self.sub = sub
        self.conn = sub.conn
        self.cmd = cmd
        self.next_pos = next_pos
        self.stop_pos = stop_pos  # exclusive end of a range, None = follow forever
        self.live = "live" in opts
        self.fully_durable = "fully_durable" in opts
        top_n = opts.get("top_n") or cmd.top_n
        self.remaining = int(top_n) if top_n not in (None, True) else None
        self.want_completed = "completed" in cmd.acks
        self.want_persisted = "persisted" in cmd.acks
        self.caught_up = False
        self.paused = "pause" in opts
        self.blocked = False
        self.done = False
        self.scheduled = False
        self.last_pos = 0
        self.last_bm: str | None = None
        self.acked_bm: str | None = None
        self.timestamp = "timestamp" in opts
        self.rate: Rate | None = None  # the rate= option (see start())
        self.delay = 0.0  # seconds the next step waits (rate limiting)
        # The log's end when the subscription arrived: ``completed`` goes once everything up to
        # here was replayed, also when part of it was still waiting for its fsync.
        self.catch_up_pos = 0
        #: where the replay from stored frames stopped in the log (replay_frames.deliver)
        self.stored_at: tuple[int, str, int] | None = None
        #: the compressed segment decompressed for the cursor (its reads never block the loop)
        self.hold = ReadHold(partial(_woken, weakref.ref(self)))
        #: stopped until the segment at ``next_pos`` is decompressed (``_woken`` goes on)
        self.waiting = False
        #: how to find where the replay starts (and a range's stop), and the log's next
        #: position when the subscription came, until the first step finds it (``_resolve``):
        #: a timestamp bookmark, or one whose resolving waits for a compressed segment
        self.since: tuple[Callable[[Journal, ReadHold], Positions], int] | None = None

    # what the transaction log calls (ports.JournalCursor)
    def pump(self, limit: int) -> None:
        pump(self.host, self, limit)

    def persisted(self, durable: int) -> None:
        send_persisted_ack(self, durable)


def start(broker: ReplayHost, client: Client, cmd: Command, sub: Subscription) -> Cursor:
    """Resolve the subscription's bookmark to a journal position and create its cursor."""
    txlog = broker.txlog
    if txlog is None or (sub.regex is None and not txlog.recorded(sub.topic)):
        raise CommandError(reasons.TX_LOG_NOT_FOUND, f"topic {sub.topic!r} is not recorded")
    try:
        spec = parse_bookmark(cmd.bookmark or "")
    except BookmarkError as exc:
        raise CommandError(reasons.INVALID_BOOKMARK, str(exc)) from None
    journal = txlog.journal
    stop: int | None = None
    # (a message this instance does not hold: when the subscriber failed over from an
    # instance that had more, it starts where it may have missed nothing held here)
    resolve = partial(_positions, spec=spec, unheld="bookmark_not_found" not in cmd.opts)
    later = isinstance(spec, BookmarkTimestamp)  # found by the first step (_resolve)
    if not later:
        try:
            begin, stop = resolve(journal, ReadHold())
        except SegmentPending:  # a record it reads is being decompressed: also found later
            later = True
    if later:  # (that may wait for a compressed segment; until then, pin all)
        begin, stop = journal.first_position, None
    if begin is None:
        mode = cmd.opts.get("bookmark_not_found", "now")
        if mode == "epoch":
            begin = journal.first_position
        elif mode == "fail":
            raise CommandError(reasons.INVALID_BOOKMARK, f"bookmark {cmd.bookmark!r} not found")
        else:
            begin = journal.next_position
    cursor = Cursor(broker, sub, cmd, begin, stop)
    cursor.catch_up_pos = journal.last_position
    if later:
        cursor.since = (resolve, journal.next_position)
    rate = cmd.opts.get("rate")
    if rate is not None:
        if cursor.live or not isinstance(rate, str):
            raise CommandError(reasons.INVALID_OPTIONS, "rate= needs a value and no live option")
        gap = cmd.opts.get("rate_max_gap")
        cursor.rate = Rate(rate, broker.clock, gap if isinstance(gap, str) else None)
    return cursor


def pump(broker: ReplayHost, cursor: Cursor, limit: int) -> None:
    """Deliver what the cursor may see up to log position ``limit`` (one chunk at most).
    An unforeseen error ends this subscription's client only (logged once), never the
    end-of-turn work for the other cursors."""
    try:
        _pump(broker, cursor, limit)
    except Exception:
        stop(broker, cursor)
        contain(cursor.conn, f"subscription {cursor.sub.sub_id}")


def _woken(ref: weakref.ref[Cursor]) -> None:
    """(any thread) The compressed segment a cursor stopped at is decompressed (or refused):
    it goes on from where it stopped, on the loop."""
    cursor = ref()
    if cursor is not None:
        from_any_thread(cursor.host.loop, _resume, cursor)


def _resume(cursor: Cursor) -> None:
    cursor.waiting = False
    schedule(cursor.host, cursor)


def _records(journal: FileJournal | MemoryJournal, cursor: Cursor) -> Iterator[JournalRecord]:
    """The log from the cursor's position on; ends early, ``cursor.waiting`` set, at a
    compressed segment still being decompressed (it wakes the cursor once it is)."""
    try:
        yield from journal.read(cursor.next_pos, hold=cursor.hold)
    except SegmentPending:
        cursor.waiting = True


def _positions(journal: Journal, hold: ReadHold, *, spec: Any, unheld: bool = False) -> Positions:
    """Where a replay from bookmark ``spec`` starts (None: not found) and, for a range, where
    it stops (``hold``: see ``journal.read``). ``unheld``: a message bookmark not found here
    starts at ``journal.position_for_unheld`` (if that finds a start)."""
    if isinstance(spec, BookmarkTimestamp):
        return journal.position_at_time(spec.micros, hold), None
    if isinstance(spec, BookmarkRange):
        begin, stop = journal.range_positions(spec, hold)
    else:  # maybe after a failover
        begin, stop = journal.position_after_bookmark(spec, resume=True, hold=hold), None
    if begin is None and unheld:
        begin = journal.position_for_unheld(hold)
    return begin, stop


def at_time(micros: int) -> Callable[[Journal, ReadHold], Positions]:
    """A cursor's ``since`` (with the log's next position then) for a replay from the first
    record logged at or after ``micros`` (microseconds since the epoch)."""
    return partial(_positions, spec=BookmarkTimestamp(micros))


def _resolve(broker: ReplayHost, cursor: Cursor) -> bool:
    """Start (and stop, a range) the cursor where its bookmark says, as the log was when the
    subscription came (records logged since come after it): the first record at or after a
    timestamp, or what waited for a compressed segment; False while a segment it reads is
    being decompressed."""
    assert cursor.since is not None
    resolve, then_next = cursor.since
    try:
        begin, stop = resolve(_journal(broker), cursor.hold)
    except SegmentPending:
        cursor.waiting = True
        return False
    cursor.next_pos = then_next if begin is None else min(begin, then_next)
    if stop is not None:
        cursor.stop_pos = min(stop, then_next)
    cursor.since = None
    return True


def _pump(broker: ReplayHost, cursor: Cursor, limit: int) -> None:
    if cursor.done or cursor.waiting or cursor.conn.closed:
        return
    if cursor.since is not None and not _resolve(broker, cursor):
        return
    if cursor.paused:
        return
    if cursor.conn.writing_paused:
        cursor.blocked = True
        return
    stop = cursor.stop_pos
    if stop is not None and limit >= stop:
        limit = stop - 1
    if cursor.next_pos <= limit:
        if not _deliver_chunk(broker, cursor, limit):
            return  # more to do: a step was scheduled, or the cursor finished (top_n)
    if stop is not None and cursor.next_pos >= stop:
        finish(broker, cursor)
    elif not cursor.caught_up and limit >= cursor.catch_up_pos:
        cursor.caught_up = True
        if cursor.want_completed:
            cursor.conn.ack(cursor.cmd, "completed")
        send_persisted_ack(cursor, _safe(broker))


def _deliver_chunk(broker: ReplayHost, cursor: Cursor, limit: int) -> bool:
    """Deliver up to CHUNK matching records; True when the cursor reached ``limit``.

    The chunk's frames are queued as one write; the ``p`` header prefix is built once per
    topic, and a record with nothing but a bookmark gets its tail without JSON encoding
    (a bookmark is digits and ``|``). A plain replay of a literal topic is framed from the
    journal's stored frames instead (:mod:`server.delivery.replay_frames`), as far as it
    can go; this goes on from where that stops."""
    stored = _from_stored(broker, cursor, limit)
    if stored is not None:
        return stored
    sub = cursor.sub
    conn = cursor.conn
    flt = sub.filter
    # a literal topic's read filter and select list are in the subscription's own already
    ent = sub.entitlement if sub.entitlement is not None and sub.entitlement.regex else None
    sids = b',"sids":' + json_str(sub.sub_id)
    heads: dict[str, bytes] = {}
    out: list[bytes] = []
    done = True
    last_bm = None
    journal = _journal(broker)
    bodies = broker.bodies
    rate = cursor.rate
    watched: list[Any] | None = [] if broker.delivered is not None else None
    scanned = read_bytes = 0
    step_end = time.monotonic() + STEP_SECONDS
    for rec in _records(journal, cursor):
        pos = rec.position
        if pos > limit:
            break
        scanned += 1
        if scanned & 15 == 0 and time.monotonic() > step_end:
            # a rarely matching subscription over a long log (or a costly filter) must not
            # hold the event loop: the rest goes in a later step
            done = False
            scanned -= 1  # (read again then)
            break
        read_bytes += len(rec.body)
        bm = rec.bookmark_str
        if rec.kind not in _DELIVERABLE or not sub.matches_topic(rec.key):
            cursor.next_pos, cursor.last_pos, last_bm = pos + 1, pos, bm
            continue
        passed, sel = _passes(rec, bm, flt, ent, sub.select, bodies)
        if not passed:
            cursor.next_pos, cursor.last_pos, last_bm = pos + 1, pos, bm
            continue
        if rate is not None:
            wait = rate.wait(len(rec.body), rec.timestamp)
            if wait > 0:  # this one goes in a later step
                cursor.delay = wait
                done = False
                scanned -= 1
                read_bytes -= len(rec.body)
                break
        cursor.next_pos, cursor.last_pos, last_bm = pos + 1, pos, bm
        head = heads.get(rec.key)
        if head is None:
            head = heads[rec.key] = b'{"c":"p","t":' + json_str(rec.topic) + sids
        if rec.correlation_id is None and rec.sow_key is None and rec.expiration is None \
                and not cursor.timestamp:
            tail = b',"bm":"' + bm.encode() + b'"}'
        else:
            tail = delivery_tail(bm, rec.correlation_id, rec.sow_key, rec.expiration,
                                 format_timestamp(rec.timestamp) if cursor.timestamp else None)
        out.append(frame_raw(head + tail, rec.body if sel is None
                             else selected(rec.body, sel, bodies.decode(rec.body, rec.key),
                                           bodies.encoder(rec.key))))
        if watched is not None:
            watched.append(rec)
        if cursor.remaining is not None:
            cursor.remaining -= 1
            if cursor.remaining <= 0:
                done = False
                break
        if len(out) >= CHUNK:
            done = False
            break
    if last_bm is not None:
        cursor.last_bm = last_bm
    done = done and not cursor.waiting
    broker.processors.bookmark.take(read_bytes, scanned)
    if out:
        _send_chunk(broker, conn, out, watched)
    if not done:
        if cursor.remaining is not None and cursor.remaining <= 0:
            finish(broker, cursor)
        else:
            schedule(broker, cursor)
    return done


def _passes(rec: JournalRecord, bm: str, flt: Callable[..., bool] | None,
            ent: ReadEntitlement | None, sel: Select | None, bodies: Bodies
            ) -> tuple[bool, Select | None]:
    """Whether a replayed record goes to the subscription (the grant of its concrete topic,
    for a regex topic ``ent``, then the filter ``flt``), and the select list it goes with."""
    if ent is not None:  # a regex topic's concrete topics, each with its own grant
        grant = ent.grant(rec.topic)
        if grant is None:  # not entitled to this topic: skipped silently, as live
            return False, sel
        if grant.filter_text is not None:
            ctx = MessageContext(topic=rec.topic, bookmark=bm, sow_key=rec.sow_key,
                                 correlation_id=rec.correlation_id, client_name=rec.client_name)
            if not grant.admits(bodies.decode(rec.body, rec.key), ctx):
                return False, sel
        sel = ent.select(grant, sel)
    if flt is not None:
        ctx = MessageContext(topic=rec.topic, bookmark=bm, sow_key=rec.sow_key,
                             correlation_id=rec.correlation_id, client_name=rec.client_name)
        if not flt(bodies.decode(rec.body, rec.key), ctx):
            return False, sel
    return True, sel


def _send_chunk(broker: ReplayHost, conn: Client, out: list[bytes],
                watched: list[JournalRecord] | None) -> None:
    """A step's frames as one write, counted, then told to an ``on-deliver-message`` watch."""
    data = b"".join(out)
    broker.processors.bookmark.give(len(data), len(out))
    conn.send(data)
    watch = broker.delivered
    if watch is not None and watched:
        for rec in watched:
            watch(conn, rec.key, rec.body, rec.bookmark_str, rec.correlation_id)


def _from_stored(broker: ReplayHost, cursor: Cursor, limit: int) -> bool | None:
    """:func:`_deliver_chunk` from the journal's stored frames, for a replay they serve
    (:mod:`server.delivery.replay_frames`; not when ``on-deliver-message`` watches, which is
    told of each record); None: the general path goes on from there."""
    if broker.delivered is not None or not replay_frames.eligible(cursor):
        return None
    why = replay_frames.deliver(_journal(broker), cursor, limit, broker.processors.bookmark)
    if why is None:
        return None
    if why == replay_frames.LIMIT:
        return True
    if cursor.remaining is not None and cursor.remaining <= 0:  # top_n reached
        finish(broker, cursor)
    else:  # a step's worth
        schedule(broker, cursor)
    return False


def schedule(broker: ReplayHost, cursor: Cursor) -> None:
    """Run another step of the cursor on a later loop iteration (after ``cursor.delay``
    seconds when its rate holds it back; once its segment is decompressed when it waits)."""
    if cursor.scheduled or cursor.done or cursor.waiting:
        return
    cursor.scheduled = True

    def step() -> None:
        cursor.scheduled = False
        if broker.stopping:
            return
        pump(broker, cursor, _limit(broker, cursor))

    delay, cursor.delay = cursor.delay, 0.0
    if delay > 0:
        broker.call_later(delay, step)
    else:
        broker.loop.call_soon(step)


def resume_connection(broker: ReplayHost, client: Client) -> None:
    """The client's socket drained: continue every cursor that stopped for it."""
    for sub in client.subs.values():
        cursor = sub.cursor
        if cursor is not None and cursor.blocked:
            cursor.blocked = False
            schedule(broker, cursor)


def finish(broker: ReplayHost, cursor: Cursor) -> None:
    """A bounded replay (range end or top_n) is complete: final acks, then remove it."""
    if cursor.want_completed:
        cursor.conn.ack(cursor.cmd, "completed")
    send_persisted_ack(cursor, _safe(broker))
    stop(broker, cursor)
    sub = cursor.sub
    if cursor.conn.subs.get(sub.sub_id) is sub:
        del cursor.conn.subs[sub.sub_id]


def stop(broker: ReplayHost, cursor: Cursor) -> None:
    cursor.done = True
    if broker.txlog is not None:
        broker.txlog.cursors.discard(cursor)


def send_persisted_ack(cursor: Cursor, durable: int) -> None:
    """Tell a store-backed subscriber how far the log is persisted for its subscription."""
    if not cursor.want_persisted or cursor.conn.closed:
        return
    bm = cursor.last_bm
    if bm is None or bm == cursor.acked_bm or cursor.last_pos > durable:
        return
    cursor.acked_bm = bm
    cursor.conn.send(encode_ack(None, "persisted", sub_id=cursor.sub.sub_id, bm=bm))
