"""The server's transaction log: recording publishes, durability turns and persisted acks.

Owns the :class:`journal.FileJournal` of the config's ``TransactionLog`` and decides *when*
things may be said to clients:

* A publish to a recorded topic is appended (getting its bookmark) while its command is
  handled; at the end of the event-loop turn the journal is written (one ``write``) and, in
  ``group`` durability, fsynced off the loop: on the compiled extension's sync thread
  (``_speedups.Syncer``, which never takes the GIL; what the loop writes while it syncs is
  handed to it at each turn's end and synced straight after, and each turn's end takes what
  it made durable), else in a worker thread. Only when that sync returns do persisted
  acks for those publishes go out (``durable_position``), and only then do bookmark
  subscriptions without the ``live`` option see the messages. ``strict`` syncs on append and
  ``memory`` never syncs; in both, ``durable_position`` is the last appended position, and in
  ``memory`` a persisted ack promises nothing across a crash (the journal module says so).
* Persisted acks are cumulative per connection, so they are released strictly in the order
  the publishes arrived: one FIFO of ``(position, connection, seq)`` across the server (a
  run of publishes: one entry, :mod:`.persist_runs`), popped as the durable position
  advances. A republished duplicate, or a publish to a topic that is not recorded, waits
  behind everything already appended, so no ack ever claims more than what happened. Acks
  released between turns (the loop hears that a sync ended, or a sync replication
  destination acknowledges) are written at once to each connection that had nothing
  queued; one with output queued this turn keeps them behind it until the turn's end, so an
  ack never overtakes earlier output of its connection.
* Bookmark subscriptions are journal cursors (:mod:`server.delivery.replay`), pumped after each turn.
* Disk full (or any refused write; or a failed fsync, after which the journal cuts everything
  not yet durable): the journal cuts the refused records out of the file
  again and reports their positions (``journal.take_write_failures``). Their persisted acks
  become ``tx store failure`` failure acks carrying ``s``, released in the same FIFO order,
  so the official client's failed-write handler gets each message (its store discards up to
  the ``s`` of every persisted ack, so a failure must never overtake an earlier publish of
  the same connection). The log then refuses publishes to recorded topics up front (same
  ack) and probes the disk every ``PROBE_INTERVAL`` seconds with a CHECKPOINT record; the
  first one that is written ends the refusal. One log line per change of state, with a count.
  Reads and replays go on throughout (the refused positions are a gap they step over).
* The journal's segment summaries (what makes start-up after a crash fast, see
  :mod:`journal.summary`) are written in a worker after the sync that made them durable, never
  inside it, so persisted acks do not wait for them.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from amps_emulator import accel
from amps_emulator.journal import (
    DuplicatePublish,
    Durability,
    FileJournal,
    JournalError,
    JournalSyncError,
    MemoryJournal,
    RecordKind,
)
from amps_emulator.journal.segment import FileOps
from amps_emulator.journal.stored import remove_journal_files
from amps_emulator.journal.syncing import SyncJob
from amps_emulator.protocol import reasons
from amps_emulator.protocol.reasons import CommandError
from amps_emulator.protocol.topics import display_name, split_topic, type_of
from amps_emulator.server.core.meters import AckLatency
from amps_emulator.server.delivery.acks import persisted as acks_persisted
from amps_emulator.server.delivery.acks import refused as acks_refused
from amps_emulator.server.services.persist_runs import ack_entry, expand_failed, run_entry, split_front

if TYPE_CHECKING:
    from amps_emulator.protocol.command import Command
    from amps_emulator.server.core.ports import Client, JournalCursor, TxLogHost

log = logging.getLogger("amps_emulator.txlog")

if accel.COMPILED:
    from amps_emulator import _speedups
    _Syncer: Any = getattr(_speedups, "Syncer", None)
else:
    _Syncer = None

SUBSCRIPTION_ACK_INTERVAL = 1.0  # seconds between persisted acks for bookmark subscriptions
RETENTION_EVERY = 5  # run retention every this many ack ticks (when configured)
PROBE_INTERVAL = 1.0  # seconds between attempts to write again after a refused write
#: bytes of the journal's buffer written at the end of one turn (a few ms of ``write``)
WRITE_SLICE = 4 << 20


class TxLog:
    def __init__(self, server: TxLogHost, cfg: Any, *, memory: bool = False,
                 strict_recovery: bool = False) -> None:
        self.server = server
        self.cfg = cfg
        #: ``--memory``: no files; Durability is memory whatever the config says
        self.memory = memory
        #: refuse to open when acked data is found missing (the oldest segment, a gap)
        self.strict_recovery = strict_recovery
        #: the open journal (:attr:`journal`); None before :meth:`open` and after :meth:`close`
        self._journal: FileJournal | MemoryJournal | None = None
        self._recorded: dict[str, bool] = {}
        # (position, connection, publish seq or the waiting ``flush`` command, failure reason or
        # None), in arrival order
        self._persist_fifo: collections.deque[tuple[int, Client, Any, str | None]] = \
            collections.deque()
        self._sync_running = False
        self._written_unsynced = False
        #: the compiled sync thread (``_speedups.Syncer``), its wake-up pipe (read end, write
        #: end) and the sync it runs; None without the compiled extension
        self._syncer: Any = None
        self._wake: tuple[int, int] | None = None
        self._job: SyncJob | None = None
        #: while the loop takes a sync's end between turns: each connection whose persisted
        #: acks it released, and whether it had nothing queued before them (_between_turns)
        self._answered: dict[Client, bool] | None = None
        self._summaries_running = False
        self.cursors: set[JournalCursor] = set()
        self._ack_timer: Any = None
        self._ticks = 0
        self.failed: str | None = None  # AMPS reason while the journal cannot be written
        self._fatal = False  # the journal is closed for good (not only refusing writes)
        self._probe_timer: Any = None
        self._refused = 0  # publishes failed since the log began refusing writes
        #: persisted acks are withheld (a ``hold_acks`` fault of the admin interface) until
        #: :meth:`release_held` is called
        self.holding_acks = False
        #: the sync replication destinations' gate (``ReplicationService.gate``): how far, of
        #: what is durable here, every sync destination has acknowledged; None = no gate
        self.ack_gate: Callable[[int], int] | None = None
        #: how long persisted acks waited (the Admin interface's metrics and console read it)
        self.ack_latency = AckLatency()

    @property
    def journal(self) -> FileJournal | MemoryJournal:
        """The open journal; ``RuntimeError`` before :meth:`open` and after :meth:`close`."""
        journal = self._journal
        if journal is None:
            raise RuntimeError("the transaction log is not open")
        return journal

    @property
    def is_open(self) -> bool:
        return self._journal is not None

    @property
    def safe_position(self) -> int:
        """The last position persisted acks may cover: durable here and, when the instance
        has sync replication destinations, acknowledged by every one of them."""
        return self._safe(self.journal.durable_position)

    def _safe(self, durable: int) -> int:
        gate = self.ack_gate
        return durable if gate is None else min(durable, gate(durable))

    # -- lifecycle ---------------------------------------------------------------------
    def open(self) -> None:
        cfg = self.cfg
        if self.memory:
            self._journal = MemoryJournal(segment_size=cfg.journal_size,
                                         retention_bytes=cfg.retention_size,
                                         retention_age=cfg.retention_age,
                                         clock=self.server.wallclock)  # as the file journal
            log.info("transaction log in memory (--memory): nothing is written to %s",
                     cfg.journal_directory)
            return
        self._journal, report = FileJournal.open(
            cfg.journal_directory,
            segment_size=cfg.journal_size,
            durability=cfg.durability,
            retention_bytes=cfg.retention_size,
            retention_age=cfg.retention_age,
            keep_readable_on_corruption=self.server.keep_readable_journal,
            strict=self.strict_recovery,
            defer_summaries=True,
            clock=self.server.wallclock,  # record times follow the server's (test) clock
            archive_directory=cfg.journal_archive_directory,
            compressed_cache_limit=cfg.compressed_journal_cache_limit,
        )
        for w in report.warnings:
            log.warning("transaction log: %s", w)
        log.info("transaction log %s: %d records in %d segments recovered in %.2fs "
                 "(%d segments from summaries, %.1f MB scanned)",
                 cfg.journal_directory, report.records, report.segments, report.seconds,
                 report.summarised_segments, report.scanned_bytes / 1e6)
        self._write_summaries()  # what recovery re-verified, in a worker: not before "ready"

    def start_timers(self) -> None:
        self._ack_timer = self.server.loop.call_later(SUBSCRIPTION_ACK_INTERVAL, self._ack_tick)

    def close(self) -> None:
        if self._ack_timer is not None:
            self._ack_timer.cancel()
        if self._probe_timer is not None:
            self._probe_timer.cancel()
        self._stop_syncer()
        journal, self._journal = self._journal, None  # late callbacks see a closed log
        if journal is not None:
            try:
                journal.flush()
                journal.sync()
            except JournalError as exc:
                log.error("transaction log: final flush failed: %s", exc)
            journal.close()

    async def idle(self, timeout: float = 10.0) -> None:
        """Wait (bounded) for the group sync and the segment summaries' writer to finish (an
        operator's reset or snapshot, before it closes or reads the journal's files)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while (self._sync_running or self._summaries_running) and loop.time() < deadline:
            await asyncio.sleep(0.001)

    def sync_now(self) -> None:
        """Make everything written so far durable before returning (a snapshot reads the
        files next): the running group sync is waited for, then one more runs here."""
        failed = self._settle_sync()
        if failed is not None and not self._sync_failed(self.journal, failed):
            return  # the log failed for good
        self.journal.sync()

    def reopen_empty(self, fill: Callable[[str], None] | None = None) -> None:
        """An operator's reset (``reset.reset_all``): close the journal, delete its files and
        open an empty one. The waiting persisted acks and the replay cursors are forgotten
        (their clients were disconnected); the timers keep running. The caller first lets the
        worker's sync and summaries finish. ``fill(directory)``: puts files in the emptied
        directory before the journal is opened from it (a snapshot restore)."""
        self._settle_sync()
        self.journal.close()
        self._journal = None
        d = self.cfg.journal_directory
        if not self.memory:  # (in memory the journal had no files, and a new one is empty)
            remove_journal_files(d, self.cfg.journal_archive_directory)
            if fill is not None:
                fill(d)
        self._persist_fifo.clear()
        self.ack_latency.dropped()
        self.cursors.clear()
        self.failed = None
        self._written_unsynced = False
        self.open()

    # -- recording ---------------------------------------------------------------------
    def recorded(self, topic: str) -> bool:
        hit = self._recorded.get(topic)
        if hit is None:
            if len(self._recorded) > 100_000:
                self._recorded.clear()
            name, mt = split_topic(topic)
            hit = self.cfg.records(name, mt)
            if not hit:  # a logical topic is recorded when its container's Name is
                find = getattr(self.server.config, "pattern_topic", None)
                container = find(name) if find is not None else None
                hit = container is not None and container.message_type == mt \
                    and self.cfg.records(container.name, mt)
            self._recorded[topic] = hit
        return hit

    def append(self, topic: str, body: bytes, kind: int = RecordKind.PUBLISH, *,
               client_name: str = "", client_seq: int | None = None,
               correlation_id: str | None = None, sow_key: str | None = None,
               expiration: int | None = None, headers: dict[str, str] | None = None) -> Any:
        journal = self.journal
        try:
            rec = journal.append(
                topic=display_name(topic), client_name=client_name, body=body, kind=kind,
                client_seq=client_seq, correlation_id=correlation_id, sow_key=sow_key,
                expiration=expiration, message_type=type_of(topic), headers=headers or None,
            )
        except JournalError as exc:  # closed for good (e.g. a strict-mode fsync failed)
            self._fail(exc)
            raise CommandError(reasons.TX_STORE_FAILURE, str(exc)) from None
        if journal.write_failures:  # a roll (or, in strict mode, this very write) was refused
            for f in self._write_failed():
                if f.first <= rec.position <= f.last:
                    raise CommandError(reasons.TX_STORE_FAILURE, str(f.error))
        self._mark_turn()
        return rec

    def append_publishes(self, topic: str, client_name: str, bodies: list[bytes],
                         client_seqs: list[int] | None) -> list[Any] | None:
        """``append`` for a run of plain publishes of one client to one recorded topic
        (``Journal.append_publishes``); None, with nothing appended, when the log cannot
        take a run now: it refuses writes, a write failure is not yet taken, or every record
        is synced on its own (strict durability). Then each goes through ``append``, which
        reports the failure as it does for one publish."""
        journal = self.journal
        if self.failed is not None or journal.write_failures \
                or journal.durability is Durability.STRICT:
            return None
        try:
            recs = journal.append_publishes(display_name(topic), type_of(topic), client_name,
                                            bodies, client_seqs)
        except JournalError:  # closed for good: one by one, each fails as a single publish does
            return None
        except DuplicatePublish:  # one by one: each is dropped and acked as a republished one
            return None
        # (a roll within the run may have failed to write what came before, the run's first
        # records included: the failures are taken at the end of the turn or by the next
        # publish, once the run's persisted acks wait in the FIFO to be failed)
        self._mark_turn()
        return recs

    def wait_persisted_run(self, client: Client, seqs: list[int], recs: list[Any] | None) -> None:
        """``wait_persisted`` for each of a run's publishes: ``seqs`` their sequence numbers,
        ``recs`` their records (None: not recorded: each waits for everything appended so
        far). One entry each, so a write that fails fails each of them (the client's
        failed-write handler hears of every one; :mod:`.persist_runs`)."""
        journal = self.journal
        last = journal.last_position if recs is None else recs[-1].position
        fifo = self._persist_fifo
        if not fifo and (last <= self._safe(journal.durable_position) or self._fatal) \
                and not self.holding_acks:
            client.note_persisted(seqs[-1])  # (the conflated ack covers every one)
            self.ack_latency.at_once(len(seqs))
            return
        fifo.append(run_entry(client, seqs, recs, last))
        self.ack_latency.waiting(last, len(seqs))
        self.server.turn.request()

    def append_command(self, client: Client, cmd: Command, kind: int,
                       headers: dict[str, str] | None = None) -> Any:
        """Journal a client command as it arrived (its options ride along in ``o``)."""
        if cmd.options:
            headers = {**(headers or {}), "o": cmd.options}
        return self.append(cmd.topic or "", cmd.body, kind, client_name=client.client_name or "",
                           client_seq=cmd.seq, correlation_id=cmd.correlation_id,
                           sow_key=cmd.sow_key, expiration=cmd.expiration, headers=headers)

    def wait_persisted(self, client: Client, seq: Any, position: int | None = None,
                       reason: str | None = None) -> None:
        """Ack ``seq`` (a publish's sequence number, or a ``flush`` command) as persisted once
        everything appended so far (or ``position``) is durable; with ``reason``, a failure ack
        instead, in the same order."""
        journal = self.journal
        pos = journal.last_position if position is None else position
        fifo = self._persist_fifo
        if not fifo and (pos <= self._safe(journal.durable_position) or self._fatal) \
                and not self.holding_acks:
            acks_persisted(client, seq, reason)
            self.ack_latency.at_once(1)
            return
        fifo.append((pos, client, seq, reason))
        self.ack_latency.waiting(pos, 1)
        self.server.turn.request()  # _mark_turn()

    def refuse(self, client: Client, cmd: Command, seq: int | None) -> None:
        """A publish to a recorded topic while the log cannot be written: its persisted ack
        (with ``s``: after the acks of everything before it) is a failure with ``self.failed``,
        else its first requested ack is. Counted, not logged one by one."""
        self._refused += 1
        acks_refused(client, cmd, seq, self.failed or reasons.TX_STORE_FAILURE, self)

    def flush_persisted(self, client: Client, cmd: Any) -> None:
        """``flush`` with ``a=persisted``: its ack goes once everything journalled so far
        (every earlier command of ``conn`` included) is durable, after the persisted acks of
        the publishes before it; a failure while the log refuses writes."""
        self.wait_persisted(client, cmd, reason=self.failed)

    def _mark_turn(self) -> None:
        self.server.turn.request()

    # -- end of turn ---------------------------------------------------------------------
    def end_turn(self) -> None:
        """Write this turn's records, release what is durable, start the next group sync.
        Past :data:`WRITE_SLICE` bytes the rest is written at the end of later turns, one
        slice a turn: a 32 MiB publish's record is not one long hold of the event loop (the
        records count as written once all of them are)."""
        journal = self.journal
        try:
            if not journal.flush(WRITE_SLICE):
                turn = self.server.turn
                turn.after(turn.request)  # the rest after the others' next commands
        except (OSError, JournalError) as exc:
            self._fail(exc)
            return
        if journal.write_failures:
            self._write_failed()
        if journal.durability.value == "group":
            if self._job is not None:
                self._sync_progress(journal)
            if journal.written_position > journal.durable_position:
                self._start_sync()
        self._release(journal.durable_position)
        self._pump_live(journal.last_position)
        self._write_summaries()

    def _start_sync(self) -> None:
        if self._sync_running:
            self._written_unsynced = True
            return
        journal = self.journal
        self._written_unsynced = False
        if self._compiled_sync(journal):
            assert isinstance(journal, FileJournal)
            job = journal.begin_sync()
            if job is None:  # closed
                return
            if not job.fds:
                journal.end_sync(job, None)
                return
            self._sync_running = True
            self._job = job
            self._syncer.start(job.fds, job.dir_fd, job.target)
            return
        self._sync_running = True
        fut = self.server.loop.run_in_executor(None, self._sync_until_caught_up, journal)
        fut.add_done_callback(self._synced)

    def _compiled_sync(self, journal: FileJournal | MemoryJournal) -> bool:
        """Whether the compiled sync thread runs this sync: the extension has it, and the
        journal's files are the plain ones (a test's fault-injecting ``file_ops`` must see
        every call, so then the worker thread runs it through them)."""
        if _Syncer is None or not isinstance(journal, FileJournal) \
                or type(journal.file_ops) is not FileOps:
            return False
        if self._syncer is None:
            r, w = os.pipe()
            os.set_blocking(r, False)
            os.set_blocking(w, False)
            self._wake = (r, w)
            self._syncer = _Syncer(w)
            self.server.loop.add_reader(r, self._sync_woke)
        return True

    def _sync_woke(self) -> None:
        """The compiled sync thread finished a sync (its wake-up pipe is readable)."""
        if self._wake is not None:
            try:
                os.read(self._wake[0], 4096)
            except BlockingIOError:
                pass
        journal = self._journal
        if journal is not None:
            self._between_turns(self._sync_progress, journal)

    def _between_turns(self, step: Callable[[Any], None], arg: Any) -> None:
        """``step(arg)``: the loop heard between turns that a sync ended (or a sync
        destination acknowledged). What releasing the persisted acks queues goes out at once
        to each connection that had nothing queued before it: it needs none of the end of the
        turn, which can be a whole pass of another connection's frames away. A connection
        with output queued this turn keeps the acks behind it, at the end of the turn."""
        answered: dict[Client, bool] = {}
        self._answered = answered
        try:
            step(arg)
        finally:
            self._answered = None
        for conn, quiet in answered.items():
            if quiet and not conn.closed:
                conn.flush_output()

    def _sync_progress(self, journal: FileJournal | MemoryJournal) -> None:
        """Take what the compiled sync thread made durable so far (release its persisted
        acks), hand it what the loop wrote since, and finish the sync when it has ended."""
        job = self._job
        if job is None or not isinstance(journal, FileJournal):
            return
        syncer = self._syncer
        done = syncer.result()
        if done is None:
            synced = syncer.synced()
            if synced > journal.durable_position:
                journal.note_synced(synced)
                self._release(journal.durable_position)
                self.server.turn.request()
            more = journal.extend_sync(job)
            if more is not None and syncer.extend(more):
                job.target = more
            return
        self._sync_ended(self._end_job(journal, job, done))

    def _end_job(self, journal: FileJournal, job: SyncJob,
                 done: tuple[int, int]) -> Exception | None:
        """Finish the compiled thread's ended sync: ``done`` is its (errno or 0, position it
        made durable); what failed, if anything (``JournalSyncError``: the fdatasync; else
        closing a retired file, which the worker's sync would have raised alike)."""
        self._job = None
        err, synced = done
        journal.note_synced(synced)
        try:
            journal.end_sync(job, OSError(err, os.strerror(err)) if err else None)
        except Exception as exc:  # (handled as the worker's exception is, in _sync_ended)
            return exc
        return None

    def _settle_sync(self) -> Exception | None:
        """Wait for the compiled sync thread's running sync to end and finish it (before the
        journal is closed or synced here: the job holds the journal's sync lock). Returns
        what failed, if anything (logged)."""
        job, journal = self._job, self._journal
        if job is None or not isinstance(journal, FileJournal):
            return None
        failed = self._end_job(journal, job, self._syncer.wait())
        if failed is not None:
            log.error("transaction log: %s", failed)
        self._sync_running = False
        return failed

    def _stop_syncer(self) -> None:
        self._settle_sync()
        if self._syncer is not None:
            self._syncer.close()
            self._syncer = None
        if self._wake is not None:
            r, w = self._wake
            self._wake = None
            self.server.loop.remove_reader(r)
            os.close(r)
            os.close(w)

    def _sync_until_caught_up(self, journal: FileJournal | MemoryJournal) -> int:
        """In the worker: sync, and while the loop wrote more meanwhile, sync again at once,
        each time handing the loop what became durable (its persisted acks go out as each
        sync ends, not after a round trip through the loop to start the next)."""
        loop = self.server.loop
        while True:
            durable = journal.sync()
            if journal.written_position <= durable:
                return durable
            loop.call_soon_threadsafe(self._durable_meanwhile, journal)

    def _durable_meanwhile(self, journal: FileJournal | MemoryJournal) -> None:
        if self._journal is journal:
            self._between_turns(self._release_durable, journal)

    def _release_durable(self, journal: FileJournal | MemoryJournal) -> None:
        self._release(journal.durable_position)
        self.server.turn.request()

    def _synced(self, fut: Any) -> None:
        if fut.cancelled():
            self._sync_running = False
            return
        self._between_turns(self._sync_ended, fut.exception())

    def _sync_ended(self, exc: BaseException | None) -> None:
        """A group sync (worker or compiled thread) ended, with ``exc`` when it failed."""
        self._sync_running = False
        journal = self._journal
        if journal is None:
            return
        if exc is not None and not self._sync_failed(journal, exc):
            return
        self._release(journal.durable_position)
        if self._written_unsynced or journal.written_position > journal.durable_position:
            self._start_sync()
        self._write_summaries()
        self.server.turn.request()

    def _sync_failed(self, journal: FileJournal | MemoryJournal, exc: BaseException) -> bool:
        """A group sync failed: after a failed fdatasync (``JournalSyncError``) cut what it
        left unknown and fail those publishes' persisted acks (True: the log goes on,
        refusing until a write goes through again); anything else fails the log for good."""
        if isinstance(exc, JournalSyncError):
            try:
                journal.discard_unsynced(exc.error)
            except JournalError as fatal:
                self._fail(fatal)
                return False
            self._write_failed()
            return True
        self._fail(exc)
        return False

    def _write_summaries(self) -> None:
        """Write the journal's durable segment summaries in a worker (one at a time)."""
        journal = self._journal
        if self._summaries_running or journal is None or not journal.summaries_due:
            return
        self._summaries_running = True
        fut = self.server.loop.run_in_executor(None, journal.write_summaries)
        fut.add_done_callback(self._summaries_written)

    def _summaries_written(self, fut: Any) -> None:
        self._summaries_running = False
        if fut.cancelled() or self._journal is None:
            return
        if fut.exception() is not None:  # write_summaries logs I/O errors itself
            log.warning("transaction log: writing segment summaries failed: %s", fut.exception())
            return
        self._write_summaries()  # one may have become due meanwhile

    def release_gated(self) -> None:
        """A sync replication destination acknowledged more (or was downgraded): send the
        persisted acks and ``fully_durable`` deliveries that are due now (the acks at once,
        as when a sync ends between turns)."""
        if self.is_open:
            self._between_turns(self._release, self.journal.durable_position)

    def release_held(self) -> None:
        """Stop withholding persisted acks: send those that are due now."""
        self.holding_acks = False
        if self.is_open:
            self._release(self.journal.durable_position)
        self.server.turn.request()

    def _release(self, durable: int) -> None:
        fifo = self._persist_fifo
        safe = self._safe(durable)
        answered = self._answered
        while fifo and not self.holding_acks and (fifo[0][0] <= safe or split_front(fifo, safe)):
            _, conn, item, reason = fifo.popleft()
            if answered is not None and conn not in answered:
                answered[conn] = conn.quiet()
            ack_entry(conn, item, reason)
        if not self.holding_acks:
            self.ack_latency.released(safe)
        for cursor in list(self.cursors):
            if not cursor.live:
                cursor.pump(safe if cursor.fully_durable else durable)

    def _pump_live(self, last: int) -> None:
        for cursor in list(self.cursors):
            if cursor.live:
                cursor.pump(last)

    def _fail(self, exc: BaseException) -> None:
        """The journal is closed for good: every waiting persisted ack and every later publish
        to a recorded topic fails."""
        if not self._fatal:
            log.error("transaction log write failed: %s; persisted acks will report failure", exc)
        self._fatal = True
        self.failed = reasons.TX_STORE_FAILURE
        fifo = self._persist_fifo
        while fifo:
            _, conn, item, _reason = fifo.popleft()
            ack_entry(conn, item, self.failed)
        self.ack_latency.dropped()

    def _write_failed(self) -> list[Any]:
        """Take the journal's refused writes: fail the persisted acks of their publishes (in
        FIFO order, see the module docstring), start refusing and probing. Returns them."""
        failures = self.journal.take_write_failures()
        fifo = self._persist_fifo
        reason = reasons.TX_STORE_FAILURE
        for f in failures:
            self._refused += f.last - f.first + 1
            expand_failed(fifo, f.first)
            for i in range(len(fifo) - 1, -1, -1):
                pos, conn, seq, why = fifo[i]
                if pos < f.first:
                    break
                if pos <= f.last and why is None:
                    fifo[i] = (pos, conn, seq, reason)
        if self.failed is None and failures:
            self.failed = reason
            log.error("transaction log %s: write refused (%s); publishes to recorded topics fail "
                      "with '%s' until it takes writes again (retrying every %.0f s)",
                      self.cfg.journal_directory, failures[0].error, reason, PROBE_INTERVAL)
            self._probe_timer = self.server.loop.call_later(PROBE_INTERVAL, self._probe)
        self.server.turn.request()
        return failures

    def _probe(self) -> None:
        """While refusing: write a CHECKPOINT record; once one is written, take publishes again."""
        self._probe_timer = None
        journal = self._journal
        if journal is None or self._fatal or self.failed is None:
            return
        try:
            journal.append_checkpoint()
            journal.flush()
        except JournalError as exc:
            self._fail(exc)
            return
        if journal.write_failures:  # (other records of this turn may be in it: fail them too)
            self._write_failed()
            self._probe_timer = self.server.loop.call_later(PROBE_INTERVAL, self._probe)
        else:
            log.warning("transaction log %s: takes writes again; %d publishes and records failed "
                        "with '%s' meanwhile", self.cfg.journal_directory, self._refused, self.failed)
            self.failed = None
            self._refused = 0
        self.server.turn.request()  # sync what the probe wrote, release what it covers

    # -- periodic persisted acks for bookmark subscriptions --------------------------------
    def _ack_tick(self) -> None:
        safe = self.safe_position  # a bookmark's ``bm`` ack: persisted here and on every sync destination
        for cursor in list(self.cursors):
            cursor.persisted(safe)
        self._ticks += 1
        if self._ticks % RETENTION_EVERY == 0 and (self.cfg.retention_size or self.cfg.retention_age):
            self.enforce_retention()
        self._ack_timer = self.server.loop.call_later(SUBSCRIPTION_ACK_INTERVAL, self._ack_tick)

    def enforce_retention(self) -> Any:
        """Remove the oldest segments beyond RetentionSize/RetentionAge, never one that a live
        replay, a queue's unacknowledged messages or a SOW topic's recovery still needs."""
        result = self.journal.enforce_retention(self.server.journal_pins())
        if result.removed:
            log.info("transaction log retention removed %s (%d records, %d bytes)",
                     ", ".join(result.removed), result.records_removed, result.bytes_removed)
        return result

