"""journal: the AMPS transaction-log storage engine (pure storage: no asyncio, no sockets).

* ``record.py``   -- ``JournalRecord``, ``RecordKind`` and the on-disk frame layout (read it to
  parse journals without the server).
* ``segment.py``  -- segment file naming and header, chunked frame reader.
* ``bookmarks.py``-- ``Bookmark`` and parse/format of every client bookmark form.
* ``api.py``      -- the ``Journal`` protocol, ``Durability`` (what ``persisted`` means), errors,
  ``RecoveryReport``.
* ``file_journal.py`` / ``memory_journal.py`` -- the two implementations.
* ``recovery.py`` -- start-up scan, torn-tail truncation, corruption policy.
* ``summary.py``  -- per-segment summaries that let recovery skip verified, durable data.
* ``index.py``    -- sparse position/time index.
"""

from amps_emulator.protocol.bookmarks import (
    EPOCH,
    NOW,
    RECENT,
    Bookmark,
    BookmarkError,
    BookmarkKeyword,
    BookmarkList,
    BookmarkRange,
    BookmarkSpec,
    BookmarkTimestamp,
    format_bookmark,
    format_timestamp,
    parse_bookmark,
    parse_timestamp,
    publisher_id_for,
)

from .api import (
    DuplicatePublish,
    Durability,
    Journal,
    JournalClosedError,
    JournalCorruptError,
    JournalError,
    JournalFormatError,
    JournalSyncError,
    LostData,
    RecoveryReport,
    RetentionResult,
    WriteFailure,
)
from .file_journal import FileJournal
from .memory_journal import MemoryJournal
from .record import JournalRecord, RecordKind
from .stored import ReadHold, SegmentPending

__all__ = [
    "DuplicatePublish",
    "Bookmark",
    "BookmarkError",
    "BookmarkKeyword",
    "BookmarkList",
    "BookmarkRange",
    "BookmarkSpec",
    "BookmarkTimestamp",
    "Durability",
    "EPOCH",
    "FileJournal",
    "Journal",
    "JournalClosedError",
    "JournalCorruptError",
    "JournalError",
    "JournalFormatError",
    "JournalSyncError",
    "WriteFailure",
    "JournalRecord",
    "LostData",
    "MemoryJournal",
    "NOW",
    "RECENT",
    "ReadHold",
    "RecordKind",
    "RecoveryReport",
    "RetentionResult",
    "SegmentPending",
    "format_bookmark",
    "format_timestamp",
    "parse_bookmark",
    "parse_timestamp",
    "publisher_id_for",
]
