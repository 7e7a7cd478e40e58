"""The two halves of a replication link, sans-IO: what a destination gets (:class:`Selection`),
the upstream side (:class:`Sender`) and the downstream side (:class:`Receiver`).

Sender: after the handshake it starts at the first retained record the peer lacks according
to the peer's per-publisher high-water marks (``Journal.first_position_missing_from``) and
skips records the peer already holds, so a resync sends only what is missing; then it keeps
reading the log as it grows, up to ``durable_position``. The selected records go in
``repl_batch`` frames, each a run of records as they are logged (bookmark, origin time,
expiration, path and headers included) sharing one ``sv``, up to 1 MiB of bodies: one write
per poll, however many records it holds. A sender does not wait for acks: it sends what is
durable as it becomes durable, and the peer's cumulative acks catch up behind it.

Receiver: a record the journal already holds (publisher + sequence, or ``s``) is dropped but
acknowledged; a new one is appended with its original bookmark (``Journal.append_replicated``;
a batch's records by runs of one path, ``Journal.append_replicated_run``) and handed to the
:class:`ApplyPort`, which applies it like a local publish (SOW, subscribers, views) without
acking any client and without sending it back upstream. A record whose topic the peer may not
replicate here (``admit``: its identity's ``replicated-topics``) is dropped but acknowledged.
Acks are cumulative per upstream position, sent once the records are durable here (the
journal's group commit: one sync for everything that arrived meanwhile), at most once per
``AckConflationInterval`` (or once per call when it is None: once per event-loop turn). A
single ``repl_rec`` frame (what a bootstrap source sends) is taken too.

Journal records travel as publishes, delta publishes (as logged) and sow_deletes, and, for the
replicated queues a :class:`Selection` names, the queue records that must reach every instance
holding the queue (:data:`QUEUE_KINDS`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

import msgspec

from amps_emulator.config.model import Destination, ReplicationTopic
from amps_emulator.journal import Journal, ReadHold, SegmentPending
from amps_emulator.journal.identity import (
    ORIGIN_TS,
    PATH,
    SEEN,
    UPSTREAM_GROUP,
    origin_timestamp,
    path_of,
    upstream_group,
)
from amps_emulator.journal.record import JournalRecord, RecordKind
from amps_emulator.protocol.codec import ProtocolError, frame, split_frame
from amps_emulator.protocol.filter import compile_filter, decode_body
from amps_emulator.protocol.filter.context import MessageContext
from amps_emulator.protocol.filter.runtime import CompiledFilter
from amps_emulator.replication.batch import (
    Frames,
    InFlight,
    PlainRun,
    decode_parts,
    is_plain,
)
from amps_emulator.replication.wire import LinkRefused

#: headers the link itself carries in fields of their own (the origin time, the path, the Group;
#: what the sender had received, which is about one link and is never passed on)
_LINK_HEADERS = frozenset({ORIGIN_TS, PATH, UPSTREAM_GROUP, SEEN})

#: record kinds that replicate
REPLICATED_KINDS = frozenset({RecordKind.PUBLISH, RecordKind.DELTA_PUBLISH, RecordKind.SOW_DELETE})

#: queue records that replicate, for the queues shared by the instances (docs/design/replication.md 4):
#: acknowledgements, expiries, at-most-once sends, ownership transfers (and batches of them);
#: a lease's cancel or expiry only changes local counters and stays here
QUEUE_KINDS = frozenset({RecordKind.QUEUE_ACK, RecordKind.QUEUE_EXPIRE, RecordKind.QUEUE_LEASE,
                         RecordKind.QUEUE_TRANSFER, RecordKind.QUEUE_BATCH})


class ApplyPort(Protocol):
    """What the receiving server does with a replicated record: apply it like a local publish,
    delta publish or sow_delete, keeping the record's bookmark, origin time and expiration."""

    def apply_replicated(self, rec: JournalRecord) -> None: ...

    # optional: ``apply_replicated_run(records)``, a batch's records at once, in order


class Selection:
    """Whether a record goes to one destination, whose remote instance is ``peer_name``.
    ``queues``: the names of this instance's replicated queues (distributed and group local
    queues; a LocalQueue's records never leave), whose queue records travel too."""

    def __init__(self, dest: Destination, peer_name: str,
                 decode: Callable[[bytes, str], Any] | None = None, *,
                 queues: frozenset[str] = frozenset()) -> None:
        """``decode(body, message_type)``: the instance's body reader (its codecs), for a
        ``Filter`` on a topic of another type than json (default: json only)."""
        self.dest = dest
        self.peer_name = peer_name
        self._decode = decode
        self.queues = queues
        self._filters: dict[str, CompiledFilter] = {}
        #: (topic, message type) -> the Topic that selects it (Destination.selects, per record
        #: otherwise: a regex test per Topic)
        self._selected: dict[tuple[str, str], ReplicationTopic | None] = {}
        #: (upstream Group, resync) -> Destination.passes
        self._passing: dict[tuple[str, bool], bool] = {}
        for t in dest.topics:
            if t.filter is not None:
                self._filters[t.filter] = compile_filter(t.filter)  # FilterError: a bad filter

    def wants(self, rec: JournalRecord, *, resync: bool = False) -> bool:
        if rec.kind not in REPLICATED_KINDS:
            return (rec.kind in QUEUE_KINDS and rec.topic in self.queues
                    and self._wants_queue_record(rec, resync))
        key = (rec.topic, rec.message_type)
        try:
            topic = self._selected[key]
        except KeyError:
            if len(self._selected) > 100_000:
                self._selected.clear()
            topic = self._selected[key] = self.dest.selects(rec.topic, rec.message_type)
        if topic is None:
            return False
        headers = rec.headers
        if headers:  # (a record published here has neither a path nor an upstream Group)
            group = headers.get(UPSTREAM_GROUP)
            if group is not None and not self._passes(group, resync):
                return False
            if self.peer_name in path_of(rec):  # loop prevention: it already passed through the peer
                return False
        if topic.filter is not None and rec.kind != RecordKind.SOW_DELETE:
            ctx = MessageContext(topic=rec.topic, bookmark=rec.bookmark_str, sow_key=rec.sow_key)
            decode = self._decode
            doc = decode_body(rec.body) if decode is None else decode(rec.body, rec.message_type)
            return bool(self._filters[topic.filter](doc, ctx))
        return True


    def filters(self, rec: JournalRecord) -> bool:
        """Whether a Filter decides, record by record, if a record ``wants`` selected goes."""
        topic = self._selected.get((rec.topic, rec.message_type))
        return topic is not None and topic.filter is not None and rec.kind != RecordKind.SOW_DELETE

    def _passes(self, group: str, resync: bool) -> bool:
        """``Destination.passes`` of a record from an instance of ``group`` (remembered)."""
        key = (group, resync)
        hit = self._passing.get(key)
        if hit is None:
            if len(self._passing) > 10_000:
                self._passing.clear()
            hit = self._passing[key] = self.dest.passes(group, resync=resync)
        return hit

    def _wants_queue_record(self, rec: JournalRecord, resync: bool) -> bool:
        """A queue record goes where its queue topic goes (no Filter: it is not a message)."""
        return (self.dest.selects(rec.topic, rec.message_type) is not None
                and self.dest.passes(upstream_group(rec), resync=resync)
                and self.peer_name not in path_of(rec))


def record_frame(rec: JournalRecord, *, local_name: str, local_group: str, seen: str | None = None) -> bytes:
    """``seen``: the ``sv`` field (JSON: what this instance had received before the record,
    per instance it came from, ``""`` for the receiving peer; see ``journal.failover``)."""
    h: dict[str, Any] = {
        "c": "repl_rec", "pos": rec.position, "k": rec.kind, "t": rec.topic, "mt": rec.message_type,
        "pid": str(rec.publisher_id), "seq": str(rec.sequence), "cn": rec.client_name,
        "ts": origin_timestamp(rec), "path": ",".join((*path_of(rec), local_name)), "ug": local_group,
    }
    if rec.client_seq is not None:
        h["s"] = str(rec.client_seq)
    if rec.expiration is not None:
        h["e"] = rec.expiration
    if rec.sow_key is not None:
        h["x"] = rec.sow_key
    if rec.correlation_id is not None:
        h["cid"] = rec.correlation_id
    if seen is not None:
        h["sv"] = seen
    own = {k: v for k, v in rec.headers.items() if k not in _LINK_HEADERS}
    if own:  # a sow_delete's filter or keys, a command's options
        h["h"] = msgspec.json.encode(own).decode()
    return frame(h, rec.body)


#: records a sender has in flight at most (sent, not acknowledged): it streams without waiting
#: for acks up to there (a sync pair's publishers wait for far less)
WINDOW = 200_000


class Sender:
    """The upstream half of one link: which records to send next, and what the peer acked."""

    def __init__(self, journal: Journal, selection: Selection, *, local_name: str, local_group: str) -> None:
        self.journal = journal
        self.selection = selection
        self.local_name = local_name
        self.local_group = local_group
        self.next_position = journal.next_position  # next record to look at
        self.resync_until = 0  # records up to here are sent under the resync rules
        self.peer_hw: dict[int, int] = {}
        self.acked_through = 0  # upstream position the peer acknowledged
        self._sent = InFlight()  # positions sent and not acknowledged yet
        #: at most this many records in flight: then the sender waits for the peer's acks
        self.window = WINDOW
        #: per instance records came here from, the bookmark of the last one read so far
        #: (the ``sv`` of the next record sent: ``journal.failover``)
        self._last_from: dict[str, str] = {}
        #: per instance, the last record from it read since ``_last_from`` was brought up to date
        self._arrived: dict[str, JournalRecord] = {}
        self._seen: str | None = None  # _last_from as sent, while it does not change
        self._stale = True  # _seen is to be made again from _last_from
        self.messages_out = 0
        self.bytes_out = 0
        #: the peer's records are stepped over unread, but for the last of a run (``poll``)
        self.steps_over: str | None = selection.peer_name
        #: a compressed segment is decompressed off the caller's thread: ``start`` and ``poll``
        #: stop there and go on once ``wake`` (set by the link; any thread calls it) is called
        self.wake: Callable[[], None] | None = None
        self.hold = ReadHold(self._woken)
        self._starting = False  # (start's position not found yet)
        journal.follow_tail(self)  # (it reads each record soon after it is durable)

    def start(self, peer_hw: Mapping[int, int]) -> int | None:
        """Begin (or resume after a reconnect) from what the peer holds; returns the position.
        None: finding it reads a compressed segment still being decompressed (``hold``);
        :meth:`poll` finds it once it is, and sends nothing before (meanwhile the whole log
        counts as not acknowledged)."""
        journal = self.journal
        self.peer_hw = dict(peer_hw)
        self.resync_until = journal.last_position
        self._arrived.clear()
        self._stale = True
        self._sent.clear()
        self.next_position = journal.first_position  # (until it is found: nothing looked at)
        self.acked_through = journal.first_position - 1
        self._starting = True
        return self._resume_point()

    def _woken(self) -> None:
        """A decompression ``start`` or ``poll`` stopped for is over (``wake``, if it is set
        by then: else the link's first poll, still to come, finds it over)."""
        wake = self.wake
        if wake is not None:
            wake()

    def _resume_point(self) -> int | None:
        """:meth:`start`'s position, found now (None: not yet, see ``start``)."""
        journal = self.journal
        try:
            first = journal.first_position_missing_from(self.peer_hw, self.hold)
            position = journal.next_position if first is None else first
            self._last_from = journal.arrivals_before(position, self.hold)
        except SegmentPending:
            return None
        self._starting = False
        self.next_position = position
        self.acked_through = position - 1
        return position

    def _seen_now(self) -> str | None:
        """The ``sv`` of the next record sent: what this instance had received before it."""
        arrived = self._arrived
        if arrived:
            for name, rec in arrived.items():
                bm = rec.bookmark_str
                if self._last_from.get(name) != bm:
                    self._last_from[name] = bm
                    self._stale = True
            arrived.clear()
        if self._stale:
            self._stale = False
            peer = self.selection.peer_name
            self._seen = msgspec.json.encode(
                {("" if name == peer else name): bm for name, bm in self._last_from.items()}
            ).decode() if self._last_from else None
        return self._seen

    def poll(self, limit: int = 1000) -> list[bytes | bytearray]:
        """``repl_batch`` frames for up to ``limit`` more selected records, durable ones only
        (a frame per run of records sharing their ``sv``, at most
        :data:`~.batch.BATCH_BYTES` of bodies each). A run of records the peer itself sent
        here is stepped over whole (none of them goes back to it), without reading them; the
        rest of a run of publishes logged here as one (they share their headers dict) goes to
        its :class:`~.batch.PlainRun` with no more checks than the first one had (its columns
        at once, ``Journal.run_columns``, while the journal holds them). It stops where the
        log goes on in a compressed segment still being decompressed (``hold``)."""
        if self._starting and self._resume_point() is None:
            return []  # (the link polls again once the segment is decompressed)
        room = self.window - self._sent.count
        if room <= 0 or self.next_position > self.journal.durable_position:
            return []  # (the window is full, or nothing more is durable: nothing to look at)
        limit = min(limit, room)
        out = Frames(self.local_name, self.local_group, self._sent)
        limit_bytes = out.limit
        journal = self.journal
        durable = journal.durable_position
        pos = self.next_position
        peer = self.selection.peer_name
        peer_hw = self.peer_hw
        arrived = self._arrived
        selection = self.selection
        resync_until = self.resync_until
        run_h: object = None  # the headers dict of the open plain run's records
        seqs: list[int] = []
        client_seqs: list[int | None] | None = None  # (in a run: all ints, or None)
        bodies: list[bytes] = []
        count = 0
        done = False
        while not done and pos <= durable:
            end = journal.arrival_run(peer, pos)
            if end is not None:  # (what the next record's ``sv`` says was received from it)
                end = min(end, durable)
                try:
                    last = journal.record_at(end, self.hold)
                except SegmentPending:
                    break  # (the link polls again once it is decompressed)
                if last is not None:
                    arrived[peer] = last
                pos = end + 1
                continue
            done = True  # unless the reading stops at a run of records from the peer
            for rec in _reading(journal, pos, self.hold):
                at = rec.position
                if at > durable or count >= limit:
                    break
                if rec.headers is run_h and out.size < limit_bytes:  # the open plain run goes on
                    pos = at + 1
                    seqs.append(rec.sequence)
                    bodies.append(rec.body)
                    if client_seqs is not None:
                        client_seqs.append(rec.client_seq)
                    out.last = at
                    out.size += len(rec.body)
                    count += 1
                    continue
                run_h = None
                path = rec.headers.get(PATH) if rec.headers else None
                if path:  # replicated here: what the next record's ``sv`` says was received
                    sender = path[path.rfind(",") + 1:]
                    if sender == peer and at > pos:
                        pos = at  # a run from the peer: stepped over above
                        done = False
                        break
                    pos = at + 1
                    arrived[sender] = rec
                    if peer in path.split(","):
                        continue  # loop prevention: it already passed through the peer
                else:
                    pos = at + 1
                if rec.sequence <= peer_hw.get(rec.publisher_id, 0):
                    continue  # the peer has it (resync)
                if not selection.wants(rec, resync=at <= resync_until):
                    continue
                out.seen(self._seen_now() if arrived or self._stale else self._seen)
                count += 1
                if not is_plain(rec) or selection.filters(rec):
                    out.record(rec)
                    continue
                run_h = rec.headers
                # rec's own run from rec on, as the journal made it (a run of publishes)
                cols = journal.run_columns(at, min(durable - at, limit - count) + 1)
                if cols is not None and len(cols[2]) > 1 \
                        and out.size + (size := sum(map(len, cols[2]))) < limit_bytes:  # at once
                    seqs, client_seqs, bodies = out.plain(rec, cols, size)
                    pos = out.last + 1
                    count += len(bodies) - 1
                    done = False
                    break  # (read on after the run)
                seqs, client_seqs, bodies = out.plain(rec)
        self.next_position = max(pos, self.next_position)
        frames = out.close()
        self.messages_out += out.messages
        self.bytes_out += out.bytes
        if not self._sent.count:  # nothing in flight: everything looked at counts as acknowledged
            self.acked_through = max(self.acked_through, self.next_position - 1)
        return frames

    def on_ack(self, position: int) -> None:
        """The peer acknowledged everything it was sent up to ``position``. A position beyond
        the last one sent on this link is a :class:`ProtocolError` that changes nothing: the
        peer cannot hold what it was never sent, and counting it would release the persisted
        acks a sync destination gates for records it may not have."""
        if position > self._sent.last:
            raise ProtocolError(f"malformed replication ack: acknowledges position {position}, "
                                f"beyond {self._sent.last}, the last sent")
        self._sent.ack(position)
        first = self._sent.first
        # records not selected after the acked one count as acknowledged up to the next in flight
        self.acked_through = max(self.acked_through,
                                 (first - 1) if first is not None else self.next_position - 1)

    @property
    def in_flight(self) -> int:
        return self._sent.count

    @property
    def window_full(self) -> bool:
        """No more is sent until the peer acknowledges some of what is in flight."""
        return self._sent.count >= self.window


def _reading(journal: Journal, pos: int, hold: ReadHold) -> Iterator[JournalRecord]:
    """``journal.read(pos)``, ending early at a compressed segment still being decompressed
    (then ``hold.wake`` is called once it is)."""
    try:
        yield from journal.read(pos, hold=hold)
    except SegmentPending:
        return


def _hops(path: str | None, via: str) -> tuple[str, ...]:
    """The instances a record passed through: its ``path`` upstream, then ``via``."""
    return (*path.split(","), via) if path else (via,)


def _opt_int(h: dict[str, Any], key: str) -> int | None:
    v = h.get(key)
    return None if v is None else int(v)


class Receiver:
    """The downstream half of one link."""

    def __init__(self, journal: Journal, port: ApplyPort, *, ack_interval: float | None = None,
                 safe: Callable[[tuple[str, ...], str | None], int] | None = None,
                 local_name: str | None = None, admit: Callable[[str], bool] | None = None) -> None:
        self.journal = journal
        #: ``admit(topic)``: whether the peer may replicate that topic here (its identity's
        #: ``replicated-topics``); a record it refuses is dropped, counted and acknowledged
        self.admit = admit
        self.port = port
        #: the port's ``apply_replicated_run(records)``, if it has one: a batch's records at once
        self._apply_run: Callable[[list[JournalRecord]], None] | None = \
            getattr(port, "apply_replicated_run", None)
        self.ack_interval = ack_interval
        #: ``safe(path, upstream group)``: how far a record that came along ``path`` may be
        #: acknowledged: durable here and acknowledged by this instance's sync destinations that
        #: forward it (``ReplicationService.safe_for``); None: durable
        self._safe = safe
        #: this instance's Name: a record whose path names it already went through here
        self.local_name = local_name
        # (local position to be durable, upstream position, the record's path, its upstream Group)
        self._pending: deque[tuple[int, int, tuple[str, ...], str | None]] = deque()
        self._acked = 0
        self._last_ack_at: float | None = None
        self.applied = 0
        self.duplicates = 0
        self.looped = 0  # records that came back to an instance on their path (dropped, acked)
        self.refused = 0  # records the peer may not replicate here (dropped, acked)

    def handle(self, payload: bytes) -> None:
        """One ``repl_rec`` frame from upstream."""
        h, body = split_frame(payload)
        self.handle_frame(h, body)

    def handle_frame(self, h: dict[str, Any], body: bytes) -> None:
        """:meth:`handle` of a frame already split into header and body."""
        c = h.get("c")
        if c == "repl_batch":
            self.handle_batch(h, body)
            return
        if c == "repl_refuse":  # the upstream's validation failed
            raise LinkRefused(str(h.get("reason")))
        if c != "repl_rec":
            raise ProtocolError(f"unexpected replication command {h.get('c')!r}")
        try:
            upstream_pos = int(h["pos"])
            path = str(h.get("path") or "")
            ug = None if h.get("ug") is None else str(h["ug"])
            if self.local_name is not None and self.local_name in path.split(","):
                self.looped += 1  # an upstream without loop prevention: held here already
                self._pending.append((self.journal.last_position, upstream_pos, tuple(path.split(",")), ug))
                return
            if self.admit is not None and not self.admit(str(h["t"])):
                self.refused += 1  # neither journaled nor applied; acknowledged, so the link goes on
                self._pending.append((self.journal.last_position, upstream_pos,
                                      tuple(path.split(",")) if path else (), ug))
                return
            headers: dict[str, str] = {}
            if h.get("h"):
                headers.update(msgspec.json.decode(h["h"], type=dict[str, str]))
            if path:
                headers[PATH] = path
            if h.get("sv"):
                headers[SEEN] = str(h["sv"])
            if ug is not None:
                headers[UPSTREAM_GROUP] = ug
            rec = self.journal.append_replicated(
                topic=str(h["t"]), client_name=str(h.get("cn") or ""), publisher_id=int(h["pid"]),
                sequence=int(h["seq"]), origin_timestamp=int(h["ts"]), body=body, kind=int(h["k"]),
                client_seq=_opt_int(h, "s"), correlation_id=h.get("cid"), sow_key=h.get("x"),
                expiration=_opt_int(h, "e"), message_type=str(h.get("mt") or ""), headers=headers)
        except (KeyError, TypeError, ValueError, msgspec.DecodeError) as exc:
            raise ProtocolError(f"malformed replicated record: {exc}") from None
        hops = tuple(path.split(",")) if path else ()
        if rec is None:
            self.duplicates += 1  # held already: acknowledged once what we hold is durable
            self._pending.append((self.journal.last_position, upstream_pos, hops, ug))
            return
        self.applied += 1
        self._pending.append((rec.position, upstream_pos, hops, ug))
        self.port.apply_replicated(rec)

    def handle_batch(self, h: dict[str, Any], body: bytes) -> None:
        """A ``repl_batch`` (:class:`~.batch.Frames`): its records are taken in runs of one path,
        each appended with one journal call, applied, and acknowledged as one."""
        try:
            parts = decode_parts(body)
            via = str(h["via"])
            ug = None if h.get("ug") is None else str(h["ug"])
            seen = str(h["sv"]) if h.get("sv") else None
        except (KeyError, ValueError) as exc:  # (a DecodeError is one; so is msgspec's
            # UnicodeDecodeError for a str that is not UTF-8)
            raise ProtocolError(f"malformed replicated batch: {exc}") from None
        for part in parts:
            if isinstance(part, PlainRun):
                self._take_plain(part, via, seen, ug)
            else:
                self._take_records(part.records, via, seen, ug)

    def _take_plain(self, run: PlainRun, via: str, seen: str | None, ug: str | None) -> None:
        """A plain run (published at ``via``: its path is ``via``)."""
        hops = (via,)
        if self.local_name == via:
            self.looped += len(run.bodies)  # (an upstream that has this instance's Name)
        elif self.admit is not None and not self.admit(run.topic):
            self.refused += len(run.bodies)  # neither journaled nor applied; acknowledged
        else:
            try:
                appended, held = self.journal.append_replicated_plain(
                    run.topic, run.message_type, run.client_name, run.publisher_id, run.timestamp,
                    run.sequences, run.client_seqs, run.bodies, via, seen=seen, group=ug)
            except ValueError as exc:
                raise ProtocolError(f"malformed replicated run: {exc}") from None
            self._applied(appended, held)
        self._pending.append((self.journal.last_position, run.last_position, hops, ug))

    def _applied(self, appended: list[JournalRecord], held: int) -> None:
        """Records appended (and ``held`` found held already): applied, counted."""
        self.duplicates += held  # held already: acknowledged once what we hold is durable
        self.applied += len(appended)
        if appended:
            apply_run = self._apply_run
            if apply_run is not None:
                apply_run(appended)
            else:
                for rec in appended:
                    self.port.apply_replicated(rec)

    def _take_records(self, recs: list[JournalRecord], via: str, seen: str | None,
                      ug: str | None) -> None:
        """Records of a batch part, taken in runs of one path."""
        admit = self.admit
        run: list[JournalRecord] = []
        run_path: str | None = None
        for rec in recs:
            path = rec.headers.get(PATH) if rec.headers else None
            if run and path != run_path:
                self._take_run(run, run_path, via, seen, ug)
                run = []
            run_path = path
            if admit is not None and not admit(rec.topic):
                if run:
                    self._take_run(run, run_path, via, seen, ug)
                    run = []
                self.refused += 1  # neither journaled nor applied; acknowledged, so the link goes on
                self._pending.append((self.journal.last_position, rec.position,
                                      _hops(path, via), ug))
                continue
            run.append(rec)
        if run:
            self._take_run(run, run_path, via, seen, ug)

    def _take_run(self, run: list[JournalRecord], path: str | None, via: str, seen: str | None,
                  ug: str | None) -> None:
        """Records of one batch that came along the same ``path`` (then ``via``)."""
        hops = _hops(path, via)
        if self.local_name is not None and self.local_name in hops:
            self.looped += len(run)  # an upstream without loop prevention: held here already
            self._pending.append((self.journal.last_position, run[-1].position, hops, ug))
            return
        try:
            appended, held = self.journal.append_replicated_run(run, via, seen=seen, group=ug)
        except ValueError as exc:
            raise ProtocolError(f"malformed replicated record: {exc}") from None
        self._pending.append((self.journal.last_position, run[-1].position, hops, ug))
        self._applied(appended, held)

    @property
    def pending(self) -> bool:
        """Records applied (or dropped) here and not acknowledged upstream yet."""
        return bool(self._pending)

    def ack_wait(self, now: float) -> float:
        """Seconds before the AckConflationInterval lets the next ack go (0: now)."""
        if self.ack_interval is None or self._last_ack_at is None:
            return 0.0
        return max(0.0, self._last_ack_at + self.ack_interval - now)

    def take_ack(self, now: float) -> bytes | None:
        """A ``repl_ack`` for everything durable here (and acknowledged by this instance's sync
        destinations), if one is due (AckConflationInterval)."""
        if self.ack_wait(now) > 0:
            return None
        durable = self.journal.durable_position
        safe = self._safe
        limits: dict[tuple[tuple[str, ...], str | None], int] = {}
        upto = self._acked
        pending = self._pending
        while pending:
            local, up, hops, ug = pending[0]
            limit = durable
            if safe is not None:
                key = (hops, ug)
                limit = limits.get(key, -1)
                if limit < 0:
                    limit = limits[key] = min(durable, safe(hops, ug))
            if local > limit:
                break
            pending.popleft()
            upto = max(upto, up)
        if upto == self._acked:
            return None
        self._acked = upto
        self._last_ack_at = now
        return frame({"c": "repl_ack", "pos": upto})


def ack_position(payload: bytes) -> int:
    """The upstream position a ``repl_ack`` acknowledges (:class:`ProtocolError`: not an ack,
    or no position that is a non-negative JSON integer)."""
    h, _ = split_frame(payload)
    if h.get("c") != "repl_ack":
        raise ProtocolError(f"expected repl_ack, got {h.get('c')!r}")
    pos = h.get("pos")
    if type(pos) is not int or pos < 0:  # (a bool is an int; "12" or 1.5 is no position)
        raise ProtocolError(f"malformed replication ack: pos {pos!r}" if "pos" in h
                            else "malformed replication ack: no pos")
    return pos


__all__ = ["QUEUE_KINDS", "REPLICATED_KINDS", "ApplyPort", "Receiver", "Selection", "Sender", "ack_position",
           "record_frame"]
