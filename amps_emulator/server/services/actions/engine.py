"""The actions engine: which configured ``Action`` runs when, and running it.

An action runs its ``If`` and ``Do`` steps in file order with the variables its trigger
gives (:mod:`.variables`); a ``Do`` that fails or an ``If`` that does not hold ends the run.
The triggers (``On``) it serves:

* the message path, as a publish observer (:class:`server.core.ports.PublishObserver`):
  ``on-publish-message`` (``Topic`` regex, ``MessageType``, ``Filter``, ``MessageSource``:
  a record replicated here carries the path it came by, a local publish none; its
  ``Options`` are those of the subscription AMPS makes of it: :mod:`.subscription`),
  ``on-sow-expire-message``, ``on-sow-delete-message``, ``on-oof-message`` (``Type`` match,
  delete, expire or all), and the record watches of ``on-message-condition-timeout`` and
  ``on-alert`` (:mod:`.timers`);
* the server clock: ``on-schedule`` (:mod:`.timers`);
* the server's life: ``on-startup`` (the last step of start-up) and ``on-shutdown`` (the
  first step of shutdown);
* the deliveries (the broker's ``delivered`` watch): ``on-deliver-message`` (``Topic`` regex,
  ``MessageType``), once per message and client it went to, live, conflated, paginated,
  from a queue or replayed from the transaction log;
* clients: ``on-connect-client``, ``on-logon-client``, ``on-disconnect-client``,
  ``on-subscribe`` and ``on-unsubscribe`` (``Topic``, ``MessageType``), and the slow-client
  offlining of a connection: ``on-offline-start`` / ``on-offline-stop``;
* the administrator: ``on-admin`` (``Path`` under ``/amps/administrator/actions/``,
  ``RequiredParameter``; the query's parameters are variables);
* ``on-execute-event`` (run by ``do-execute-event``), ``on-signal`` (``Signal`` USR1 / USR2),
  and any module the rest of the server reports through :meth:`Actions.fire` (the
  replication links' connect, disconnect, resync, downgrade and upgrade events).

* the server's minidumps (an action's, the Admin interface's, SIGQUIT's): ``on-minidump``
  with ``AMPS_MINIDUMP_PATH``;
* a SOW topic's records and the subscribers of a control topic: ``on-message-affinity``
  (:mod:`.affinity`; a view's or conflated topic's records reach it through
  :meth:`Actions.derived_stored` / :meth:`Actions.derived_removed`).

Actions triggered by actions are followed to a fixed depth, so a configuration that
publishes into its own trigger cannot loop forever.

A step whose work goes on off the event loop (a system command, file housekeeping) hands
back an awaitable; the engine holds it in :attr:`Actions.pending` and runs the action's later
steps once it is done (:meth:`Actions._resume`), so the steps keep their order. At shutdown
(:meth:`Actions.settle`) that work, and the steps after it, gets a bounded time to finish.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Iterable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

from amps_emulator.config import ConfigError, ConfigIssue
from amps_emulator.journal.identity import path_of
from amps_emulator.protocol import reasons
from amps_emulator.protocol.bookmarks import format_timestamp
from amps_emulator.protocol.reasons import CommandError
from amps_emulator.protocol.topics import (
    compile_topic_regex,
    display_name,
    is_regex_topic,
    qualify,
    split_topic,
)
from amps_emulator.server.core.message import UNDECODED
from amps_emulator.server.services.actions.affinity import ON_AFFINITY, Affinity
from amps_emulator.server.services.actions.host import ActionHost
from amps_emulator.server.services.actions.steps import Step, StepFailed, Steps, step_filter
from amps_emulator.server.services.actions.subscription import ActionSubscription
from amps_emulator.server.services.actions.system import DEFAULT_TIMEOUT, CommandRunner
from amps_emulator.server.services.actions.timers import ConditionWatch, Schedule
from amps_emulator.server.services.actions.variables import Vars, clock_variables

if TYPE_CHECKING:
    from amps_emulator.config.model import Action, ActionStep
    from amps_emulator.journal.record import JournalRecord
    from amps_emulator.protocol.command import Command
    from amps_emulator.server.core.message import Message
    from amps_emulator.server.core.ports import Client, ProxiedTransferControl, ReplicationControl
    from amps_emulator.server.messaging.broker import Broker
    from amps_emulator.sow import Record

log = logging.getLogger("amps_emulator.actions")

ON_PUBLISH = "amps-action-on-publish-message"
ON_SOW_EXPIRE = "amps-action-on-sow-expire-message"
ON_SOW_DELETE = "amps-action-on-sow-delete-message"
ON_OOF = "amps-action-on-oof-message"
ON_SCHEDULE = "amps-action-on-schedule"
ON_STARTUP = "amps-action-on-startup"
ON_SHUTDOWN = "amps-action-on-shutdown"
ON_ADMIN = "amps-action-on-admin"
ON_CONNECT = "amps-action-on-connect-client"
ON_LOGON = "amps-action-on-logon-client"
ON_DISCONNECT = "amps-action-on-disconnect-client"
ON_SUBSCRIBE = "amps-action-on-subscribe"
ON_UNSUBSCRIBE = "amps-action-on-unsubscribe"
ON_CONDITION_TIMEOUT = "amps-action-on-message-condition-timeout"
ON_ALERT = "amps-action-on-alert"
ON_EXECUTE_EVENT = "amps-action-on-execute-event"
ON_SIGNAL = "amps-action-on-signal"
ON_DELIVER = "amps-action-on-deliver-message"
ON_OFFLINE_START = "amps-action-on-offline-start"
ON_OFFLINE_STOP = "amps-action-on-offline-stop"
ON_MINIDUMP = "amps-action-on-minidump"
#: the signals an ``on-signal`` can name that the server hands to the actions
SIGNALS = ("SIGUSR1", "SIGUSR2")
MAX_DEPTH = 8
#: seconds the shutdown waits for the actions whose steps wait for off-loop work
SETTLE_TIMEOUT = 2 * DEFAULT_TIMEOUT
#: seconds more for a file step to finish the file in hand once stopped
SETTLE_GRACE = 30.0
_OOF_TYPES = {"match", "delete", "expire", "all"}


class _Trigger:
    """One ``On`` of an action, with its topic, type and filter compiled."""

    __slots__ = ("step", "action", "topic", "regex", "message_type", "filter", "source", "sub")

    def __init__(self, step: ActionStep, action: Action, broker: Broker | None = None) -> None:
        self.step = step
        self.action = action
        #: the subscription an on-publish-message is (its Options), None for other triggers
        self.sub = ActionSubscription(step, broker) \
            if step.module == ON_PUBLISH and broker is not None else None
        topic = step.option("Topic")
        self.topic = topic or None
        literal = self.sub is not None and self.sub.literal
        self.regex = compile_topic_regex(topic) if topic and is_regex_topic(topic) \
            and not literal else None
        self.message_type = step.option("MessageType") or None
        self.filter = step_filter(step, "Filter")
        #: ``MessageSource`` of ``on-publish-message``: local, replicated or all (the default)
        self.source = (step.option("MessageSource") or "all").strip().lower()

    def matches_source(self, replicated: bool) -> bool:
        source = self.source
        return source == "all" or (source == "replicated") == replicated

    def matches_topic(self, key: str) -> bool:
        name, mt = split_topic(key)
        if self.message_type is not None and mt != self.message_type:
            return False
        if self.topic is None:
            return True
        return name == self.topic if self.regex is None else self.regex.search(name) is not None

    def matches_doc(self, doc: Any) -> bool:
        return self.filter is None or bool(self.filter(doc))


class Actions(Steps):
    def __init__(self, instance_name: str, configured: Iterable[Action], broker: Broker,
                 host: ActionHost | None = None) -> None:
        self.instance_name = instance_name
        self.broker = broker
        self.host = host
        self.counters = {}
        self.replication_control: ReplicationControl | None = None
        self.proxied_transfer: ProxiedTransferControl | None = None
        self._steps: dict[str, Step] = self.step_table()
        self.triggers: dict[str, list[_Trigger]] = {}
        self.schedules: list[Schedule] = []
        self.watches: list[ConditionWatch] = []
        self.affinities: list[Affinity] = []
        self._depth = 0
        #: the runs waiting for a step's off-loop work (a system command, file housekeeping),
        #: by its future (:meth:`_resume`)
        self.pending: set[asyncio.Future[bool]] = set()
        self.commands = CommandRunner()
        self._dumping = False  # running the on-minidump actions
        #: False: the actions are checked but never run (a dry start-up, ``--verify-config``)
        self.enabled = True
        self.started = False
        self.stopped = False
        for action in configured:
            for on in action.on:
                try:
                    self._add_trigger(on, action)
                except ValueError as exc:  # an Every or Duration that is a variable
                    raise ConfigError([ConfigIssue(on.file, on.line, f"{on.module}: {exc}")]) from None
            for step in action.steps:
                if step.module not in self._steps:
                    log.info("%s:%d: %s is not run by the emulator: that step does nothing",
                             step.file, step.line, step.module)

    def _add_trigger(self, on: ActionStep, action: Action) -> None:
        trig = _Trigger(on, action, self.broker)
        self.triggers.setdefault(on.module, []).append(trig)
        if trig.sub is not None:
            trig.sub.conflate(partial(self._published_run, trig))
        timebase = self.broker.timebase
        if on.module == ON_SCHEDULE:
            self.schedules.append(Schedule(on, action, timebase, self.run))
        elif on.module in (ON_CONDITION_TIMEOUT, ON_ALERT):
            self.watches.append(ConditionWatch(
                on, action, qualify(trig.topic or "", trig.message_type or "json"),
                trig.matches_doc, timebase, self.run))
        elif on.module == ON_OOF:
            kind = _oof_type(trig)
            if kind not in _OOF_TYPES:
                raise ValueError(f"invalid <Type> {kind!r} (match, delete, expire or all)")
        elif on.module == ON_AFFINITY:
            self.affinities.append(Affinity(on, action, self.broker, self.run))
        elif on.module == ON_SIGNAL and _signal_name(on.option("Signal")) not in SIGNALS:
            log.info("%s:%d: %s never fires in the emulator: it has no such event",
                     on.file, on.line, on.module)

    def _of(self, module: str) -> list[_Trigger]:
        return self.triggers.get(module, [])

    @property
    def listens(self) -> bool:
        """Whether the message path must tell this engine of publishes and removals."""
        return any(m in self.triggers for m in (ON_PUBLISH, ON_SOW_EXPIRE, ON_SOW_DELETE, ON_OOF,
                                                ON_CONDITION_TIMEOUT, ON_ALERT, ON_AFFINITY))

    @property
    def watches_clients(self) -> bool:
        return any(m in self.triggers for m in (ON_CONNECT, ON_LOGON, ON_DISCONNECT))

    @property
    def watches_deliveries(self) -> bool:
        return ON_DELIVER in self.triggers

    @property
    def watches_subscriptions(self) -> bool:
        return bool(self.affinities) or ON_SUBSCRIBE in self.triggers \
            or ON_UNSUBSCRIBE in self.triggers

    # -- the server's life ---------------------------------------------------------------
    def start(self) -> None:
        """The last step of start-up: arm the schedules, track the records already in the
        watched SOW topics, then run the ``on-startup`` actions."""
        if self.started or not self.enabled:
            return
        self.started = True
        now = self.broker.wallclock()
        for sched in self.schedules:
            sched.start(now)
        sow = self.broker.sow_service
        for watch in self.watches:
            topic = sow.get(watch.topic) if sow is not None else None
            if topic is None:
                log.warning("%s:%d: %s: %r is not a SOW topic: nothing to watch",
                            watch.action.file, watch.action.line,
                            ON_ALERT if watch.alert else ON_CONDITION_TIMEOUT,
                            display_name(watch.topic))
                continue
            watch.recover(topic.query(None).records, topic.decode_body)
        for aff in self.affinities:
            aff.start()
        self.fire(ON_STARTUP, {})

    def stop(self) -> None:
        """The first step of shutdown: run the ``on-shutdown`` actions, then stop every timer."""
        if self.stopped:
            return
        self.stopped = True
        if self.started:
            self.fire(ON_SHUTDOWN, {})
        for sched in self.schedules:
            sched.stop()
        for watch in self.watches:
            watch.stop()
        for aff in self.affinities:
            aff.stop()
        for trig in self._of(ON_PUBLISH):
            if trig.sub is not None:
                trig.sub.close()  # what a conflation retained is not run

    # -- running -------------------------------------------------------------------------
    def fire(self, module: str, variables: dict[str, str]) -> None:
        """Run every action with an ``On`` of ``module`` (one run per such ``On``)."""
        for trig in self._of(module):
            v: Vars = dict(variables)
            self.run(trig.action, v)

    def run(self, action: Action, variables: Vars) -> bool:
        """Run ``action``'s steps in order with ``variables`` (plus the ones always defined);
        False when a step ended it early. A step whose work goes on off the event loop (a
        system command, file housekeeping) hands back an awaitable: the steps after it run
        when it is done (:meth:`_resume`), in order."""
        if not self.enabled:
            return False
        v: Vars = {"AMPS_INSTANCE_NAME": self.instance_name,
                   **clock_variables(self.broker.wallclock())}
        v.update(variables)
        return self._run_from(action, v, 0)

    def _run_from(self, action: Action, v: Vars, first: int) -> bool:
        if self._depth >= MAX_DEPTH:
            log.warning("%s:%d: actions: not following a chain deeper than %d", action.file,
                        action.line, MAX_DEPTH)
            return False
        self._depth += 1
        try:
            for i in range(first, len(action.steps)):
                step = action.steps[i]
                run_step = self._steps.get(step.module)
                if run_step is None:
                    if step.kind == "if":  # what cannot be evaluated does not hold
                        log.info("%s:%d: %s cannot be evaluated here: the action stops",
                                 step.file, step.line, step.module)
                        return False
                    continue
                try:
                    went_on = run_step(step, v)
                    if inspect.isawaitable(went_on):  # work under way: the rest after it
                        self._wait_for(action, v, i + 1, went_on, self._depth)
                        return True
                except (StepFailed, CommandError, ValueError) as exc:
                    log.warning("%s:%d: %s failed: %s", step.file, step.line, step.module, exc)
                    return False
                except Exception:  # a bug in a step must not take the server down
                    log.exception("%s:%d: %s failed", step.file, step.line, step.module)
                    return False
                if not went_on:
                    return False
            return True
        finally:
            self._depth -= 1
            self.broker.turn.request()  # what the steps published goes out this turn

    def _wait_for(self, action: Action, v: Vars, nxt: int, work: Awaitable[bool],
                  depth: int) -> None:
        """Hold the run of ``action`` until ``work`` is done, then go on from step ``nxt``
        at the chain's ``depth`` (the rest of a run is as deep in its chain as its start: a
        chain through a command, say, is not a new one)."""
        try:
            fut = asyncio.ensure_future(work, loop=asyncio.get_running_loop())
        except RuntimeError:  # no event loop: the work never starts
            if inspect.iscoroutine(work):
                work.close()
            raise StepFailed("no event loop to run its work on") from None
        self.pending.add(fut)
        fut.add_done_callback(partial(self._resume, action, v, nxt, depth))

    def _resume(self, action: Action, v: Vars, nxt: int, depth: int,
                done: asyncio.Future[bool]) -> None:
        """A step's off-loop work is over: the action goes on from step ``nxt``, if it did
        (also while the server settles at shutdown: ``on-shutdown`` actions end too)."""
        self.pending.discard(done)
        if done.cancelled():
            return
        exc = done.exception()
        step = action.steps[nxt - 1]
        if isinstance(exc, (StepFailed, CommandError, ValueError)):
            log.warning("%s:%d: %s failed: %s", step.file, step.line, step.module, exc)
        elif exc is not None:  # a bug in a step must not take the server down
            log.error("%s:%d: %s failed", step.file, step.line, step.module, exc_info=exc)
        elif done.result() and nxt < len(action.steps):
            outer, self._depth = self._depth, depth - 1  # (_run_from counts this run again)
            try:
                self._run_from(action, v, nxt)
            finally:
                self._depth = outer

    async def settle(self, timeout: float = SETTLE_TIMEOUT, grace: float = SETTLE_GRACE) -> None:
        """Shutdown, after ``on-shutdown`` and before the transaction log closes: wait (at
        most ``timeout`` seconds) for the work under way and the steps after it, then stop
        what still runs: a command is killed, a file step stops after the file in hand (at
        most ``grace`` seconds more)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.pending:
            left = deadline - loop.time()
            if left <= 0:
                break
            await asyncio.wait(list(self.pending), timeout=left)
        stopped = list(self.pending)
        for fut in stopped:
            fut.cancel()
        if stopped:
            await asyncio.wait(stopped, timeout=grace)

    def execute_event(self, event: str, variables: Vars) -> None:
        for trig in self._of(ON_EXECUTE_EVENT):
            if (trig.step.option("Event") or "") == event:
                self.run(trig.action, dict(variables))

    # -- the message path's observer (ports.PublishObserver) ----------------------------
    def covers(self, topic: str) -> bool:
        return any(t.matches_topic(topic) for m in (ON_PUBLISH, ON_OOF)
                   for t in self._of(m))

    def check_writable(self, topic: str) -> None:
        pass  # actions refuse no publish

    def message_published(self, msg: Message, rec: JournalRecord | None) -> None:
        """Run what looks at a message published to its topic: the ``on-publish-message``
        triggers, and for a SOW record (it has a SowKey) the ``on-oof-message`` triggers,
        the subscriptions' watches and the message affinities. One pass picks them; the body
        is decoded only when it picked any (the message path tells every observer of a
        message that any observer covers: another one's topic is no reason to decode)."""
        topic = msg.topic
        key = msg.sow_key or ""
        published = [t for t in self._of(ON_PUBLISH) if t.matches_topic(topic)]
        oof: list[_Trigger] = []
        watches: list[ConditionWatch] = []
        affinities: list[Affinity] = []
        if key:
            oof = [t for t in self._of(ON_OOF) if t.matches_topic(topic)]
            watches = [w for w in self.watches if w.topic == topic]
            affinities = [a for a in self.affinities if a.data == topic]
        if not (published or oof or watches or affinities):
            return
        doc = msg.doc if msg.doc is not UNDECODED else self.broker.bodies.decode(msg.body, topic)
        base = _message_vars(msg)
        # a record another instance replicated here carries the path it came by
        replicated = rec is not None and bool(path_of(rec))
        for trig in published:
            if trig.matches_source(replicated) and trig.matches_doc(doc):
                sub = trig.sub
                if sub is not None and sub.conflation is not None:
                    if not self.stopped:  # (its timers are stopped)
                        sub.conflation.hold(msg, None)  # runs when the key's interval ends
                else:
                    self._published_run(trig, msg, None, base, doc)
        previous = msg.previous_doc
        if oof and previous is not None and previous is not UNDECODED:
            for trig in oof:
                if trig.filter is not None and _oof_type(trig) in ("match", "all") \
                        and trig.matches_doc(previous) and not trig.matches_doc(doc):
                    self.run(trig.action, {**base, "AMPS_REASON": reasons.OOF_MATCH})
        for watch in watches:
            watch.updated(key, msg.body, doc)
        for aff in affinities:
            aff.updated(key, msg.body, doc)

    def _published_run(self, trig: _Trigger, msg: Message, stamp: int | None,
                       base: Vars | None = None, doc: Any = UNDECODED) -> None:
        """Run an ``on-publish-message`` for ``msg`` as its subscription delivers it
        (``stamp``: its AMPS_TIMESTAMP in microseconds, by default when it was processed)."""
        v: Vars = dict(base) if base is not None else _message_vars(msg)
        if stamp is None:
            stamp = msg.timestamp
        v["AMPS_TIMESTAMP"] = format_timestamp(
            int(self.broker.wallclock() * 1_000_000) if stamp is None else stamp)
        sub = trig.sub
        if sub is not None:
            if sub.select is not None:
                data = v["AMPS_DATA"] = sub.data(msg, doc)
                v["AMPS_DATA_LENGTH"] = str(len(data))
            if sub.no_sowkey:
                v["AMPS_SOW_KEY"] = ""
        self.run(trig.action, v)

    def message_delivered(self, client: Client, topic: str, body: bytes, bookmark: str | None,
                          correlation_id: str | None) -> None:
        """A ``publish`` went to a subscriber of ``client`` (``on-deliver-message``)."""
        for trig in self._of(ON_DELIVER):
            if trig.matches_topic(topic):
                self.run(trig.action, {
                    "AMPS_TOPIC": display_name(topic), "AMPS_DATA": body,
                    "AMPS_DATA_LENGTH": str(len(body)), "AMPS_BOOKMARK": bookmark or "",
                    "AMPS_CLIENT_NAME": client.client_name or "",
                    "AMPS_CORRELATION_ID": correlation_id or ""})

    def records_removed(self, topic: str, records: list[Record], reason: str) -> None:
        if reason == reasons.OOF_EXPIRED:
            for rec in records:
                self.expired(topic, rec.data, "time_limit", rec.sow_key, rec.bookmark or "")
        else:
            self.deleted(topic, records, reason)
        oof = [t for t in self._of(ON_OOF) if t.matches_topic(topic)
               and _oof_type(t) in ("all", "expire" if reason == reasons.OOF_EXPIRED else "delete")]
        watches = [w for w in self.watches if w.topic == topic]
        self._affinity_removed(topic, records)
        for rec in records:
            if oof:
                doc = self.broker.bodies.decode(rec.data, topic)
                for trig in oof:
                    if trig.matches_doc(doc):
                        self.run(trig.action, _record_vars(topic, rec, reason))
            for watch in watches:
                watch.removed(rec.sow_key, rec.data)

    def expired(self, topic: str, data: bytes, reason: str, sow_key: str = "",
                bookmark: str = "") -> None:
        """A SOW record expired, or a queue message left its queue unprocessed (``reason``:
        time_limit, forced_expire, max_cancels, max_deliveries)."""
        for trig in self._of(ON_SOW_EXPIRE):
            wanted = trig.step.option("Reason")
            if trig.matches_topic(topic) and (
                    not wanted or reason in {r.strip() for r in wanted.split(",")}):
                self.run(trig.action, {"AMPS_DATA": data, "AMPS_TOPIC": display_name(topic),
                                       "AMPS_REASON": reason, "AMPS_SOW_KEY": sow_key,
                                       "AMPS_BOOKMARK": bookmark})

    def deleted(self, topic: str, records: Iterable[Record], reason: str = "deleted") -> None:
        triggers = [t for t in self._of(ON_SOW_DELETE) if t.matches_topic(topic)]
        if not triggers:
            return
        for rec in records:
            for trig in triggers:
                self.run(trig.action, _record_vars(topic, rec, reason))

    # -- views and conflated topics (their records are not on the message path) ---------
    def derived_stored(self, topic: str, sow_key: str, data: bytes, doc: Any) -> None:
        for aff in self.affinities:
            if aff.data == topic:
                if doc is UNDECODED:
                    doc = self.broker.bodies.decode(data, topic)
                aff.updated(sow_key, data, doc)

    def derived_removed(self, topic: str, records: list[Record]) -> None:
        self._affinity_removed(topic, records)

    def _affinity_removed(self, topic: str, records: list[Record]) -> None:
        for aff in self.affinities:
            if aff.data == topic:
                for rec in records:
                    aff.removed(rec.sow_key, rec.data)

    # -- clients -------------------------------------------------------------------------
    def client_event(self, module: str, client: Client, reason: str = "") -> None:
        """``on-connect-client``, ``on-logon-client``, ``on-disconnect-client``."""
        if module not in self.triggers or self.stopped:
            return
        self.fire(module, {"AMPS_CLIENT_NAME": client.client_name or "",
                           "AMPS_CONNECTION_NAME": f"client-{client.conn_id}",
                           "AMPS_AUTHENTICATION_ID": client.user_id or "",
                           "AMPS_REMOTE_ADDRESS": client.peer,
                           "AMPS_TRANSPORT": client.listener.name, "AMPS_REASON": reason})

    def client_logged_on(self, client: Client) -> None:
        self.client_event(ON_LOGON, client)

    def subscription_event(self, client: Client, cmd: Command) -> None:
        """A subscribe or unsubscribe command succeeded (``on-subscribe`` / ``on-unsubscribe``)."""
        module = ON_UNSUBSCRIBE if cmd.command == "unsubscribe" else ON_SUBSCRIBE
        topic = cmd.topic or ""
        v: Vars = {"AMPS_CLIENT_NAME": client.client_name or "", "AMPS_TOPIC": display_name(topic),
             "AMPS_SUB_ID": cmd.sub_id or "", "AMPS_FILTER": cmd.filter or "",
             "AMPS_COMMAND": cmd.command, "AMPS_OPTIONS": cmd.options or ""}
        for trig in self._of(module):
            if module == ON_UNSUBSCRIBE or trig.matches_topic(topic):
                self.run(trig.action, dict(v))
        for aff in self.affinities:
            aff.subscriptions_changed(client)

    def client_closed(self, client: Client) -> None:
        """``client`` disconnected: no processor of any ``on-message-affinity`` any more."""
        if not self.stopped:
            for aff in self.affinities:
                aff.gone(client)

    # -- the administrator and signals ---------------------------------------------------
    def admin_paths(self) -> list[dict[str, Any]]:
        """The ``on-admin`` actions, as the Admin tree lists them."""
        return [{"id": _admin_path(t.step), "name": t.step.option("Name") or _admin_path(t.step),
                 "description": t.step.option("Description") or "",
                 "required_parameters": _required(t.step)} for t in self._of(ON_ADMIN)]

    def admin(self, path: str, query: Mapping[str, str]) -> int:
        """Run the ``on-admin`` actions of ``path`` with the query's parameters as variables;
        how many ran. ``LookupError``: no such path; ``ValueError``: a required parameter is
        missing (nothing runs)."""
        triggers = [t for t in self._of(ON_ADMIN) if _admin_path(t.step) == path.strip("/")]
        if not triggers:
            raise LookupError(f"no action at {path!r}")
        for trig in triggers:
            missing = [p for p in _required(trig.step) if not query.get(p)]
            if missing:
                raise ValueError(f"action {path!r} requires the parameter(s) {', '.join(missing)}")
        for trig in triggers:
            v: Vars = dict(query)
            self.run(trig.action, v)
        return len(triggers)

    def minidump_written(self, path: str) -> None:
        """The server wrote a minidump: the ``on-minidump`` actions run (not again for a dump
        one of them asked for, which would never end)."""
        if self._dumping or ON_MINIDUMP not in self.triggers:
            return
        self._dumping = True
        try:
            self.fire(ON_MINIDUMP, {"AMPS_MINIDUMP_PATH": path})
        finally:
            self._dumping = False

    def wants_signal(self, name: str) -> bool:
        return any(_signal_name(t.step.option("Signal")) == name for t in self._of(ON_SIGNAL))

    def signal(self, name: str) -> None:
        """The process got ``name`` (SIGUSR1, SIGUSR2): run the ``on-signal`` actions for it."""
        for trig in self._of(ON_SIGNAL):
            if _signal_name(trig.step.option("Signal")) == name:
                self.run(trig.action, {"AMPS_SIGNAL": name})


def _oof_type(trig: _Trigger) -> str:
    return (trig.step.option("Type") or "all").strip().lower()


def _signal_name(text: str | None) -> str:
    name = (text or "").strip().upper()
    return name if name.startswith("SIG") else f"SIG{name}"


def _admin_path(step: ActionStep) -> str:
    return (step.option("Path") or "").strip().strip("/")


def _required(step: ActionStep) -> list[str]:
    return [o.value.strip() for o in step.options if o.name == "RequiredParameter" and o.value.strip()]


def _message_vars(msg: Message) -> Vars:
    return {"AMPS_DATA": msg.body, "AMPS_DATA_LENGTH": str(len(msg.body)),
            "AMPS_TOPIC": display_name(msg.topic), "AMPS_SOW_KEY": msg.sow_key or "",
            "AMPS_BOOKMARK": msg.bookmark or "", "AMPS_CLIENT_NAME": msg.client_name or "",
            "AMPS_CORRELATION_ID": msg.correlation_id or "", "AMPS_REASON": ""}


def _record_vars(topic: str, rec: Record, reason: str) -> Vars:
    return {"AMPS_DATA": rec.data, "AMPS_TOPIC": display_name(topic), "AMPS_REASON": reason,
            "AMPS_SOW_KEY": rec.sow_key, "AMPS_BOOKMARK": rec.bookmark or ""}
