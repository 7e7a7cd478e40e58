"""The ``Journal`` protocol shared by FileJournal and MemoryJournal, durability modes, errors
and the recovery report.

Durability (``durability=``) -- what a ``persisted`` ack means, per mode
-------------------------------------------------------------------------
``durable_position`` is the highest log position the server may acknowledge as ``persisted``.
The server releases a publish's persisted ack only once ``durable_position >= record.position``.

* ``"group"`` (default, FileJournal): group commit. ``append`` only buffers; the server calls
  ``flush()`` (one ``os.write`` of the turn's records) and then ``sync()`` (``fdatasync`` of the
  segment files, plus the directory when a segment was created or deleted) once per event-loop
  turn, possibly in a worker thread. ``durable_position`` advances only after that fsync
  returns, so a persisted ack means "on stable storage; survives a crash of the process or the
  machine". Segment roll also fsyncs the finished segment before writing the next one, so a
  crash can only ever tear the tail of the last segment.
* ``"strict"`` (FileJournal): every ``append`` writes and fdatasyncs before it returns;
  ``durable_position`` is always the last appended position. Same promise as group, paid per
  publish (slow: one fsync per message, on the caller's thread).
* ``"memory"`` (MemoryJournal always; FileJournal on request, for throwaway CI runs): nothing
  is ever fsynced. ``durable_position`` is the last appended position, and a persisted ack then
  means only "accepted by this process". It promises NOTHING across a crash (and for
  MemoryJournal nothing across a restart either).

Threading
---------
One owner thread (the event loop) calls everything except ``sync()`` and ``durable_position``,
which are safe from one other thread (a worker running ``sync`` while the loop keeps appending).
See ``file_journal.py`` for the double-buffer and lock design.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from amps_emulator.protocol.bookmarks import Bookmark, BookmarkRange, BookmarkSpec

from .record import JournalRecord, RecordKind

if TYPE_CHECKING:
    from .stored import ReadHold

__all__ = [
    "Durability",
    "Journal",
    "JournalError",
    "JournalCorruptError",
    "JournalClosedError",
    "JournalFormatError",
    "JournalSyncError",
    "DuplicatePublish",
    "RecoveryReport",
    "LostData",
    "RetentionResult",
    "WriteFailure",
]


class Durability(enum.StrEnum):
    """See the module docstring for what each mode promises."""

    GROUP = "group"
    STRICT = "strict"
    MEMORY = "memory"


class JournalError(Exception):
    """Base class of journal errors."""


class JournalCorruptError(JournalError):
    """Damage that is not a torn tail (bad record followed by valid data). Names file and offset."""

    def __init__(self, message: str, *, path: str = "", offset: int = -1) -> None:
        super().__init__(message)
        self.path = path
        self.offset = offset


class JournalFormatError(JournalError):
    """A structurally valid file this code does not understand (e.g. a newer version byte)."""


class JournalSyncError(JournalError):
    """An fsync of ``sync`` failed: what was written since the last good sync is not known to
    be on disk. The owner calls ``discard_unsynced`` (see ``file_journal.py``)."""

    def __init__(self, message: str, error: BaseException) -> None:
        super().__init__(message)
        self.error = error


class DuplicatePublish(Exception):
    """A publish whose ``s`` is at or below the highest this journal holds for its client
    name, whichever way that one arrived (published here, or replicated from another
    instance): the same message again, refused with nothing appended. The server drops it
    and acks it as it acks any republished message. Not a :class:`JournalError`: the journal
    is fine."""

    def __init__(self, client_name: str, client_seq: int, held: int) -> None:
        super().__init__(f"publish s={client_seq} of {client_name!r}: s={held} is held already")
        self.client_name = client_name
        self.client_seq = client_seq
        self.held = held


class JournalClosedError(JournalError):
    """The journal was closed, or failed after a write error, and accepts no more appends."""


@dataclass(frozen=True)
class WriteFailure:
    """Records the file system refused (disk full, I/O error): positions ``first..last`` were
    cut from the file again and are a gap now; ``error`` is the OS error."""

    first: int
    last: int
    error: BaseException


@dataclass(frozen=True)
class LostData:
    """A byte range dropped during recovery."""

    path: str
    offset: int
    bytes_lost: int
    records_lost: int  # frames whose prefix could still be delimited; at least 1 for a partial one
    reason: str


@dataclass(frozen=True)
class RecoveryReport:
    """What ``FileJournal.open`` found and did."""

    directory: str
    segments: int
    records: int
    bytes: int
    first_position: int
    last_position: int  # 0 when the journal is empty
    seconds: float
    created: bool  # True when the directory held no journal yet
    truncated: tuple[LostData, ...] = ()  # torn tails cut off (always the last segment)
    skipped: tuple[LostData, ...] = ()  # corrupt ranges dropped under keep_readable_on_corruption
    warnings: tuple[str, ...] = ()
    summarised_segments: int = 0  # segments recovered from a trusted summary (see summary.py)
    scanned_bytes: int = 0  # bytes verified frame by frame (the rest: by the summaries' crc32)

    @property
    def clean(self) -> bool:
        return not self.truncated and not self.skipped


@dataclass(frozen=True)
class RetentionResult:
    removed: tuple[str, ...] = ()  # segment names removed, oldest first
    bytes_removed: int = 0
    records_removed: int = 0
    blocked_by_pin: int | None = None  # the pinned position that stopped removal, if any
    reasons: tuple[str, ...] = field(default=())


class TailReader(Protocol):
    """A reader that follows a journal's tail (a replication sender): the first position it
    has not read yet."""

    next_position: int
    #: the instance whose records it steps over without reading them, but for the last of a
    #: run (a sender's peer: none goes back to it); None: it reads every record
    steps_over: str | None


@runtime_checkable
class Journal(Protocol):
    """The transaction-log storage API (synchronous; no asyncio, no sockets)."""

    @property
    def durability(self) -> Durability: ...
    @property
    def first_position(self) -> int: ...  # oldest retained position (== next_position when empty)
    @property
    def last_position(self) -> int: ...  # last appended position, 0 if none ever
    @property
    def next_position(self) -> int: ...
    @property
    def durable_position(self) -> int: ...

    def append(
        self,
        *,
        topic: str,
        client_name: str,
        body: bytes = b"",
        kind: int = RecordKind.PUBLISH,
        client_seq: int | None = None,
        correlation_id: str | None = None,
        sow_key: str | None = None,
        expiration: int | None = None,
        message_type: str = "",
        headers: Mapping[str, str] | None = None,
    ) -> JournalRecord: ...

    def append_publishes(self, topic: str, message_type: str, client_name: str,
                         bodies: list[bytes], client_seqs: list[int] | None) -> list[JournalRecord]:
        """A run of plain publishes (kind PUBLISH, no correlation id, SowKey, expiration or
        headers) of one client to one topic: the records ``append`` gives one by one."""
        ...

    def append_replicated(
        self,
        *,
        topic: str,
        client_name: str,
        publisher_id: int,
        sequence: int,
        origin_timestamp: int,
        body: bytes = b"",
        kind: int = RecordKind.PUBLISH,
        client_seq: int | None = None,
        correlation_id: str | None = None,
        sow_key: str | None = None,
        expiration: int | None = None,
        message_type: str = "",
        headers: Mapping[str, str] | None = None,
    ) -> JournalRecord | None: ...

    def append_replicated_run(self, upstream: Sequence[JournalRecord], via: str, *,
                              seen: str | None = None,
                              group: str | None = None) -> tuple[list[JournalRecord], int]:
        """Records instance ``via`` sent in one batch, as it logged them: the records
        appended and how many were held here already (``replicated.ReplicatedAppends``)."""
        ...

    def append_replicated_plain(self, topic: str, message_type: str, client_name: str,
                                publisher_id: int, origin_timestamp: int, sequences: list[int],
                                client_seqs: list[int] | None, bodies: list[bytes], via: str, *,
                                seen: str | None = None,
                                group: str | None = None) -> tuple[list[JournalRecord], int]:
        """A run of publishes of one publisher to one topic that instance ``via`` logged at
        once, with no options or headers, as columns (``replicated.ReplicatedAppends``)."""
        ...

    def flush(self, limit: int | None = None) -> bool: ...
    def sync(self) -> int: ...
    def close(self) -> None: ...

    def read(self, from_position: int = 1, *, include_internal: bool = False,
             hold: ReadHold | None = None) -> Iterator[JournalRecord]:
        """Records from ``from_position`` on, in log order (``hold``: a reader that must not
        block; see ``stored.ReadHold``)."""
        ...
    def stored_frames(self, position: int, at: tuple[int, str, int] | None, max_bytes: int
                      ) -> tuple[bytes, str, int] | None: ...
    def record_at(self, position: int, hold: ReadHold | None = None) -> JournalRecord | None: ...
    def follow_tail(self, reader: TailReader) -> None:
        """``reader`` (with a ``next_position``) reads each record soon after it is written:
        the journal may keep what it has not read in memory while it lives."""
        ...

    def run_columns(self, position: int, count: int
                    ) -> tuple[list[int], list[int] | None, list[bytes]] | None:
        """The sequences, ``s`` (None: none has one) and bodies of up to ``count`` records
        from ``position`` on, within the run of plain publishes appended together that it
        belongs to, while the journal holds them in memory (None: read the records)."""
        ...
    def position_after_bookmark(self, bookmark: str | BookmarkSpec, *, resume: bool = False,
                                hold: ReadHold | None = None) -> int | None: ...
    def position_at_time(self, timestamp_us: int, hold: ReadHold | None = None) -> int: ...
    def range_positions(self, rng: BookmarkRange,
                        hold: ReadHold | None = None) -> tuple[int | None, int]: ...

    def last_seq_for_client(self, client_name: str, *, persisted: bool = True) -> int: ...
    def is_duplicate(self, client_name: str, client_seq: int) -> bool: ...
    def last_sequence_for_publisher(self, publisher_id: int) -> int: ...
    def last_bookmark_for_client(self, client_name: str) -> Bookmark | None: ...
    def publisher_id(self, client_name: str) -> int: ...
    def is_replicated_duplicate(self, publisher_id: int, sequence: int, client_seq: int | None) -> bool: ...
    def high_water_marks(self) -> dict[int, int]: ...
    def first_position_missing_from(self, theirs: Mapping[int, int],
                                    hold: ReadHold | None = None) -> int | None: ...
    def position_of(self, bm: Bookmark, hold: ReadHold | None = None) -> int | None: ...
    def arrivals_before(self, position: int, hold: ReadHold | None = None) -> dict[str, str]: ...
    def arrival_run(self, sender: str, position: int) -> int | None: ...
    def position_for_unheld(self, hold: ReadHold | None = None) -> int | None: ...

    def enforce_retention(self, pinned_positions: Iterable[int] = (), *,
                          age: float | None = None) -> RetentionResult: ...
