"""The housekeeping steps of actions: the journal's files (remove, archive, compress),
arbitrary files (remove, compress) and the SOW's files (compact: :mod:`.sow_compaction`).

``do-remove-journal`` removes at once (the journal decides what nothing needs any more). The
others do their file work in worker threads, one file at a time, and hand the engine an
awaitable: the action's later steps run when it is done, so the step order holds and the
event loop is never held by the copies. Each file acted on is said in one INFO line, then a
summary; a refused file in one line. At shutdown such a step may go on until the engine's
settling deadline (:meth:`.engine.Actions.settle`); cancelled then, it still finishes the file
in hand (no half-done copy is left behind) and stops there: the files it did not reach are
left as they were.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from amps_emulator.config.units import parse_count, parse_duration
from amps_emulator.journal import FileJournal
from amps_emulator.journal.housekeeping import StoreMove, perform
from amps_emulator.protocol.topics import qualify
from amps_emulator.server.services.actions import files
from amps_emulator.server.services.actions.host import ActionHost
from amps_emulator.server.services.actions.sow_compaction import compact
from amps_emulator.server.services.actions.variables import Vars, expand_text
from amps_emulator.server.services.log_targets import RotatingFileTarget

if TYPE_CHECKING:
    from amps_emulator.config.model import ActionStep
    from amps_emulator.server.messaging.broker import Broker

log = logging.getLogger("amps_emulator.actions")

_T = TypeVar("_T")


class StepFailed(Exception):
    """A ``Do`` could not do its work: the action ends here."""


async def _in_thread(fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)`` in a worker thread. Cancelled meanwhile (the shutdown's deadline), it
    still waits for that work to end before the cancellation goes on."""
    work = asyncio.ensure_future(asyncio.to_thread(fn, *args))
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:
        await asyncio.wait([work])
        raise


def _age(step: ActionStep, v: Vars) -> float:
    text = expand_text(step.option("Age"), v)
    if not text:
        raise StepFailed("no <Age> (it has no default)")
    try:
        return parse_duration(text)
    except ValueError:
        raise StepFailed(f"<Age> {text!r} is not an interval") from None


def _number(step: ActionStep, v: Vars, name: str) -> int | None:
    text = expand_text(step.option(name), v)
    if not text:
        return None
    try:
        n = parse_count(text)
    except ValueError:
        n = -1
    if n < 0:
        raise StepFailed(f"<{name}> {text!r} is not a number of files")
    return n


class Housekeeping:
    """Housekeeping steps, as methods of the engine (which sets these attributes)."""

    broker: Broker
    host: ActionHost | None

    # -- the journal ----------------------------------------------------------------------
    def do_remove_journal(self, step: ActionStep, v: Vars) -> bool:
        """Remove the journal segments whose records are all older than ``Age`` and that no
        replay, queue or recovery still needs (never the one being written), wherever they
        are (archived, compressed)."""
        age = parse_duration(expand_text(step.option("Age"), v, "0") or "0")
        txlog = self.broker.txlog
        if txlog is None or not txlog.is_open:
            log.info("%s: no transaction log to remove files from", step.module)
            return True
        pins = self.host.journal_pins() if self.host is not None else []
        result = txlog.journal.enforce_retention(pins, age=age)
        log.info("%s: removed %d journal file(s) older than %s (%d records, %d bytes)%s",
                 step.module, len(result.removed), step.option("Age"), result.records_removed,
                 result.bytes_removed,
                 f"; kept from position {result.blocked_by_pin} on: still needed"
                 if result.blocked_by_pin is not None else "")
        return True

    def do_archive_journal(self, step: ActionStep, v: Vars) -> bool | Awaitable[bool]:
        return self._store_journal(step, v, "archive")

    def do_compress_journal(self, step: ActionStep, v: Vars) -> bool | Awaitable[bool]:
        return self._store_journal(step, v, "compress")

    def _store_journal(self, step: ActionStep, v: Vars, what: str) -> bool | Awaitable[bool]:
        """Archive (to ``JournalArchiveDirectory``) or compress the sealed journal segments
        not written for ``Age``; they stay part of the log (``journal.housekeeping``)."""
        age = _age(step, v)
        txlog = self.broker.txlog
        journal = txlog.journal if txlog is not None and txlog.is_open else None
        if not isinstance(journal, FileJournal):
            log.info("%s: no journal files to %s", step.module, what)
            return True
        try:
            moves = journal.plan_store(what, age)
        except (ValueError, OSError) as exc:
            raise StepFailed(str(exc)) from None
        if not moves:
            log.info("%s: no journal file to %s (none sealed and older than %s)", step.module,
                     what, expand_text(step.option("Age"), v))
            return True
        return self._store_moves(step, journal, what, moves)

    async def _store_moves(self, step: ActionStep, journal: FileJournal, what: str,
                           moves: list[StoreMove]) -> bool:
        done = written = before = 0
        waiting = list(moves)  # not finished yet (kept busy by the journal until they are)
        try:
            while waiting:
                move = waiting[0]
                await _in_thread(perform, move)
                waiting.pop(0)
                if journal.finish_store(move):
                    done += 1
                    written += move.written
                    before += move.segment.size
                    log.info("%s: %s %s to %s (%d bytes)", step.module,
                             "archived" if what == "archive" else "compressed", move.src, move.dst,
                             move.written)
                elif move.error is not None:
                    log.warning("%s: cannot %s %s: %s", step.module, what, move.src, move.error)
        finally:
            for move in waiting:  # cancelled: nothing stays marked busy
                move.error = move.error or OSError("cancelled")
                journal.finish_store(move)
        log.info("%s: %s %d of %d journal file(s) (%d bytes in, %d bytes written)", step.module,
                 "archived" if what == "archive" else "compressed", done, len(moves), before,
                 written)
        return True

    # -- the SOW's files --------------------------------------------------------------------
    def do_compact_sow(self, step: ActionStep, v: Vars) -> bool | Awaitable[bool]:
        """Compact the SOW environments holding ``Topic`` (of ``MessageType``; a regex
        matches several), or every one when neither is given. Topics kept in memory
        (transient, or every one under ``--memory``) have nothing to compact."""
        topic = expand_text(step.option("Topic"), v)
        mtype = expand_text(step.option("MessageType"), v)
        if bool(topic) != bool(mtype):
            raise StepFailed("<Topic> and <MessageType> go together (neither: every topic)")
        svc = self.broker.sow_service
        memory = "--memory" if self.broker.memory else "transient"
        names = None
        if topic:
            topics = svc.topics_for(qualify(topic, mtype)) if svc is not None else []
            names = [t.spec.name for t in topics if t.spec.persistent]
            if not names:
                log.info("%s: nothing to compact: %s", step.module,
                         f"the SOW topics matching {topic!r} are kept in memory ({memory})"
                         if topics else f"no SOW topic matches {topic!r} ({mtype})")
                return True
        if svc is None or not svc.sow.stores:
            log.info("%s: nothing to compact: %s", step.module,
                     "the SOW is kept in memory (--memory)" if self.broker.memory
                     else "no SOW topic is persistent")
            return True
        return self._compact_sow(step, svc.sow.stores_of(names))

    async def _compact_sow(self, step: ActionStep, stores: dict[str, Any]) -> bool:
        for path, store in stores.items():
            done = await compact(store.env, self.broker.turn, _in_thread)
            if isinstance(done, str):
                log.warning("%s: SOW file %s not compacted: %s", step.module, path, done)
                continue
            log.info("%s: compacted SOW file %s (topics %s): %d -> %d bytes (%d -> %d in use) "
                     "in %.3f s", step.module, path, ", ".join(sorted(store.topics)),
                     done.file_before, done.file_after, done.used_before, done.used_after,
                     done.seconds)
        return True

    # -- any files --------------------------------------------------------------------------
    def do_remove_files(self, step: ActionStep, v: Vars) -> Awaitable[bool]:
        return self._files(step, v, compressing=False)

    def do_compress_files(self, step: ActionStep, v: Vars) -> Awaitable[bool]:
        return self._files(step, v, compressing=True)

    def _protected_dirs(self) -> list[str]:
        txlog = self.broker.txlog
        if txlog is None:
            return []
        cfg = txlog.cfg
        return [d for d in (cfg.journal_directory, cfg.journal_archive_directory) if d]

    def _files(self, step: ActionStep, v: Vars, *, compressing: bool) -> Awaitable[bool]:
        age = _age(step, v)
        pattern = expand_text(step.option("Pattern"), v)
        if not pattern:
            raise StepFailed("no <Pattern> (it has no default)")
        keep, count = _number(step, v, "Keep"), _number(step, v, "Count")
        logs = {os.path.realpath(h.path) for h in logging.getLogger("amps_emulator").handlers
                if isinstance(h, RotatingFileTarget) and h.path}
        return self._act_on_files(step, pattern, age, keep, count, compressing, logs)

    async def _act_on_files(self, step: ActionStep, pattern: str, age: float, keep: int | None,
                            count: int | None, compressing: bool, logs: set[str]) -> bool:
        now = self.broker.wallclock()
        protected = self._protected_dirs()

        def choose() -> files.Selection:
            return files.select(pattern, age, now, keep=keep, count=count,
                                protected_dirs=protected, busy=files.open_files() | logs,
                                compressing=compressing)

        sel = await asyncio.to_thread(choose)
        for path, why in sel.errors:
            log.error("%s: %s matches %r but is %s: not %s", step.module, path, pattern, why,
                      "compressed" if compressing else "removed")
        for path, why in sel.refused:
            log.info("%s: skipped %s: %s", step.module, path, why)
        done = before = after = 0
        for path in sel.chosen:
            try:
                if compressing:
                    size, packed = await _in_thread(files.compress, path)
                    after += packed
                    log.info("%s: compressed %s (%d -> %d bytes)", step.module, path, size, packed)
                else:
                    size = await _in_thread(files.remove, path)
                    log.info("%s: removed %s (%d bytes)", step.module, path, size)
            except OSError as exc:
                log.warning("%s: cannot %s %s: %s", step.module,
                            "compress" if compressing else "remove", path, exc)
                continue
            done += 1
            before += size
        log.info("%s: %s %d of %d file(s) matching %r (%d bytes%s)", step.module,
                 "compressed" if compressing else "removed", done, sel.matched, pattern, before,
                 f" -> {after}" if compressing else "")
        return True


__all__ = ["Housekeeping", "StepFailed"]
