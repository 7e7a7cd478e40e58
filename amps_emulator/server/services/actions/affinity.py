"""``amps-action-on-message-affinity``: each record of a SOW topic affinitized to one processor.

One trigger watches two topics of its ``MessageType``:

* the ``ControlTopic``: every connection with a subscription to it is a *processor* (it stops
  being one when its last such subscription goes, or it disconnects);
* the ``DataTopic``, a SOW topic, view or conflated topic (its records are told apart by SOW
  key, or grouping for a view): each record matching ``DataFilter`` (all without one) is
  assigned to one processor, the one with the fewest records then (ties: the one that became
  a processor first), and the action runs with ``AMPS_AFFINITY_ACTION`` ``assign``.

Once assigned, a record stays with its processor (no rebalancing among running processors)
until it leaves the filter or the topic (``unassign``, reason ``oof``; ``AMPS_DATA`` is the
record as it left), or its processor goes (``unassign``, reason ``unsubscribe``, then
``assign`` to another processor, reason ``unsubscribe``, if one is left). Records that arrive
while there is no processor wait: the first processor to come gets them all, reason
``subscribe``; a record newly in the topic or the filter is assigned with reason ``publish``.
Each run also has ``AMPS_CLIENT_NAME`` (the processor), ``AMPS_TOPIC`` and ``AMPS_SOW_KEY``.

Work that grows with the topic (assigning every waiting record when the first processor
comes, handing a departed processor's records over) is done in slices of the event loop's
time (:data:`server.core.turn.SLICE_SECONDS`), so a topic of 100,000 records holds the loop
no longer than any other long operation; what happens to a record meanwhile (an update, a
delete) is applied at once and the slices skip what is no longer theirs to do. As in AMPS,
each instance keeps its own affinities; nothing is replicated.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

from amps_emulator.protocol.topics import display_name, qualify
from amps_emulator.server.core.turn import SLICE_SECONDS
from amps_emulator.server.services.actions.steps import step_filter
from amps_emulator.server.services.actions.variables import Vars

if TYPE_CHECKING:
    from amps_emulator.config.model import Action, ActionStep
    from amps_emulator.server.core.ports import Client
    from amps_emulator.server.messaging.broker import Broker
    from amps_emulator.sow import Topic

log = logging.getLogger("amps_emulator.actions")

ON_AFFINITY = "amps-action-on-message-affinity"
#: what a slice of work yields between two records
_Job = Generator[None, None, None]


class _Entry:
    __slots__ = ("client", "data")

    def __init__(self, client: Client, data: bytes) -> None:
        self.client = client  # the processor (one that went: being handed over)
        self.data = data  # the record as last seen


class Affinity:
    """One ``on-message-affinity`` trigger and the affinities it keeps."""

    def __init__(self, step: ActionStep, action: Action, broker: Broker,
                 run: Callable[[Action, Vars], bool]) -> None:
        self.action = action
        self.broker = broker
        self._run = run
        mt = step.option("MessageType") or "json"
        self.control = qualify(step.option("ControlTopic") or "", mt)
        self.data = qualify(step.option("DataTopic") or "", mt)
        self.filter = step_filter(step, "DataFilter")
        self.where = f"{step.file}:{step.line}"
        #: processor -> the SOW keys assigned to it (in the order they became processors)
        self.processors: dict[Client, set[str]] = {}
        self.entries: dict[str, _Entry] = {}
        self.jobs: deque[_Job] = deque()
        self.active = False  # the data topic is one (start-up checks it)
        self._scanning = False
        self._scheduled = False

    # -- start-up -------------------------------------------------------------------------
    def start(self) -> None:
        broker = self.broker
        queues = broker.queue_service
        name = display_name(self.data)
        if queues is not None and queues.get(self.data) is not None:
            log.warning("%s: %s: %r is a queue, whose every message is distinct: affinity needs "
                        "SOW keys (a Topic, View or ConflatedTopic; the queue's underlying topic "
                        "may be one); this action never runs", self.where, ON_AFFINITY, name)
        elif self._topic() is None:
            log.warning("%s: %s: %r is not a SOW topic, view or conflated topic: nothing to "
                        "affinitize; this action never runs", self.where, ON_AFFINITY, name)
        else:
            self.active = True

    def _topic(self) -> Topic | None:
        sow = self.broker.sow_service
        return sow.get(self.data) if sow is not None else None

    # -- the processors -------------------------------------------------------------------
    def subscriptions_changed(self, client: Client) -> None:
        """``client``'s subscriptions changed: it may have become a processor, or stopped."""
        if not self.active:
            return
        control = self.control
        subscribed = any(sub.topic == control for sub in client.subs.values())
        if subscribed and client not in self.processors:
            self.processors[client] = set()
            if len(self.processors) == 1 and not self._scanning:
                self._add_job(self._assign_waiting())
        elif not subscribed:
            self.gone(client)

    def gone(self, client: Client) -> None:
        """``client`` is no processor any more: its records go to the others."""
        keys = self.processors.pop(client, None)
        if keys:
            self._add_job(self._hand_over(client, list(keys)))

    # -- the data topic -------------------------------------------------------------------
    def updated(self, sow_key: str, data: bytes, doc: Any) -> None:
        """A publish (or a view's recomputation) stored ``data`` as the record ``sow_key``."""
        if not self.active:
            return
        entry = self.entries.get(sow_key)
        matches = self.filter is None or bool(self.filter(doc))
        if entry is not None:
            if matches:
                entry.data = data
            else:
                self._unassign(sow_key, "oof", data)
        elif matches and self.processors:
            self._assign(sow_key, data, "publish")

    def removed(self, sow_key: str, data: bytes) -> None:
        """The record left the topic (deleted, expired)."""
        if sow_key in self.entries:
            self._unassign(sow_key, "oof", data)

    # -- assigning --------------------------------------------------------------------------
    def _assign(self, sow_key: str, data: bytes, reason: str) -> None:
        procs = self.processors
        client = min(procs, key=lambda c: len(procs[c]))
        procs[client].add(sow_key)
        self.entries[sow_key] = _Entry(client, data)
        self._tell(client, sow_key, data, "assign", reason)

    def _unassign(self, sow_key: str, reason: str, data: bytes | None = None) -> None:
        entry = self.entries.pop(sow_key)
        keys = self.processors.get(entry.client)
        if keys is not None:
            keys.discard(sow_key)
        self._tell(entry.client, sow_key, entry.data if data is None else data, "unassign", reason)

    def _tell(self, client: Client, sow_key: str, data: bytes, what: str, reason: str) -> None:
        self._run(self.action, {"AMPS_DATA": data, "AMPS_CLIENT_NAME": client.client_name or "",
                                "AMPS_AFFINITY_ACTION": what, "AMPS_AFFINITY_REASON": reason,
                                "AMPS_TOPIC": display_name(self.data), "AMPS_SOW_KEY": sow_key})

    # -- the long work, in slices ---------------------------------------------------------
    def _assign_waiting(self) -> _Job:
        """The records that waited for a processor (all of them, when the first one came)."""
        topic = self._topic()
        if topic is None:
            return
        self._scanning = True
        try:
            steps = topic.query_steps(self.filter)
            while True:  # the query reads the topic in chunks too
                try:
                    next(steps)
                except StopIteration as stop:
                    records = stop.value.records
                    break
                yield
            for rec in records:
                if not self.processors:
                    return  # they went: the next first one starts over
                key = rec.sow_key
                if key in self.entries:
                    continue
                now = topic.get(key)  # as it is now: gone, or updated out of the filter?
                if now is None or (now.data != rec.data and self.filter is not None
                                   and not self.filter(topic.decode_body(now.data))):
                    continue
                self._assign(key, now.data, "subscribe")
                yield
        finally:
            self._scanning = False

    def _hand_over(self, client: Client, keys: list[str]) -> _Job:
        """The records of a processor that went: unassigned, then assigned to another."""
        topic = self._topic()
        for key in keys:
            entry = self.entries.get(key)
            if entry is None or entry.client is not client:
                continue  # left the topic or the filter meanwhile
            self._unassign(key, "unsubscribe")
            if self.processors and key not in self.entries and topic is not None \
                    and topic.get(key) is not None:
                self._assign(key, entry.data, "unsubscribe")
            yield

    def _add_job(self, job: _Job) -> None:
        self.jobs.append(job)
        self._schedule()

    def _schedule(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            self.broker.loop.call_soon(self._pump)

    def _pump(self) -> None:
        """Run the jobs for a slice of the loop's time; the rest in a later pass."""
        self._scheduled = False
        end = time.monotonic() + SLICE_SECONDS
        jobs = self.jobs
        while jobs:
            try:
                next(jobs[0])
            except StopIteration:
                jobs.popleft()
            except Exception:  # a bug must not stop the others (nor the server)
                log.exception("%s: %s: affinity work failed", self.where, ON_AFFINITY)
                jobs.popleft()
            if time.monotonic() >= end:
                break
        if jobs:
            self._schedule()

    def stop(self) -> None:
        for job in self.jobs:
            job.close()
        self.jobs.clear()


__all__ = ["ON_AFFINITY", "Affinity"]
