"""FileJournal: the transaction log on disk (segments + frames, see ``segment.py``/``record.py``).

``append`` encodes frames into an in-memory buffer on the owner thread; ``flush`` writes the
buffer; ``sync`` (one worker thread at a time) fdatasyncs what was written and publishes
``durable_position``. Segments roll at ``segment_size`` with a checkpoint record first; a failed
write or fsync is cut back out of the files and reported as a :class:`WriteFailure`, leaving the
journal writable. The threading, summaries, readers and failure handling are described in
docs/contributing/internals.md, "The transaction log on disk".
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Mapping

from . import summary as summaries
from .api import (
    Durability,
    JournalError,
    RecoveryReport,
    WriteFailure,
)
from .base import Clock, merge_checkpoint
from .housekeeping import SegmentHousekeeping
from .identity import PATH
from .index import DEFAULT_INDEX_INTERVAL
from .reading import Columns, RecentWrites, Run, SegmentReads
from .record import (
    INTERNAL_KIND_MIN,
    FrameDecoder,
    FrameEncoder,
    JournalRecord,
    RecordKind,
    append_record,
    frame_size,
    room_for,
)
from .recovery import Recovery
from .retention import RETAINED_FROM, SegmentRetention, check_oldest
from .segment import HEADER_SIZE, O_CLOEXEC, FileOps, Segment, fdatasync
from .stored import CompressedCache
from .syncing import SegmentSync

if sys.platform != "win32":
    import fcntl

_PUBLISH = int(RecordKind.PUBLISH)

__all__ = ["DEFAULT_CHECKPOINT_BYTES", "DEFAULT_SEGMENT_SIZE", "RETAINED_FROM", "FileJournal", "FileOps"]


DEFAULT_SEGMENT_SIZE = 64 * 1024 * 1024
#: journal bytes between two summaries of the active segment (bounds the start-up tail scan:
#: 8 MiB is ~30,000 records of ~280 bytes, ~30 ms)
DEFAULT_CHECKPOINT_BYTES = 8 * 1024 * 1024


class FileJournal(SegmentReads, SegmentSync, SegmentRetention, SegmentHousekeeping):
    """Segmented, checksummed, append-only transaction log. Build with :meth:`open`."""

    # ------------------------------------------------------------------ construction
    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        segment_size: int = DEFAULT_SEGMENT_SIZE,
        durability: str | Durability = Durability.GROUP,
        retention_bytes: int | None = None,
        retention_age: float | None = None,
        clock: Clock | None = None,
        index_interval: int = DEFAULT_INDEX_INTERVAL,
        checkpoint_bytes: int | None = DEFAULT_CHECKPOINT_BYTES,
        defer_summaries: bool = False,
        archive_directory: str | None = None,
        compressed_cache_limit: int | None = None,
    ) -> None:
        """The journal's state, with no file touched: :meth:`open` constructs, then recovers."""
        self._init_core(clock=clock, durability=Durability(durability))
        if segment_size <= HEADER_SIZE:
            raise ValueError("segment_size too small")
        # -- settings (fixed)
        self._dir: str = os.fspath(directory)  # the journal directory
        self._segment_size = segment_size  # roll the active segment once it holds this many bytes
        self._retention_bytes = retention_bytes  # enforce_retention: size limit (None: none)
        self._retention_age = retention_age  # enforce_retention: age limit in seconds (None: none)
        self._index_interval = index_interval  # records between two sparse index entries
        self._summaries = self._durability is not Durability.MEMORY  # write segment summaries at all
        # journal bytes between two summaries of the active segment
        self._ckpt_every: float = checkpoint_bytes if checkpoint_bytes is not None else float("inf")
        self._defer_summaries = defer_summaries  # sync leaves summaries to write_summaries()
        self._strict = self._durability is Durability.STRICT  # write and fsync in every append
        #: the file calls of the write path (tests swap in one that fails on demand)
        self.file_ops = FileOps()
        # -- archived and compressed segments (housekeeping.py, stored.py)
        self.archive_directory = archive_directory  # JournalArchiveDirectory (None: none)
        self.compressed_cache = CompressedCache(compressed_cache_limit)  # reads .journal.gz
        self._busy: set[int] = set()  # segments being archived or compressed (by first position)
        # -- files (owner thread; fds handed between threads under _lock)
        self._dir_fd = -1  # the directory (flock'd; fsynced after segments come and go)
        self._segments: list[Segment] = []  # oldest first; the last is the active one
        self._firsts: list[int] = []  # their first positions, for bisect
        self._retired: list[Segment] = []  # rolled segments whose write fd the next sync closes
        self._dir_dirty = False  # segments were created or removed since the directory's fsync
        # -- write path (owner thread)
        self._enc = FrameEncoder()
        self._dec = FrameDecoder()
        self._buf = bytearray()  # frames not yet flushed (all for the active segment)
        self._buf_written = 0  # of which handed to the OS already (flush with a limit)
        self._pending: list[JournalRecord] = []  # their records, for readers
        self._recent = RecentWrites()  # the records of the last writes, for readers of the tail
        #: runs among _pending: (start, end) indexes, a plain run's columns
        self._pending_runs: list[Run] = []
        #: the instance every record of _pending was replicated from ("": not one; None: none yet)
        self._pending_via: str | None = None
        self._written_position = 0  # last position handed to the OS (or failed: a gap); _lock
        self._durable_position = 0  # last position fsynced; under _lock
        self._roll_blocked = False  # a roll failed: retry once a flush succeeds again
        self._failure: BaseException | None = None  # why the journal failed for good (None: it did not)
        #: records the file system refused, in order; the caller drains it (``take_write_failures``)
        self.write_failures: list[WriteFailure] = []
        # -- threads
        self._lock = threading.Lock()  # guards positions, fds and pending summaries across threads
        self._sync_lock = threading.Lock()  # one sync (or close) at a time; retired fds close under it
        # -- summaries
        self._ckpt_size_at = 0  # active segment size at its last snapshot (owner thread)
        # snapshots waiting to be durable, and their writer (any thread)
        self._summq = summaries.SummaryQueue(self._lock, self._durable_now)

    @classmethod
    def open(
        cls,
        directory: str | os.PathLike[str],
        *,
        segment_size: int = DEFAULT_SEGMENT_SIZE,
        durability: str | Durability = Durability.GROUP,
        retention_bytes: int | None = None,
        retention_age: float | None = None,
        keep_readable_on_corruption: bool = False,
        clock: Clock | None = None,
        index_interval: int = DEFAULT_INDEX_INTERVAL,
        checkpoint_bytes: int | None = DEFAULT_CHECKPOINT_BYTES,
        defer_summaries: bool = False,
        strict: bool = False,
        archive_directory: str | None = None,
        compressed_cache_limit: int | None = None,
    ) -> tuple[FileJournal, RecoveryReport]:
        """Open (creating if needed) and recover the journal in ``directory``.

        ``segment_size``: bytes after which the active segment is rolled (a segment exceeds it
        by at most one record). ``retention_bytes``/``retention_age`` (seconds): limits applied
        by :meth:`enforce_retention`. ``clock``: seconds since the epoch (default ``time.time``).
        ``checkpoint_bytes``: journal bytes between two summaries of the active segment (0:
        at every flush; None: only at roll and close). Ignored in ``memory`` durability, which
        writes no summaries. ``defer_summaries``: ``sync`` does not write the summaries it made
        durable; call :meth:`write_summaries` (any thread) when :attr:`summaries_due`.
        ``strict``: a missing oldest segment (positions before the oldest segment that retention
        did not remove, see ``RETAINED_FROM``) raises ``JournalError`` instead of a warning in
        the report. ``archive_directory``: where archived segments are (read at start-up with
        the journal directory's); ``compressed_cache_limit``: bytes of decompressed segments
        kept in memory (None: AMPS's default; see ``stored.py``).
        """
        t0 = time.perf_counter()
        self = cls(
            directory, segment_size=segment_size, durability=durability, retention_bytes=retention_bytes,
            retention_age=retention_age, clock=clock, index_interval=index_interval,
            checkpoint_bytes=checkpoint_bytes, defer_summaries=defer_summaries,
            archive_directory=archive_directory, compressed_cache_limit=compressed_cache_limit,
        )
        report = self._recover(t0, keep_readable_on_corruption, strict)
        if self.first_position < self.next_position:
            self._seqidx = None  # built from the records on first use (identity.SequenceIndex)
        return self, report

    def _recover(self, t0: float, keep_readable: bool, strict: bool = False) -> RecoveryReport:
        """Lock the directory, rebuild the state from the files, open the active segment."""
        os.makedirs(self._dir, exist_ok=True)
        self._dir_fd = os.open(self._dir, os.O_RDONLY | O_CLOEXEC)
        try:
            if sys.platform != "win32":  # one writer per directory (also within one process)
                try:
                    fcntl.flock(self._dir_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    raise JournalError(f"journal directory {self._dir} is already open by another "
                                       "journal") from None
            return self._load(t0, keep_readable, strict)
        except BaseException:
            if self._segments:
                self._segments[-1].close()
            os.close(self._dir_fd)
            self._dir_fd = -1
            raise

    def _load(self, t0: float, keep_readable: bool, strict: bool) -> RecoveryReport:
        rec = Recovery(
            self._dir,
            keep_readable=keep_readable,
            index_interval=self._index_interval,
            pub_last=self._pub_last,
            client_max=self._client_max,
            on_checkpoint=self._merge_checkpoint_bytes,
            fsync=self._summaries,
            archive=self.archive_directory,
            cache=self.compressed_cache,
        )
        rec.run()
        missing = check_oldest(self._dir, rec.segments[0].first_position if rec.segments else None,
                               strict=strict)
        if missing is not None:
            rec.warnings.append(missing)
        created = not rec.segments
        last = rec.last_position
        if created:
            self._install(Segment.create(self._dir, 1, self.file_ops, self._index_interval))
        else:
            self._segments = rec.segments
            self._firsts = [s.first_position for s in self._segments]
            newest = self._segments[-1]
            if newest.cache is None and os.path.dirname(newest.path) == self._dir:
                newest.open_for_append()
            else:  # archived or compressed: the log goes on in a new segment
                self._install(Segment.create(self._dir, max(last + 1, newest.first_position + 1),
                                             self.file_ops, self._index_interval))
        self._next_position = max(last + 1, self._segments[-1].first_position)
        self._last_ts = max((s.last_ts for s in self._segments if s.count), default=0)
        self._written_position = self._next_position - 1
        self._durable_position = self._written_position
        self._client_durable = dict(self._client_max)
        active = self._segments[-1]
        if self._durability is not Durability.MEMORY:
            fdatasync(active.fd)
            os.fsync(self._dir_fd)
            self._dir_dirty = False
        self._ckpt_size_at = active.size
        active.set_mark()
        if rec.crc_base is not None and not created:
            self._summq.crc_base[active.first_position] = rec.crc_base
        if rec.pending_summaries:  # due at once (the server writes them in a worker)
            for path, summ in rec.pending_summaries:
                self._summq.add(self._written_position, path, summ, recovered=True)
            if not self._defer_summaries:
                self._summq.write_due()
        return RecoveryReport(
            directory=self._dir,
            segments=len(self._segments),
            records=sum(s.count for s in self._segments),
            bytes=sum(s.size for s in self._segments),
            first_position=self.first_position,
            last_position=last,
            seconds=time.perf_counter() - t0,
            created=created,
            truncated=tuple(rec.truncated),
            skipped=tuple(rec.skipped),
            warnings=tuple(rec.warnings),
            summarised_segments=rec.summarised,
            scanned_bytes=rec.scanned_bytes,
        )

    # ------------------------------------------------------------------ summaries
    def _snapshot(self, seg: Segment, sealed: bool) -> None:
        """Queue a summary of ``seg`` as flushed (call right after ``flush``: the maps then
        describe exactly the written records). ``sync`` writes it once it is durable."""
        summ = summaries.snapshot(
            seg, file_crc=0, sealed=sealed, publishers=self._pub_last.items(),
            clients=self._client_max.items(),
        )
        self._summq.add(self._written_position, seg.path, summ)
        self._ckpt_size_at = seg.size

    @property
    def summaries_due(self) -> bool:
        """True when a queued summary is durable and waits for :meth:`write_summaries`."""
        return self._summq.due(self.durable_position)

    def write_summaries(self) -> None:
        """Write the queued summaries that are durable (thread-safe; a no-op when none is)."""
        if self._summq.pending:
            self._summq.write_due()

    def _durable_now(self) -> int:
        return self._durable_position

    def _merge_checkpoint_bytes(self, payload: bytes) -> None:
        merge_checkpoint(self._dec.decode_checkpoint(payload), self._pub_last, self._client_max)

    def _install(self, seg: Segment) -> None:
        """Make the new ``seg`` (created with its write fd) the active segment: the old one's fd
        is retired (the next ``sync`` fsyncs and closes it). Atomic for ``sync``."""
        with self._lock:
            if self._segments and self._segments[-1].fd >= 0:
                self._retired.append(self._segments[-1])
            self._segments.append(seg)
            self._firsts.append(seg.first_position)
            self._dir_dirty = True

    # ------------------------------------------------------------------ properties
    @property
    def directory(self) -> str:
        return self._dir

    @property
    def first_position(self) -> int:
        return self._segments[0].first_position if self._segments else self._next_position

    @property
    def durable_position(self) -> int:
        """Highest position a ``persisted`` ack may cover (meaning per mode: see ``api.py``)."""
        if self._durability is Durability.MEMORY:
            return self._next_position - 1
        return self._durable_position

    @property
    def written_position(self) -> int:
        """Highest position handed to the OS (not necessarily on stable storage)."""
        return self._written_position

    @property
    def segments(self) -> tuple[Segment, ...]:
        return tuple(self._segments)

    @property
    def pending_bytes(self) -> int:
        return len(self._buf) - self._buf_written

    # ------------------------------------------------------------------ write path
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
    ) -> JournalRecord:
        """Assign position, bookmark and timestamp; buffer the record; return it (not yet durable)."""
        if kind >= INTERNAL_KIND_MIN:
            raise ValueError(f"record kind {kind} is journal-internal")
        # _roll_if_full and _take, inlined: this is every publish's path
        active = self._segments[-1]
        if active.count and active.size + len(self._buf) >= self._segment_size and not self._closed \
                and not self._roll_blocked:
            self._roll()
        rec = self._make_record(
            kind, topic, client_name, body, client_seq, correlation_id, sow_key, expiration, message_type,
            headers,
        )
        self._buffer(rec)
        if self._strict:
            self.flush()
            self._sync_now(rec.position)
        return rec

    def append_publishes(self, topic: str, message_type: str, client_name: str,
                         bodies: list[bytes], client_seqs: list[int] | None) -> list[JournalRecord]:
        """``append`` for a run of plain publishes (see ``Journal.append_publishes``): the
        segment rolls before the same record as it would one by one; the records of each
        part are made together and encoded straight into the buffer."""
        if self._strict:  # each record written and synced before the next: one by one
            seqs = client_seqs if client_seqs is not None else [None] * len(bodies)
            return [self.append(topic=topic, client_name=client_name, body=body, client_seq=cs,
                                message_type=message_type) for body, cs in zip(bodies, seqs, strict=True)]
        recs: list[JournalRecord] = []
        start, n = 0, len(bodies)
        while start < n:
            self._roll_if_full()
            active = self._segments[-1]
            stop = n if self._closed or self._roll_blocked else room_for(
                bodies, start, frame_size(topic, message_type, client_name, None, None, None, {}, b""),
                active.size + len(self._buf), active.count, self._segment_size)
            index = active.index
            whole = not start and stop == n
            some = bodies if whole else bodies[start:stop]
            some_s = client_seqs if client_seqs is None or whole else client_seqs[start:stop]
            part, marks, seqs = self._make_publish_records(
                topic, message_type, client_name, some, some_s, self._buf, active.size,
                index.next_position, index.interval)
            self._note_publishes(active, part, marks, (seqs, some_s, some))
            recs += part
            start = stop
        return recs

    def _append_plain(self, topic: str, message_type: str, client_name: str, publisher_id: int,
                      sequences: list[int], client_seqs: list[int] | None, headers: dict[str, str],
                      bodies: list[bytes]) -> list[JournalRecord]:
        """A plain replicated run (``append_replicated_plain``'s hook), as
        :meth:`append_publishes` stores a run of publishes: segment by segment, the frames
        encoded straight into the buffer."""
        if self._strict:  # each record written and synced before the next
            recs = []
            for i, body in enumerate(bodies):
                part, _ = self._make_replicated_plain(
                    topic, message_type, client_name, publisher_id, sequences[i:i + 1],
                    None if client_seqs is None else client_seqs[i:i + 1], headers, [body])
                self._take(part[0])
                recs += part
            return recs
        recs = []
        start, n = 0, len(bodies)
        fixed = frame_size(topic, message_type, client_name, None, None, None, headers, b"")
        while start < n:
            self._roll_if_full()
            active = self._segments[-1]
            stop = n if self._closed or self._roll_blocked else room_for(
                bodies, start, fixed, active.size + len(self._buf), active.count, self._segment_size)
            whole = not start and stop == n
            index = active.index
            part, marks = self._make_replicated_plain(
                topic, message_type, client_name, publisher_id,
                sequences if whole else sequences[start:stop],
                None if client_seqs is None else client_seqs if whole else client_seqs[start:stop],
                headers, bodies if whole else bodies[start:stop], self._buf, active.size,
                index.next_position, index.interval)
            self._note_publishes(active, part, marks, via=headers.get(PATH))  # (published at via)
            recs += part
            start = stop
        return recs

    def _note_publishes(self, active: Segment, recs: list[JournalRecord],
                        marks: list[tuple[int, int]], columns: Columns | None = None,
                        via: str | None = None) -> None:
        """Note a run's records, whose frames are in the buffer, in ``active`` (``_buffer``'s
        bookkeeping for each, done once): its index's entries ``marks``, its counts and times;
        ``columns``: a run of plain publishes' sequences, ``s`` and bodies, kept with the run
        for a reader of the tail (``run_columns``); ``via``: the instance a replicated run came
        from."""
        first, last = recs[0], recs[-1]
        index = active.index
        for position, offset in marks:  # (a run's records share their time)
            index.maybe_add(position, offset, first.timestamp)
        start = len(self._pending)
        self._pending.extend(recs)
        self._pending_runs.append((start, start + len(recs), columns))
        held = self._pending_via
        self._pending_via = via if via is not None and held in (None, via) else ""
        active.note_run(first, last, len(recs))

    def _prepare_append(self) -> None:
        """Roll a full segment before a record is made (``append_replicated``'s hook)."""
        self._roll_if_full()

    def _keep_appended(self, where: None, rec: JournalRecord) -> None:
        """Buffer ``rec`` (``append_replicated``'s hook; see :meth:`_take`)."""
        self._take(rec)

    def _room(self, where: None) -> int:
        """Bytes of frames the active segment takes before it is full (``append_replicated_run``'s
        hook: the record that reaches it is the segment's last)."""
        return self._segment_size - self._segments[-1].size - len(self._buf)

    def _keep_run(self, where: None, recs: list[JournalRecord]) -> None:
        """Buffer ``recs``, records just made that all go to the active segment
        (``append_replicated_run``'s hook): :meth:`_buffer` for each, the segment's
        bookkeeping once."""
        if self._strict:  # each written and synced before the next
            for rec in recs:
                self._take(rec)
            return
        if not recs:
            return
        active = self._segments[-1]
        buf = self._buf
        base = active.size
        index = active.index
        mark = index.next_position
        for rec in recs:
            position = rec.position
            if position >= mark:
                index.maybe_add(position, base + len(buf), rec.timestamp)
                mark = index.next_position
            append_record(
                buf, rec.kind, position, rec.publisher_id, rec.sequence, rec.timestamp,
                rec.client_seq, rec.topic, rec.message_type, rec.client_name, rec.correlation_id,
                rec.sow_key, rec.expiration, rec.headers, rec.body,
            )
        self._pending.extend(recs)
        self._pending_via = ""  # (records of any origin)
        active.note_run(recs[0], recs[-1], len(recs))

    def _roll_if_full(self) -> None:
        """Roll to a new segment once the active one (with the buffer) has reached its size."""
        active = self._segments[-1]
        if active.count and active.size + len(self._buf) >= self._segment_size and not self._closed \
                and not self._roll_blocked:
            self._roll()

    def _take(self, rec: JournalRecord) -> None:
        """Buffer ``rec``; under ``strict`` durability write and sync it before returning."""
        self._buffer(rec)
        if self._strict:
            self.flush()
            self._sync_now(rec.position)

    def _buffer(self, rec: JournalRecord) -> None:
        """Encode ``rec`` into the active buffer and note it in the active segment (the per-record
        half of ``append``: one encoder call, the segment's and index's bookkeeping inlined)."""
        active = self._segments[-1]
        buf = self._buf
        offset = active.size + len(buf)
        position = rec.position
        ts = rec.timestamp
        append_record(
            buf, rec.kind, position, rec.publisher_id, rec.sequence, ts, rec.client_seq, rec.topic,
            rec.message_type, rec.client_name, rec.correlation_id, rec.sow_key, rec.expiration,
            rec.headers, rec.body,
        )
        self._pending.append(rec)
        self._pending_via = ""  # (a record of its own: any origin)
        # Segment.note_record, inlined
        if not active.count:
            active.first_record_position = position
            active.first_ts = ts
        active.count += 1
        active.last_position = position
        active.last_ts = ts
        index = active.index
        if position >= index.next_position:
            index.maybe_add(position, offset, ts)

    def _roll(self) -> None:
        failures = len(self.write_failures)
        self.flush()
        sealed = self._segments[-1]
        try:
            if len(self.write_failures) != failures:
                raise OSError("the finished segment could not be written")
            if self._durability is not Durability.MEMORY:
                sealed.sync(self.file_ops)
            self._install(Segment.create(self._dir, self._next_position, self.file_ops, self._index_interval))
        except OSError:
            self._roll_blocked = True  # stay in this segment; retried after a good flush
            return
        if self._summaries:
            self._snapshot(sealed, sealed=True)
        self._ckpt_size_at = HEADER_SIZE
        self._close_retired_if_idle()
        self._buffer_checkpoint()

    def _buffer_checkpoint(self) -> None:
        cp = self._make_record(
            int(RecordKind.CHECKPOINT), "", "", self._enc.encode_checkpoint(self._checkpoint()),
            None, None, None, None, "", None,
        )
        self._buffer(cp)

    def append_checkpoint(self) -> None:
        """Buffer a CHECKPOINT record (journal-internal, skipped by readers). The server writes
        one to find out whether the disk takes writes again; a roll put off by a failure is
        retried first."""
        self._roll_blocked = False
        active = self._segments[-1]
        if active.count and active.size + len(self._buf) >= self._segment_size and not self._closed:
            self._roll()
        self._buffer_checkpoint()

    def take_write_failures(self) -> list[WriteFailure]:
        """The write failures since the last call (oldest first), and forget them."""
        failures, self.write_failures = self.write_failures, []
        return failures

    def _write_failed(self, records: list[JournalRecord], exc: OSError) -> None:
        """The write of ``records``' frames failed part-way: cut what reached the file, forget
        the records (their positions become a gap) and report them in ``write_failures``."""
        active = self._segments[-1]
        try:
            active.truncate()
        except OSError as cut_exc:
            self._failure = cut_exc
            self._closed = True
            raise JournalError(
                f"journal write failed in {active.path} ({exc}) and the partial write could not "
                f"be cut off ({cut_exc})"
            ) from cut_exc
        active.restore_mark()
        first, last = records[0].position, records[-1].position
        q = self._unapplied_s
        while q and q[-1][0] >= first:
            q.pop()
        with self._lock:
            self._written_position = last  # nothing is there: a gap the next sync covers
        self.write_failures.append(WriteFailure(first, last, exc))

    def flush(self, limit: int | None = None) -> bool:
        """Hand the buffered frames to the OS (one write); whether all of them went. Owner
        thread only. ``limit``: at most this many bytes now (the server's end of a turn: one
        write of a 32 MiB record held its event loop for tens of ms); the records count as
        written (and readers see them) once every byte of the buffer is, with a later call."""
        if self._unapplied_s:
            self._apply_durable_s()  # bounded: holds at most the not-yet-durable turns
        if not self._buf:
            return True
        active = self._segments[-1]
        done = self._buf_written
        if limit is not None and len(self._buf) - done > limit:
            try:
                with memoryview(self._buf) as view:
                    active.write_ahead(view[done:done + limit], self.file_ops)
            except OSError as exc:
                self._write_failed(self._take_buffer(), exc)
                return True
            self._buf_written = done + limit
            return False
        data = self._buf
        runs, via = self._pending_runs, self._pending_via
        records = self._take_buffer()
        try:
            if done:
                with memoryview(data) as view:
                    active.write_ahead(view[done:], self.file_ops)
                active.size += len(data)
            else:
                active.write(data, self.file_ops)
        except OSError as exc:
            self._write_failed(records, exc)
            return True
        with self._lock:
            self._written_position = records[-1].position
        self._recent.add(records, len(data), runs, via)
        active.set_mark()
        self._roll_blocked = False
        if self._summaries and active.size - self._ckpt_size_at >= self._ckpt_every:
            self._snapshot(active, sealed=False)
        return True

    def _take_buffer(self) -> list[JournalRecord]:
        """Empty the write buffer; the records whose frames it held."""
        records = self._pending
        self._buf = bytearray()
        self._buf_written = 0
        self._pending, self._pending_runs, self._pending_via = [], [], None
        return records

    def close(self) -> None:
        """Flush, fsync (unless memory mode) and close. Idempotent."""
        if self._fd < 0 and self._dir_fd < 0:
            return
        try:
            if self._failure is None and self._fd >= 0:
                self.flush()
                active = self._segments[-1]
                if self._summaries and active.size > self._ckpt_size_at:
                    self._snapshot(active, sealed=False)
                self.sync()
                self.write_summaries()
        finally:
            self._closed = True
            with self._sync_lock, self._lock:
                for seg in self._retired:
                    seg.close()
                self._retired = []
                if self._segments:
                    self._segments[-1].close()
                if self._dir_fd >= 0:
                    os.close(self._dir_fd)
                    self._dir_fd = -1
            self.compressed_cache.close()

    def __repr__(self) -> str:
        return (
            f"FileJournal({self._dir!r}, durability={self._durability.value}, "
            f"segments={len(self._segments)}, "
            f"positions={self.first_position}..{self.last_position}, durable={self.durable_position})"
        )
