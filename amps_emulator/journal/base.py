"""State and logic shared by FileJournal and MemoryJournal: position/bookmark/timestamp
assignment, per-publisher sequences, publish de-duplication, bookmark resolution and the
retention plan. Storage-specific parts are the abstract hooks at the bottom.

Bookmarks: every record gets ``publisher_id|sequence|`` with ``publisher_id =
publisher_id_for(client_name)`` and ``sequence = position`` (the global log position). So
sequences are strictly increasing per publisher (with gaps), monotonic over the whole log,
never reused (positions survive restarts and retention: the newest segment is never
removed and its file name carries the next position), and a bookmark resolves to its
record in O(1) + one sparse-index scan, verified by comparing the publisher id stored there.
(Replication, if it ever comes, would carry foreign bookmarks; that would need a
(publisher, sequence) -> position map instead of this identity.)

Timestamps: microseconds since the epoch from the injected ``clock`` (seconds, like
``time.time``), clamped to be non-decreasing so time lookups can bisect.

De-duplication (wire doc 6.4): per client name (keyed by its publisher id) the highest
publish ``s`` appended. ``is_duplicate(name, s)`` is ``s <= that``. ``last_seq_for_client``
reports the highest ``s`` whose record is durable (what the logon ack may promise), or with
``persisted=False`` the highest appended.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

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

from .api import Durability, JournalClosedError, RetentionResult
from .record import INTERNAL_KIND_MIN, Checkpoint, JournalRecord

Clock = Callable[[], float]


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


class JournalCore:
    """Mixin with the storage-independent half of a journal."""

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
            raise JournalClosedError(
                "journal is closed" if self._failure is None else f"journal failed: {self._failure}")
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
        ts = int(self._clock() * 1_000_000)
        if ts < self._last_ts:
            ts = self._last_ts
        else:
            self._last_ts = ts
        rec = JournalRecord(
            position,
            kind if kind.__class__ is int else int(kind),
            topic,
            pid,
            position,  # sequence
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
            self._pub_last[pid] = position
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
    def _locate(self, bm: Bookmark) -> int | None:
        """Position of the record named by ``bm``; ``first_position - 1`` when it is older than
        the retained log (known publisher, sequence already removed); None when not found."""
        pid, seq = bm.publisher_id, bm.sequence
        if pid == 0 or seq == 0 or seq > self.last_position:
            return None
        if seq > self._pub_last.get(pid, 0):
            return None
        if seq < self.first_position:
            return self.first_position - 1
        return seq if self._publisher_at(seq) == pid else None

    def position_after_bookmark(self, bookmark: str | BookmarkSpec) -> int | None:
        """First position to replay for a subscription starting at ``bookmark``; None = not found.

        EPOCH/``recent``: ``first_position``. NOW: ``next_position``. ``P|S|``: the position after
        that record (a bookmark of a known publisher that retention already removed resolves to
        ``first_position``: replaying a little too much is safe, too little is not). Timestamp:
        ``position_at_time``. List: the earliest of the items that resolve (None if none does).
        Range: its start (see ``range_positions``).
        """
        spec = parse_bookmark(bookmark) if isinstance(bookmark, str) else bookmark
        if isinstance(spec, BookmarkRange):
            return self.range_positions(spec)[0]
        # A plain P|S| means "after that message"; a plain timestamp means "at or after".
        return self._start_of(spec, inclusive=False, time_inclusive=True)

    def _start_of(self, spec, *, inclusive: bool, time_inclusive: bool) -> int | None:
        if spec is EPOCH or spec is RECENT:
            return self.first_position
        if spec is NOW:
            return self.next_position
        if isinstance(spec, Bookmark):
            pos = self._locate(spec)
            if pos is None:
                return None
            return pos if inclusive and pos >= self.first_position else pos + 1
        if isinstance(spec, BookmarkTimestamp):
            return self.position_at_time(spec.micros if time_inclusive else spec.micros + 1)
        if isinstance(spec, BookmarkList):
            items = (self._start_of(i, inclusive=inclusive, time_inclusive=time_inclusive)
                     for i in spec.items)
            found = [p for p in items if p is not None]
            return min(found) if found else None
        raise TypeError(f"not a bookmark value: {spec!r}")

    def range_positions(self, rng: BookmarkRange) -> tuple[int | None, int]:
        """``(start, stop)``: replay positions ``start <= p < stop``. ``start`` None: start bookmark
        not found. An end bookmark that is not found (yet) gives ``stop = next_position``."""
        # For the start, "[" includes the named record / instant; "(" starts after it.
        inc = rng.start_inclusive
        start = self._start_of(rng.start, inclusive=inc, time_inclusive=inc)
        end = rng.end
        if end is NOW:
            stop = self.next_position
        elif isinstance(end, BookmarkTimestamp):
            stop = self.position_at_time(end.micros + 1 if rng.end_inclusive else end.micros)
        elif isinstance(end, Bookmark):
            pos = self._locate(end)
            stop = self.next_position if pos is None else (pos + 1 if rng.end_inclusive else pos)
        else:
            raise TypeError(f"not a range end: {end!r}")
        return start, stop

    # ------------------------------------------------------------------ retention
    def _plan_retention(self, segs: list, pinned_positions: Iterable[int], can_remove: Callable[[int], bool]):
        """Decide how many of the oldest ``segs`` (objects with first_position, size, count,
        last_ts) to remove. Never the newest; never one at/after the lowest pin."""
        pins = [p for p in pinned_positions if p is not None]
        min_pin = min(pins) if pins else None
        now_us = int(self._clock() * 1_000_000)
        total = sum(s.size for s in segs)
        age_us = None if self._retention_age is None else int(self._retention_age * 1_000_000)
        n = 0
        reasons: list[str] = []
        blocked = None
        while n < len(segs) - 1:
            seg = segs[n]
            over = self._retention_bytes is not None and total > self._retention_bytes
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

    def position_at_time(self, timestamp_us: int) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def enforce_retention(self, pinned_positions: Iterable[int] = ()) -> RetentionResult:  # pragma: no cover
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()  # type: ignore[attr-defined]


__all__ = ["JournalCore", "merge_checkpoint"]
