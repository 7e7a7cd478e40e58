"""The server's State of the World: topics from the config, recovery, commits and expiry.

* Topics come from the config's ``SOW/Topic`` entries (:func:`spec_from_config`).
* Recovery: each topic remembers (in the same LMDB transaction as its records) the last
  journal position it applied. On start, a topic the transaction log records catches up
  from the journal past that position; a transient topic is rebuilt from the journal.
  A damaged or missing SOW file simply starts empty at position 0 and is rebuilt the same
  way.
* Durability: when every persistent SOW topic is also recorded by the transaction log, the
  journal is what makes an acked publish durable and LMDB commits without fsync; otherwise
  LMDB fsyncs on every (once per turn) commit.
* Expiry: one timer, armed for the earliest deadline; expired records produce OOF
  ``expired`` to subscribers that had them.
* Disk full: before the SOW's LMDB file may grow its blocks are allocated (see
  :mod:`sow.storage.lmdbenv`); when the file system refuses, publishes and deletes to the topics
  stored there are refused up front (:meth:`SowService.refusing`: ``tx store failure``, on the
  persisted ack with ``s`` for a publish store, nothing journalled), the allocation is retried
  every ``PROBE_INTERVAL`` seconds and writes are taken again once it succeeds. One log line
  per change of state, with the count of refused commands.
* Conflated topics of logical topics: a ``ConflatedTopic`` over a container names one
  conflated topic per logical topic (its ``TopicFormat``); each is an in-memory topic of its
  own, created the first time it is named, and the views (``conflated_created``) fill it.
* Logical topics: a ``Topic`` with a ``Pattern`` (or a ``RegexTopic``) is a container. Each
  topic name the pattern matches becomes a SOW topic of its own the first time it is
  published to or named (queries, subscriptions and keys are per logical topic), sharing the
  container's definition and its storage (the container's ``FileName``: one LMDB
  environment). A definition of the exact name takes precedence. On start, logical topics
  found in that storage are reopened, and the transaction log (which records them when it
  records the container's ``Name``) recreates the others.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from amps_emulator.journal import RecordKind
from amps_emulator.protocol import reasons
from amps_emulator.protocol.reasons import CommandError
from amps_emulator.protocol.topics import display_name, qualify, split_topic, type_of
from amps_emulator.server.core.ports import ServiceHost
from amps_emulator.server.core.router import compile_topic_regex, is_regex_topic
from amps_emulator.sow import Sow, SowDamagedError, Topic, TopicSpec
from amps_emulator.sow.recovery import apply_record
from amps_emulator.sow.spec import TRANSIENT, spec_from_config

if TYPE_CHECKING:
    from amps_emulator.server.core.ports import TxLogService
    from amps_emulator.sow import Record


class SowHost(ServiceHost, Protocol):
    """What the SOW service reads of the broker (here, not in ``ports``: it names
    :class:`server.services.txlog.TxLog`)."""

    txlog: TxLogService | None

log = logging.getLogger("amps_emulator.sow")

#: history rows a maintenance pass reads per topic (about 20 ms)
PRUNE_ROWS = 20_000
#: expired records one pass of the expiration sweep removes from a topic (a few ms: 200,000
#: records expiring together are removed over many passes, between the others' commands;
#: reads never return an expired record meanwhile)
SWEEP_LIMIT = 250
PROBE_INTERVAL = 1.0  # seconds between attempts to allocate room on a full file system

_APPLIED_KINDS = (int(RecordKind.PUBLISH), int(RecordKind.DELTA_PUBLISH), int(RecordKind.SOW_DELETE))


class SowService:
    def __init__(self, broker: SowHost, config: Any,
                 derived_specs: Callable[[Any], list[TopicSpec]], *,
                 on_removed: Callable[[str, list[Record], str], None]) -> None:
        """``derived_specs``: the SOW topics the views and conflated topics of ``config``
        need (``views.derived_specs``, passed in by the root so that this module does not
        import the views, which read it). ``on_removed(topic, records, reason)``: records
        expired (``publish.removed``, passed in by the root: the message path tells the
        subscriptions and the listeners)."""
        self.broker = broker
        self.on_removed = on_removed
        self.config = config
        #: containers of logical topics (Topic with a Pattern), in configuration order
        self.patterns = [t for t in config.sow_topics if t.pattern is not None]
        specs = [spec_from_config(t) for t in config.sow_topics if t.pattern is None]
        if broker.memory:  # --memory: no files, so every topic lives in memory
            specs = [dataclasses.replace(s, durability=TRANSIENT) for s in specs]
        self.specs = specs + derived_specs(config)
        txlog_cfg = config.transaction_log
        journal_covers = txlog_cfg is not None and all(
            txlog_cfg.records(s.name, s.message_type)
            for s in [*self.specs, *map(spec_from_config, self.patterns)] if s.persistent)
        self.sync = not journal_covers
        self._not_logical: set[str] = set()  # names known to match no container
        #: told of each conflated topic of a logical topic created (its key, its
        #: ConflatedTopic, the logical topic's key): the views build it
        self.conflated_created: Callable[[str, Any, str], None] | None = None
        self.sow = self._open_sow()
        self._timer: Any = None
        self._timer_at: float | None = None
        self._sweeping = False  # an expiration sweep goes on in the next pass
        self._prune_timer: Any = None
        self._prune_at: dict[str, bytes | None] = {}  # where each topic's next pass starts
        self._full: dict[str, int] = {}  # environment path -> commands refused since full
        self._probe_timer: Any = None
        self._watch()  # full already at open

    def _open_sow(self) -> Sow:
        """Open the configured topics' storage, and the logical topics found in it."""
        self._not_logical.clear()
        self.sow = Sow(self.specs, default_dir=self.config.sow_directory or "./sow",
                       sync=self.sync, clock=self.broker.wallclock, on_damage=self._damaged,
                       on_missing=self._missing, message_types=self.broker.bodies.registry)
        for container in self.patterns:
            if container.durability == "persistent":
                for name in self.sow.stored_topic_names(spec_from_config(container)):
                    self.get(name)
        return self.sow

    def reopen(self) -> None:
        """Open the storage again after :meth:`close` (its files were replaced: a snapshot
        restore), then catch up with the transaction log as at start-up."""
        self._timer = self._timer_at = self._prune_timer = self._probe_timer = None
        self._prune_at.clear()
        self._full.clear()
        self._open_sow()
        self.recover()
        self.start_history_maintenance()
        self._watch()

    # -- damaged or missing files at start-up ------------------------------------------------
    def _rebuildable(self, name: str) -> bool:
        """The transaction log records ``name`` and still holds all of it (nothing retired)."""
        txlog = self.broker.txlog
        return txlog is not None and txlog.recorded(name) and txlog.journal.first_position <= 1

    def _damaged(self, path: str, topics: list[str], why: str) -> None:
        lost = [t for t in topics if not self._rebuildable(t)]
        if lost:
            raise SowDamagedError(
                f"SOW file {path} is damaged ({why}) and the transaction log does not hold all "
                f"of topic(s) {', '.join(lost)}, so they cannot be rebuilt. Restore {path} from a "
                f"backup, or move it aside to start those topics empty.", path)

    def _missing(self, path: str, topics: list[str]) -> None:
        lost = [t for t in topics if not self._rebuildable(t)]
        if not lost:
            log.warning("SOW file %s is missing; rebuilding topic(s) %s from the transaction log",
                        path, ", ".join(topics))
            return
        msg = (f"SOW file {path} is missing: the stored state of topic(s) {', '.join(lost)} is "
               f"lost (the transaction log does not hold all of it)")
        if self.broker.strict_recovery:
            raise SowDamagedError(msg + "; restore the file, or start without --strict-recovery "
                                  "to begin those topics empty", path)
        log.error("%s; those topics start empty (--strict-recovery refuses to start instead)", msg)

    # -- lookup ----------------------------------------------------------------------------
    def get(self, name: str, create: bool = True) -> Topic | None:
        """The SOW topic ``name``; a logical topic of a ``Pattern`` container is created on
        first use (unless ``create`` is false)."""
        topic = self.sow.get(name)
        if topic is None and create and self.patterns and name not in self._not_logical:
            topic = self._logical(name)
        return topic

    def _logical(self, name: str) -> Topic | None:
        plain, mt = split_topic(name)
        conflated = self.config.conflated_logical(plain)
        if conflated is not None and conflated[0].message_type == mt \
                and self.conflated_created is not None:
            cfg, under = conflated
            topic = self.sow.add_topic(TopicSpec(name, message_type=mt, durability=TRANSIENT,
                                                 hash_indexes=cfg.hash_indexes,
                                                 enrichment=cfg.enrichment))
            log.debug("SOW: conflated topic %r of the logical topic %r", name, under)
            self.conflated_created(name, cfg, qualify(under, mt))
            return topic
        container = self.config.pattern_topic(plain)
        if container is not None and container.message_type != mt:
            container = None
        if container is None:
            if len(self._not_logical) > 100_000:
                self._not_logical.clear()
            self._not_logical.add(name)
            return None
        spec = dataclasses.replace(spec_from_config(container), name=name)
        log.debug("SOW: logical topic %r of %r", name, container.name)
        return self.sow.add_topic(spec)

    def topics_for(self, topic: str, literal: bool = False) -> list[Topic]:
        """The SOW topics a query names: the topic itself, or every topic a regex matches
        (``literal``: the ``non_regex_topic`` option, the name only)."""
        exact = self.sow.get(topic)
        if exact is not None:
            return [exact]
        if literal or not is_regex_topic(topic):  # a name: maybe a logical topic not used yet
            logical = self.get(topic)
            return [] if logical is None else [logical]
        plain, mt = split_topic(topic)
        rx = compile_topic_regex(plain)
        return [t for name, t in sorted(self.sow.topics.items())
                if type_of(name) == mt and rx.search(display_name(name))]

    # -- recovery --------------------------------------------------------------------------
    def recover(self) -> None:
        """Catch every topic up with the transaction log (only what it has not applied)."""
        txlog = self.broker.txlog
        if txlog is None:
            return
        journal = txlog.journal
        behind: dict[str, Topic] = {}
        for name, held in self.sow.topics.items():
            if txlog.recorded(name):
                behind[name] = held
        # logical topics the journal records but the SOW storage does not hold yet
        discover = any(txlog.cfg.records(c.name, c.message_type) for c in self.patterns)
        if not behind and not discover:
            return
        start = 1 if discover else min(t.applied_position for t in behind.values()) + 1
        applied = 0
        for rec in journal.read(start):
            topic = behind.get(rec.key)
            if topic is None and discover and rec.kind in _APPLIED_KINDS \
                    and self.sow.get(rec.key) is None:
                topic = self.get(rec.key)
                if topic is not None:
                    behind[rec.key] = topic
            if topic is None or rec.kind not in _APPLIED_KINDS or rec.position <= topic.applied_position:
                continue
            try:
                apply_record(topic, rec)
                applied += 1
            except CommandError as exc:  # a record the SOW refused when it was live, too
                log.debug("recovery: skipping %s at %d: %s", rec.topic, rec.position, exc)
            if applied % 10_000 == 0:
                self.sow.commit()
        self.sow.commit()
        if applied:
            log.info("SOW recovery: applied %d journal records from position %d", applied, start)
        self.sweep()

    # -- history ---------------------------------------------------------------------------
    def start_history_maintenance(self) -> None:
        """Prune what fell out of each ``History`` window now, then periodically (a tenth of
        the shortest window, between 1 s and 60 s)."""
        windows = [s.history.window for s in self.specs
                   if s.history is not None and s.history.window is not None]
        if not windows:
            return
        self.prune_history()
        interval = min(60.0, max(1.0, min(windows) / 10))

        def tick() -> None:
            try:
                self.prune_history()
            except Exception:  # keep the timer alive whatever one pass hit
                log.exception("SOW history maintenance failed")
            self._prune_timer = self.broker.call_later(interval, tick)

        self._prune_timer = self.broker.call_later(interval, tick)

    def prune_history(self) -> int:
        """One pass of window maintenance: at most PRUNE_ROWS history rows per topic, going
        on from where the last pass stopped (round and round)."""
        dropped = 0
        now = self.broker.wallclock()
        for name, topic in self.sow.topics.items():
            if topic.history is not None:
                n, self._prune_at[name] = topic.prune_history(now, self._prune_at.get(name),
                                                              PRUNE_ROWS)
                dropped += n
        if dropped:
            log.debug("SOW history: dropped %d versions older than the window", dropped)
            self.broker.turn.request()
        return dropped

    # -- disk full -------------------------------------------------------------------------
    def refusing(self, topic: str) -> bool:
        """Whether writes to the SOW topic ``topic`` must be refused now (its file system is
        full: see the module docstring); counted, for the log line when it recovers."""
        if not self._full:
            return False
        t = self.get(topic)
        path = self.sow.store_path(t.spec.name) if t is not None else None
        if path is None or path not in self._full:
            return False
        self._full[path] += 1
        return True

    def _watch(self) -> None:
        """Notice environments that became full: log, refuse, start probing."""
        for path, err in self.sow.full_stores().items():
            if path not in self._full:
                self._full[path] = 0
                log.error("SOW %s: the file system refused space (%s); publishes and deletes "
                          "to its topics fail with '%s' until it has room (retrying every "
                          "%.0f s)", path, err, reasons.TX_STORE_FAILURE, PROBE_INTERVAL)
        if self._full and self._probe_timer is None:
            self._probe_timer = self.broker.call_later(PROBE_INTERVAL, self._probe)

    def _probe(self) -> None:
        self._probe_timer = None
        for path in list(self._full):
            if self.sow.retry_full(path):
                log.warning("SOW %s: has room again; %d publishes and deletes failed with "
                            "'%s' meanwhile", path, self._full.pop(path), reasons.TX_STORE_FAILURE)
        self._watch()

    # -- once per turn ---------------------------------------------------------------------
    def commit(self) -> None:
        try:
            self.sow.commit()
        except Exception:  # an LMDB failure must not take the server down
            log.exception("SOW commit failed; this turn's SOW changes are lost")
        self._watch()
        self.arm()

    def arm(self) -> None:
        """Arm the single expiry timer for the earliest deadline (none while a sweep goes on
        in later passes: it arms it when it is done)."""
        if self._sweeping:
            return
        due = self.sow.next_expiration()
        if due is None:
            return
        if self._timer is not None and self._timer_at is not None and self._timer_at <= due:
            return
        if self._timer is not None:
            self._timer.cancel()
        delay = max(0.0, due - self.broker.wallclock())
        self._timer_at = due
        self._timer = self.broker.call_later(delay, self._expire)

    def _expire(self) -> None:
        if self._timer is not None:  # (the next pass of a sweep: a timer armed before it)
            self._timer.cancel()
        self._timer = None
        self._timer_at = None
        self._sweeping = False
        try:
            if self.sweep(SWEEP_LIMIT):  # more are due: the rest in the next passes
                self._sweeping = True
                self.broker.turn.after(self._expire)
        except Exception:  # keep the expiry timer alive whatever one sweep hit
            log.exception("SOW expiration sweep failed")
            self.arm()
        self.broker.turn.request()

    def sweep(self, limit: int | None = None) -> bool:
        """Remove the records whose expiration is due, at most ``limit`` of each topic (None:
        all); whether some were left."""
        more = False
        for topic, records in self.sow.sweep_expired(limit=limit):
            self.on_removed(topic.spec.name, records, reasons.OOF_EXPIRED)
            more = more or (limit is not None and len(records) >= limit)
        if not more:
            self.arm()
        return more

    def close(self) -> None:
        if self._probe_timer is not None:
            self._probe_timer.cancel()
        if self._timer is not None:
            self._timer.cancel()
        if self._prune_timer is not None:
            self._prune_timer.cancel()
        self.sow.commit()
        self.sow.close()
