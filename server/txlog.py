"""The server's transaction log: recording publishes, durability turns and persisted acks.

Owns the :class:`journal.FileJournal` of the config's ``TransactionLog`` and decides *when*
things may be said to clients:

* A publish to a recorded topic is appended (getting its bookmark) while its command is
  handled; at the end of the event-loop turn the journal is written (one ``write``) and, in
  ``group`` durability, fsynced in a worker thread. Only when that sync returns do persisted
  acks for those publishes go out (``durable_position``), and only then do bookmark
  subscriptions without the ``live`` option see the messages. ``strict`` syncs on append and
  ``memory`` never syncs; in both, ``durable_position`` is the last appended position, and in
  ``memory`` a persisted ack promises nothing across a crash (the journal module says so).
* Persisted acks are cumulative per connection, so they are released strictly in the order
  the publishes arrived: one FIFO of ``(position, connection, seq)`` across the server, popped
  as the durable position advances. A republished duplicate, or a publish to a topic that is
  not recorded, waits behind everything already appended, so no ack ever claims more than
  what happened.
* Bookmark subscriptions are journal cursors (:mod:`server.replay`), pumped after each turn.
* The journal's segment summaries (what makes start-up after a crash fast, see
  :mod:`journal.summary`) are written in a worker after the sync that made them durable, never
  inside it, so persisted acks do not wait for them.
"""

from __future__ import annotations

import collections
import logging
from typing import TYPE_CHECKING, Any

from amps_emulator.journal import FileJournal, JournalError, MemoryJournal, RecordKind
from amps_emulator.protocol import reasons
from amps_emulator.server import replay

if TYPE_CHECKING:
    from amps_emulator.protocol.command import Command
    from amps_emulator.server.app import Server
    from amps_emulator.server.connection import Connection
    from amps_emulator.server.replay import Cursor

log = logging.getLogger("amps_emulator.txlog")

SUBSCRIPTION_ACK_INTERVAL = 1.0  # seconds between persisted acks for bookmark subscriptions
RETENTION_EVERY = 5  # run retention every this many ack ticks (when configured)


class TxLog:
    def __init__(self, server: "Server", cfg: Any) -> None:
        self.server = server
        self.cfg = cfg
        self.journal: FileJournal | MemoryJournal = None  # type: ignore[assignment]
        self._recorded: dict[str, bool] = {}
        self._persist_fifo: collections.deque[tuple[int, "Connection", int]] = collections.deque()
        self._sync_running = False
        self._written_unsynced = False
        self._summaries_running = False
        self.cursors: set["Cursor"] = set()
        self._ack_timer: Any = None
        self._ticks = 0
        self.failed: str | None = None  # AMPS reason once the journal cannot be written

    # -- lifecycle ---------------------------------------------------------------------
    def open(self) -> None:
        cfg = self.cfg
        if self.server.memory:  # --memory: no files; Durability is memory whatever the config says
            self.journal = MemoryJournal(segment_size=cfg.journal_size,
                                         retention_bytes=cfg.retention_size,
                                         retention_age=cfg.retention_age)
            log.info("transaction log in memory (--memory): nothing is written to %s",
                     cfg.journal_directory)
            return
        self.journal, report = FileJournal.open(
            cfg.journal_directory,
            segment_size=cfg.journal_size,
            durability=cfg.durability,
            retention_bytes=cfg.retention_size,
            retention_age=cfg.retention_age,
            keep_readable_on_corruption=self.server.keep_readable_journal,
            defer_summaries=True,
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
        journal, self.journal = self.journal, None  # late callbacks see a closed log
        if journal is not None:
            try:
                journal.flush()
                journal.sync()
            except JournalError as exc:
                log.error("transaction log: final flush failed: %s", exc)
            journal.close()

    # -- recording ---------------------------------------------------------------------
    def recorded(self, topic: str) -> bool:
        hit = self._recorded.get(topic)
        if hit is None:
            if len(self._recorded) > 100_000:
                self._recorded.clear()
            hit = self._recorded[topic] = self.cfg.records(topic, "json")
        return hit

    def append(self, topic: str, body: bytes, kind: int = RecordKind.PUBLISH, *,
               client_name: str = "", client_seq: int | None = None,
               correlation_id: str | None = None, sow_key: str | None = None,
               expiration: int | None = None, headers: dict[str, str] | None = None) -> Any:
        rec = self.journal.append(
            topic=topic, client_name=client_name, body=body, kind=kind, client_seq=client_seq,
            correlation_id=correlation_id, sow_key=sow_key, expiration=expiration,
            message_type="json", headers=headers or None,
        )
        self._mark_turn()
        return rec

    def append_command(self, conn: "Connection", cmd: "Command", kind: int,
                       headers: dict[str, str] | None = None) -> Any:
        """Journal a client command as it arrived (its options ride along in ``o``)."""
        if cmd.options:
            headers = {**(headers or {}), "o": cmd.options}
        return self.append(cmd.topic or "", cmd.body, kind, client_name=conn.client_name or "",
                           client_seq=cmd.seq, correlation_id=cmd.correlation_id,
                           sow_key=cmd.sow_key, expiration=cmd.expiration, headers=headers)

    def wait_persisted(self, conn: "Connection", seq: int, position: int | None = None) -> None:
        """Ack ``seq`` as persisted once everything appended so far (or ``position``) is durable."""
        pos = self.journal.last_position if position is None else position
        fifo = self._persist_fifo
        if not fifo and pos <= self.journal.durable_position:
            conn.note_persisted(seq)
            return
        fifo.append((pos, conn, seq))
        self.server.request_turn_end()  # _mark_turn()

    def _mark_turn(self) -> None:
        self.server.request_turn_end()

    # -- end of turn ---------------------------------------------------------------------
    def end_turn(self) -> None:
        """Write this turn's records, release what is durable, start the next group sync."""
        journal = self.journal
        try:
            journal.flush()
        except (OSError, JournalError) as exc:
            self._fail(exc)
            return
        if journal.durability.value == "group":
            if journal.written_position > journal.durable_position:
                self._start_sync()
        self._release(journal.durable_position)
        self._pump_live(journal.last_position)
        self._write_summaries()

    def _start_sync(self) -> None:
        if self._sync_running:
            self._written_unsynced = True
            return
        self._sync_running = True
        self._written_unsynced = False
        fut = self.server.loop.run_in_executor(None, self.journal.sync)
        fut.add_done_callback(self._synced)

    def _synced(self, fut: Any) -> None:
        self._sync_running = False
        if fut.cancelled() or self.journal is None:
            return
        exc = fut.exception()
        if exc is not None:
            self._fail(exc)
            return
        self._release(self.journal.durable_position)
        if self._written_unsynced or self.journal.written_position > self.journal.durable_position:
            self._start_sync()
        self._write_summaries()
        self.server.request_turn_end()

    def _write_summaries(self) -> None:
        """Write the journal's durable segment summaries in a worker (one at a time)."""
        if self._summaries_running or self.journal is None or not self.journal.summaries_due:
            return
        self._summaries_running = True
        fut = self.server.loop.run_in_executor(None, self.journal.write_summaries)
        fut.add_done_callback(self._summaries_written)

    def _summaries_written(self, fut: Any) -> None:
        self._summaries_running = False
        if fut.cancelled() or self.journal is None:
            return
        if fut.exception() is not None:  # write_summaries logs I/O errors itself
            log.warning("transaction log: writing segment summaries failed: %s", fut.exception())
            return
        self._write_summaries()  # one may have become due meanwhile

    def _release(self, durable: int) -> None:
        fifo = self._persist_fifo
        while fifo and fifo[0][0] <= durable:
            _, conn, seq = fifo.popleft()
            conn.note_persisted(seq)
        for cursor in list(self.cursors):
            if not cursor.live:
                replay.pump(self.server, cursor, durable)

    def _pump_live(self, last: int) -> None:
        for cursor in list(self.cursors):
            if cursor.live:
                replay.pump(self.server, cursor, last)

    def _fail(self, exc: BaseException) -> None:
        if self.failed is None:
            log.error("transaction log write failed: %s; persisted acks will report failure", exc)
        self.failed = reasons.TX_STORE_FAILURE
        fifo = self._persist_fifo
        while fifo:
            _, conn, seq = fifo.popleft()
            conn.persisted_failure(seq, self.failed)

    # -- periodic persisted acks for bookmark subscriptions --------------------------------
    def _ack_tick(self) -> None:
        durable = self.journal.durable_position
        for cursor in list(self.cursors):
            replay.send_persisted_ack(cursor, durable)
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
