"""State and logic shared by FileJournal and MemoryJournal: position/bookmark/timestamp
assignment, per-publisher sequences, publish de-duplication, bookmark resolution and the
retention plan. Storage-specific parts are the abstract hooks at the bottom.

Bookmarks: every record gets ``publisher_id|sequence|`` with ``publisher_id =
publisher_id_for(client_name)``. The sequence is the publisher's own (its ``s``) when the
publish carries one, otherwise the log position, and never at or below the publisher's last
sequence here (``identity.assign_sequence``); a replicated record keeps the sequence its origin
gave it (``append_replicated``). So a message has the same bookmark on every instance, and a
bookmark is resolved by (publisher, sequence) through ``identity.SequenceIndex``, never by
reading it as a position. Journals written when the sequence was always the position read
the same way: their sequences are simply positions.

Timestamps: microseconds since the epoch from the injected ``clock`` (seconds, like
``time.time``), clamped to be non-decreasing so time lookups can bisect.

De-duplication (wire doc 6.4): per client name (keyed by its publisher id) the highest
publish ``s`` appended, by a publish here or by replication. ``is_duplicate(name, s)`` is
``s <= that``, and an ``append`` of such an ``s`` raises ``DuplicatePublish`` with nothing
appended (the server acks it as a republished message). ``last_seq_for_client``
reports the highest ``s`` whose record is durable (what the logon ack may promise), or with
``persisted=False`` the highest appended.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Protocol

from amps_emulator import accel
from amps_emulator.protocol.bookmarks import (
    EPOCH,
    NOW,
    RECENT,
    Bookmark,
    BookmarkList,
    BookmarkRange,
    BookmarkSpec,
    BookmarkTimestamp,
    parse_bookmark,
    publisher_id_for,
)

from . import failover
from .api import DuplicatePublish, Durability, RetentionResult
from .identity import (
    BEFORE_RETAINED,
    SequenceIndex,
    assign_sequence,
)
from .record import (
    INTERNAL_KIND_MIN,
    Checkpoint,
    JournalRecord,
    RecordKind,
    append_record_py,
)
from .replicated import ReplicatedAppends
from .stored import ReadHold, SegmentPending

Clock = Callable[[], float]

_PUBLISH = int(RecordKind.PUBLISH)


def publish_run_py(
    buf: bytearray | None,
    record_type: type[JournalRecord],
    topic: str,
    message_type: str,
    client_name: str,
    publisher_id: int,
    timestamp: int,
    position: int,
    last: int,
    bodies: list[bytes],
    client_seqs: list[int] | None,
    base: int,
    mark: int,
    interval: int,
) -> tuple[list[JournalRecord], list[int], list[tuple[int, int]]]:
    """The records of a run of plain publishes of one client to one topic (no correlation id,
    SowKey, expiration or headers) at positions from ``position`` on, and, with ``buf``, their
    frames appended to it (``record.append_record_py``'s bytes). ``last``: the publisher's
    last bookmark sequence; ``client_seqs``: each publish's ``s`` (None: none carries one);
    each sequence by :func:`identity.assign_sequence`. Returns the records, their sequences,
    and the index entries: (position, ``base`` + the frame's offset in ``buf``) of each record
    at or past ``mark``, which moves ``interval`` past each (``index.SparseIndex.maybe_add``'s
    rule). The records share one empty headers dict (nothing changes a record's headers): a
    reader can tell the records of one run by it (``rec.headers is first.headers``). The
    pure-Python twin of ``_speedups.publish_run``, which gives the same records and writes the
    same bytes."""
    recs: list[JournalRecord] = []
    seqs: list[int] = []
    index: list[tuple[int, int]] = []
    headers: dict[str, str] = {}  # one for the run: a reader tells its records by it
    for i, body in enumerate(bodies):
        cs = None if client_seqs is None else client_seqs[i]
        last = assign_sequence(position, last, cs)
        recs.append(record_type(position, _PUBLISH, topic, publisher_id, last, timestamp,
                                client_name, cs, None, None, None, message_type, headers, body))
        seqs.append(last)
        if buf is not None:
            if position >= mark:
                index.append((position, base + len(buf)))
                mark = position + interval
            append_record_py(buf, _PUBLISH, position, publisher_id, last, timestamp, cs, topic,
                             message_type, client_name, None, None, None, {}, body)
        position += 1
    return recs, seqs, index


if accel.COMPILED:
    from amps_emulator import _speedups

    def publish_run(
        buf: bytearray | None, record_type: type[JournalRecord], topic: str,
        message_type: str, client_name: str, publisher_id: int, timestamp: int, position: int,
        last: int, bodies: list[bytes], client_seqs: list[int] | None, base: int, mark: int,
        interval: int,
    ) -> tuple[list[JournalRecord], list[int], list[tuple[int, int]]]:
        """:func:`publish_run_py` in C; the twin for input outside its plain shapes."""
        args = (buf, record_type, topic, message_type, client_name, publisher_id, timestamp,
                position, last, bodies, client_seqs, base, mark, interval)
        out = _speedups.publish_run(*args)
        return publish_run_py(*args) if out is None else out
else:
    publish_run = publish_run_py


class SequenceMarks(Protocol):
    """The two de-duplication maps a CHECKPOINT record and a segment summary both carry."""

    publishers: list[tuple[int, int]]  # [publisher id, last sequence]
    clients: list[tuple[int, int]]  # [publisher id, highest client sequence]


def merge_checkpoint(cp: SequenceMarks, pub_last: dict, client_max: dict) -> None:
    for pid, seq in cp.publishers:
        if seq > pub_last.get(pid, 0):
            pub_last[pid] = seq
    for pid, s in cp.clients:
        if s > client_max.get(pid, 0):
            client_max[pid] = s


class JournalCore(ReplicatedAppends):
    """Mixin with the storage-independent half of a journal (the replicated appends: the
    mixin :class:`.replicated.ReplicatedAppends`)."""

    def _init_core(self, *, clock: Clock | None, durability: Durability) -> None:
        self._clock: Clock = clock or time.time
        self._durability = durability
        self._memory_durable = durability is Durability.MEMORY  # (read per record)
        self._pubids: dict[str, int] = {}
        self._pub_last: dict[int, int] = {}  # publisher id -> last sequence
        self._client_max: dict[int, int] = {}  # publisher id -> highest s appended
        self._client_durable: dict[int, int] = {}  # publisher id -> highest s durable
        self._unapplied_s: deque = deque()  # (position, publisher id, s) not yet durable
        self._next_position = 1
        self._last_ts = 0
        self._closed = False
        #: per-publisher sequence -> position; None until built (a reopened FileJournal builds
        #: it from its records on first use, see ``sequence_index``)
        self._seqidx: SequenceIndex | None = SequenceIndex()
        #: while it is being built by readers with a hold: (where it started, the index so far,
        #: the next position to read)
        self._seqbuild: tuple[int, SequenceIndex, int] | None = None

    # ------------------------------------------------------------------ properties
    @property
    def durability(self) -> Durability:
        return self._durability

    @property
    def next_position(self) -> int:
        return self._next_position

    @property
    def last_position(self) -> int:
        """Last appended position (0 when nothing was ever appended)."""
        return self._next_position - 1

    @property
    def last_timestamp(self) -> int:
        """When the last record was logged (microseconds since the epoch; 0: none)."""
        return self._last_ts

    # ------------------------------------------------------------------ assignment
    def publisher_id(self, client_name: str) -> int:
        pid = self._pubids.get(client_name)
        if pid is None:
            pid = self._pubids[client_name] = publisher_id_for(client_name)
        return pid

    def _now_us(self) -> int:
        ts = int(self._clock() * 1_000_000)
        if ts < self._last_ts:
            ts = self._last_ts
        self._last_ts = ts
        return ts

    def _make_record(
        self,
        kind: int,
        topic: str,
        client_name: str,
        body: bytes,
        client_seq: int | None,
        correlation_id: str | None,
        sow_key: str | None,
        expiration: int | None,
        message_type: str,
        headers: Mapping[str, str] | None,
    ) -> JournalRecord:
        if self._closed:
            raise self._closed_error()
        if client_seq is not None and not 0 <= client_seq < 1 << 64:
            # checked before any state changes: a record that cannot be framed must not
            # consume a position or raise the client's de-duplication mark
            raise ValueError(f"client sequence {client_seq} is not in 0..2^64-1")
        # The hot path of every publish: locals, no per-record helper calls (publisher_id()
        # and _now_us() are inlined), the record built positionally (fields in declaration
        # order, see record.JournalRecord).
        position = self._next_position
        internal = kind >= INTERNAL_KIND_MIN
        if internal:
            pid = 0
        else:
            known = self._pubids.get(client_name)
            pid = known if known is not None else self.publisher_id(client_name)
            if client_seq is not None:
                self._refuse_duplicate(client_name, pid, client_seq)
        ts = int(self._clock() * 1_000_000)
        if ts < self._last_ts:
            ts = self._last_ts
        else:
            self._last_ts = ts
        if internal:
            sequence = position
        elif client_seq is None:  # identity.assign_sequence without an ``s``, inlined
            last = self._pub_last.get(pid, 0)
            sequence = position if position > last else last + 1
        else:
            sequence = assign_sequence(position, self._pub_last.get(pid, 0), client_seq)
        rec = JournalRecord(
            position,
            kind if kind.__class__ is int else int(kind),
            topic,
            pid,
            sequence,
            ts,
            client_name,
            client_seq,
            correlation_id,
            sow_key,
            expiration,
            message_type,
            dict(headers) if headers else {},
            body if body.__class__ is bytes else bytes(body),
        )
        self._next_position = position + 1
        if not internal:
            self._pub_last[pid] = sequence
            if self._seqidx is not None:
                self._seqidx.add(pid, sequence, position)
            if client_seq is not None:
                client_max = self._client_max
                if client_seq > client_max.get(pid, 0):
                    client_max[pid] = client_seq
                if self._memory_durable:  # durable on append: no queue
                    if client_seq > self._client_durable.get(pid, 0):
                        self._client_durable[pid] = client_seq
                else:  # applied to _client_durable once durable (trimmed at every flush)
                    self._unapplied_s.append((position, pid, client_seq))
        return rec

    def _make_publish_records(self, topic: str, message_type: str, client_name: str,
                              bodies: list[bytes], client_seqs: list[int] | None,
                              buf: bytearray | None = None, base: int = 0, mark: int = 0,
                              interval: int = 1
                              ) -> tuple[list[JournalRecord], list[tuple[int, int]], list[int]]:
        """The records of a run of plain publishes of one client to one topic (no correlation
        id, SowKey, expiration or headers): what ``_make_record`` gives for each in turn, with
        the per-publisher bookkeeping done once for the run. ``client_seqs``: their ``s``
        (increasing), or None when none carries one. With ``buf``, their frames are appended
        to it, and the second value is the segment index's entries for them (``base``, ``mark``
        and ``interval``: see :func:`publish_run_py`); the third is their sequences."""
        if self._closed:
            raise self._closed_error()
        if client_seqs is not None and not (0 <= client_seqs[0] and client_seqs[-1] < 1 << 64):
            raise ValueError(f"client sequences {client_seqs[0]}..{client_seqs[-1]} are not in "
                             "0..2^64-1")
        pid = self.publisher_id(client_name)  # (once per run: no need to inline these two)
        if client_seqs is not None:  # (increasing: the first is the one that may be held)
            self._refuse_duplicate(client_name, pid, client_seqs[0])
        first = self._next_position
        recs, seqs, index = publish_run(buf, JournalRecord, topic, message_type, client_name, pid,
                                        self._now_us(), first, self._pub_last.get(pid, 0), bodies,
                                        client_seqs, base, mark, interval)
        self._note_run(pid, first, seqs, client_seqs)
        return recs, index, seqs

    def _note_run(self, pid: int, first: int, sequences: list[int],
                  client_seqs: list[int] | None) -> None:
        """The bookkeeping for a run of records of publisher ``pid`` just made at positions
        from ``first`` on with these sequences (and ``s``, increasing): what
        :meth:`_make_record` does for each, done once for the run."""
        position = first + len(sequences)
        self._next_position = position
        self._pub_last[pid] = sequences[-1]
        if self._seqidx is not None:
            self._seqidx.extend(pid, sequences, range(first, position))
        if client_seqs is not None:  # the run is written (and made durable) as one
            self._note_client_seq(position - 1, pid, client_seqs[-1])

    def _note_client_seq(self, position: int, pid: int, client_seq: int) -> None:
        """Note ``client_seq``, the ``s`` of the record of publisher ``pid`` at ``position``
        (in memory durability durable at once, else once ``position`` is)."""
        if client_seq > self._client_max.get(pid, 0):
            self._client_max[pid] = client_seq
        if self._memory_durable:
            if client_seq > self._client_durable.get(pid, 0):
                self._client_durable[pid] = client_seq
        else:  # applied to _client_durable once durable (trimmed at every flush)
            self._unapplied_s.append((position, pid, client_seq))

    def _refuse_duplicate(self, client_name: str, pid: int, client_seq: int) -> None:
        """Raise :class:`DuplicatePublish` when ``client_seq`` is at or below the highest ``s``
        held for this publisher, published here or replicated (one mark for both, so a stale
        copy that reaches this instance after replication brought the original is refused,
        never logged again under a new sequence)."""
        held = self._client_max.get(pid)
        if held is not None and client_seq <= held:
            raise DuplicatePublish(client_name, client_seq, held)

    def _checkpoint(self) -> Checkpoint:
        return Checkpoint(
            publishers=sorted(self._pub_last.items()),
            clients=sorted(self._client_max.items()),
        )

    # ------------------------------------------------------------------ de-duplication
    def _apply_durable_s(self) -> None:
        durable = self.durable_position
        q = self._unapplied_s
        d = self._client_durable
        while q and q[0][0] <= durable:
            _, pid, s = q.popleft()
            if s > d.get(pid, 0):
                d[pid] = s

    def is_duplicate(self, client_name: str, client_seq: int) -> bool:
        """True when a publish with this ``s`` from this client was already appended (6.4).

        The server drops such a publish but still acks it; its ``persisted`` ack must wait until
        ``durable_position >= last_position`` as of the moment the duplicate arrived (the
        original is at or before that position and may not be durable yet).
        """
        return client_seq <= self._client_max.get(self.publisher_id(client_name), 0)

    def last_seq_for_client(self, client_name: str, *, persisted: bool = True) -> int:
        """Highest publish ``s`` held for ``client_name`` (0: none). ``persisted``: durable only."""
        pid = self.publisher_id(client_name)
        if not persisted:
            return self._client_max.get(pid, 0)
        self._apply_durable_s()
        return self._client_durable.get(pid, 0)

    def last_sequence_for_publisher(self, publisher_id: int) -> int:
        """Last bookmark sequence assigned to this publisher id (0: none)."""
        return self._pub_last.get(publisher_id, 0)

    def last_bookmark_for_client(self, client_name: str) -> Bookmark | None:
        pid = self.publisher_id(client_name)
        seq = self._pub_last.get(pid)
        return None if seq is None else Bookmark(pid, seq)

    # ------------------------------------------------------------------ bookmark resolution
    def sequence_index(self, hold: ReadHold | None = None) -> SequenceIndex:
        """The per-publisher index, built from the retained records on first use after a
        reopen (one pass over the log; kept up to date by every append afterwards). ``hold``:
        a reader that must not block (``stored.SegmentPending`` where the pass reaches a
        compressed segment still being decompressed; the next call goes on from there, also
        when retention removed records meanwhile: the index forgets them, never starts again)."""
        idx = self._seqidx
        if idx is not None:
            return idx
        first = self.first_position
        build = self._seqbuild
        if build is None or first < build[0]:
            build = (first, SequenceIndex(head_removed=first > 1), first)
        elif first != build[0]:  # retention moved the head: forget what it removed, go on
            build[1].rebase(first)
            build = (first, build[1], max(build[2], first))
        start, idx, pos = build
        try:
            for rec in self.read(pos, hold=hold):
                idx.add_records((rec,))
                pos = rec.position + 1
        except SegmentPending:
            self._seqbuild = (start, idx, pos)
            raise
        self._seqidx, self._seqbuild = idx, None
        return idx

    def high_water_marks(self) -> dict[int, int]:
        """Publisher id -> last sequence held here (what a replication peer compares against)."""
        return dict(self._pub_last)

    def first_position_missing_from(self, theirs: Mapping[int, int],
                                    hold: ReadHold | None = None) -> int | None:
        """The first retained position a peer holding ``theirs`` (publisher id -> last sequence)
        lacks; None when it lacks nothing that is retained here. ``hold``: see
        :meth:`sequence_index`."""
        return self.sequence_index(hold).first_missing(theirs)

    def position_of(self, bm: Bookmark, hold: ReadHold | None = None) -> int | None:
        """Position of the record whose bookmark is exactly ``bm`` (None: not retained here).
        ``hold``: see :meth:`sequence_index`."""
        found = self.locate(bm, hold)
        return found[0] if found is not None and found[1] else None

    def locate(self, bm: Bookmark, hold: ReadHold | None = None) -> tuple[int, bool] | None:
        """``(position, exact)`` of ``bm`` by (publisher, sequence), see ``SequenceIndex.locate``:
        exact, or the first later record of that publisher, or ``first_position - 1`` when it is
        older than the retained log (known publisher, sequence already removed); None when not
        found (unknown publisher, or a sequence this instance has not received). ``hold``: see
        :meth:`sequence_index` (the first lookup after a reopen builds it)."""
        pid, seq = bm.publisher_id, bm.sequence
        if pid == 0 or seq == 0 or seq > self._pub_last.get(pid, 0):
            return None
        found = self.sequence_index(hold).locate(pid, seq)
        if found is None:
            # seq <= the publisher's last sequence, yet nothing of it retained reaches seq: the
            # records up to there were removed by retention
            return self.first_position - 1, False
        pos, exact = found
        if pos == BEFORE_RETAINED or pos < self.first_position:
            return self.first_position - 1, False
        return pos, exact

    def position_after_bookmark(self, bookmark: str | BookmarkSpec, *, resume: bool = False,
                                hold: ReadHold | None = None) -> int | None:
        """First position to replay for a subscription starting at ``bookmark``; None = not found.

        ``resume``: a subscriber resuming after the message it names, which it may have read at
        another instance (a failover): a message replicated here starts before any earlier
        record here its sender did not hold (``failover.start_after``); else exactly after it.

        EPOCH/``recent``: ``first_position``. NOW: ``next_position``. ``P|S|``: the position after
        that record (a bookmark of a known publisher that retention already removed resolves to
        ``first_position``: replaying a little too much is safe, too little is not). Timestamp:
        ``position_at_time``. List: the earliest of the items that resolve (None if none does).
        Range: its start (see ``range_positions``). ``hold``: a reader that must not block
        (see ``read``: ``stored.SegmentPending`` while a record it reads is decompressed).
        """
        spec = parse_bookmark(bookmark) if isinstance(bookmark, str) else bookmark
        if isinstance(spec, BookmarkRange):
            return self.range_positions(spec, hold)[0]
        # A plain P|S| means "after that message"; a plain timestamp means "at or after".
        return self._start_of(spec, inclusive=False, time_inclusive=True, resume=resume, hold=hold)

    def _start_of(self, spec, *, inclusive: bool, time_inclusive: bool, resume: bool = False,
                  hold: ReadHold | None = None) -> int | None:
        if spec is EPOCH or spec is RECENT:
            return self.first_position
        if spec is NOW:
            return self.next_position
        if isinstance(spec, Bookmark):
            found = self.locate(spec, hold)
            if found is None:
                return None
            pos, exact = found
            if not exact:  # absent (or removed): start at the next record of that publisher
                return pos if pos >= self.first_position else pos + 1
            start = pos if inclusive and pos >= self.first_position else pos + 1
            if resume and pos >= self.first_position and self.sequence_index(hold).senders():
                rec = self.record_at(pos, hold)  # the subscriber may have read it at another instance
                if rec is not None:
                    start = min(start, failover.start_after(self, rec, hold))
            return start
        if isinstance(spec, BookmarkTimestamp):
            return self.position_at_time(spec.micros if time_inclusive else spec.micros + 1, hold)
        if isinstance(spec, BookmarkList):
            items = (self._start_of(i, inclusive=inclusive, time_inclusive=time_inclusive, resume=resume,
                                    hold=hold) for i in spec.items)
            starts = [p for p in items if p is not None]
            return min(starts) if starts else None
        raise TypeError(f"not a bookmark value: {spec!r}")

    def arrivals_before(self, position: int, hold: ReadHold | None = None) -> dict[str, str]:
        """Per instance records were replicated here from, the bookmark of the last one from
        it before ``position`` (what a sender starting there had received: ``identity.SEEN``).
        ``hold``: see ``read`` (``stored.SegmentPending``: call again once woken)."""
        index = self.sequence_index(hold)
        out: dict[str, str] = {}
        for name in index.senders():
            pos = index.last_arrival(name, position)
            rec = None if pos is None else self.record_at(pos, hold)
            if rec is not None:
                out[name] = rec.bookmark_str
        return out

    def arrival_run(self, sender: str, position: int) -> int | None:
        """The last position of the run of records from ``position`` on that were all
        replicated here from instance ``sender`` (None: the one at ``position`` was not)."""
        return self.sequence_index().arrival_run(sender, position)

    def position_for_unheld(self, hold: ReadHold | None = None) -> int | None:
        """Where a replay starts for a message bookmark this instance does not hold, when
        records replicated from other instances are held here (the subscriber failed over
        from an instance that had more: ``failover.start_for_unheld``); None otherwise.
        ``hold``: see :meth:`sequence_index`."""
        return failover.start_for_unheld(self, hold)

    def range_positions(self, rng: BookmarkRange,
                        hold: ReadHold | None = None) -> tuple[int | None, int]:
        """``(start, stop)``: replay positions ``start <= p < stop``. ``start`` None: start bookmark
        not found. An end bookmark that is not found (yet) gives ``stop = next_position``.
        ``hold``: see ``position_after_bookmark``."""
        # For the start, "[" includes the named record / instant; "(" starts after it.
        inc = rng.start_inclusive
        start = self._start_of(rng.start, inclusive=inc, time_inclusive=inc, hold=hold)
        end = rng.end
        if end is NOW:
            stop = self.next_position
        elif isinstance(end, BookmarkTimestamp):
            stop = self.position_at_time(end.micros + 1 if rng.end_inclusive else end.micros, hold)
        elif isinstance(end, Bookmark):
            found = self.locate(end, hold)
            if found is None:
                stop = self.next_position
            else:
                pos, exact = found
                # an absent end: stop before the publisher's next record
                stop = pos + 1 if rng.end_inclusive and exact else pos
        else:
            raise TypeError(f"not a range end: {end!r}")
        return start, stop

    # ------------------------------------------------------------------ retention
    def _plan_retention(self, segs: list, pinned_positions: Iterable[int], can_remove: Callable[[int], bool],
                        age: float | None = None):
        """Decide how many of the oldest ``segs`` (objects with first_position, size, count,
        last_ts) to remove. Never the newest; never one at/after the lowest pin. ``age``:
        remove by this age only (an action's ``do-remove-journal``), not by the configured
        size and age."""
        pins = [p for p in pinned_positions if p is not None]
        min_pin = min(pins) if pins else None
        now_us = int(self._clock() * 1_000_000)
        total = sum(s.size for s in segs)
        limit = self._retention_bytes if age is None else None
        if age is None:
            age = self._retention_age
        age_us = None if age is None else int(age * 1_000_000)
        n = 0
        reasons: list[str] = []
        blocked = None
        while n < len(segs) - 1:
            seg = segs[n]
            over = limit is not None and total > limit
            old = age_us is not None and (seg.count == 0 or now_us - seg.last_ts > age_us)
            if not (over or old):
                break
            if min_pin is not None and min_pin < segs[n + 1].first_position:
                blocked = min_pin
                break
            if not can_remove(n):
                break
            reasons.append(f"{getattr(seg, 'name', seg.first_position)}: "
                           + ("over size" if over else "too old"))
            total -= seg.size
            n += 1
        return n, blocked, reasons

    # ------------------------------------------------------------------ hooks
    _failure: BaseException | None = None
    _retention_bytes: int | None = None
    _retention_age: float | None = None

    @property
    def first_position(self) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def durable_position(self) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def _publisher_at(self, position: int) -> int | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def record_at(self, position: int,
                  hold: ReadHold | None = None) -> JournalRecord | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def read(self, from_position: int = 1, *, include_internal: bool = False,
             hold: ReadHold | None = None) -> Iterator[JournalRecord]:  # pragma: no cover - abstract
        raise NotImplementedError

    def position_at_time(self, timestamp_us: int,
                         hold: ReadHold | None = None) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def enforce_retention(self, pinned_positions: Iterable[int] = (), *,
                          age: float | None = None) -> RetentionResult:  # pragma: no cover
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()  # type: ignore[attr-defined]


__all__ = ["JournalCore", "merge_checkpoint"]
