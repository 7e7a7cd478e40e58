"""The ``If`` and ``Do`` steps of actions: what each module does.

Each step reads its options after ``{{VARIABLE}}`` expansion and returns True to go on with
the action, False to end the run quietly (an ``If`` that does not hold). A step that fails
raises :class:`StepFailed` (or the message path's ``CommandError``): the engine logs it and
ends the run, as AMPS ends an action at a failing ``Do``.

Steps that act on the message path publish and delete exactly as a client would (journal,
SOW, subscribers, the other listeners), as the instance itself and without entitlement
checks. ``do-minidump`` writes the emulator's minidump (:mod:`server.core.minidump`);
``do-truncate-statistics`` removes the statistics older than ``Age`` (``do-vacuum-statistics``,
deprecated in AMPS, only says so). The housekeeping of the journal's files and of arbitrary
files (minidumps, logs, anything ``Pattern`` names) is in :mod:`.housekeeping`;
``do-execute-system`` runs its command off the event loop (:mod:`.system`). Such a step may
hand back an awaitable (its work runs off the event loop) and the engine runs the action's
later steps after it. ``do-compact-sow`` compacts the SOW's files (:mod:`.housekeeping`,
:mod:`.sow_compaction`); ``do-rotate-logs`` starts the next file of every file log target.
"""

from __future__ import annotations

import logging
import math
import shutil
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from amps_emulator.config import ConfigError, ConfigIssue
from amps_emulator.config.units import parse_duration
from amps_emulator.protocol.bodies import decode_json
from amps_emulator.protocol.filter import FilterError, compile_filter, evaluate_expression
from amps_emulator.protocol.msgtypes import MessageTypeConfigError
from amps_emulator.protocol.reasons import CommandError
from amps_emulator.protocol.topics import qualify
from amps_emulator.server.messaging import message_path as publish
from amps_emulator.server.messaging.registration import compile_filter_for
from amps_emulator.server.services.actions.host import ActionHost
from amps_emulator.server.services.actions.housekeeping import Housekeeping, StepFailed
from amps_emulator.server.services.actions.system import DEFAULT_TIMEOUT, MAX_WAITING, CommandRunner
from amps_emulator.server.services.actions.variables import Vars, expand, expand_text, to_text
from amps_emulator.server.services.log_targets import RotatingFileTarget

if TYPE_CHECKING:
    from amps_emulator.config.model import ActionStep
    from amps_emulator.server.core.ports import ProxiedTransferControl, ReplicationControl
    from amps_emulator.server.messaging.broker import Broker

log = logging.getLogger("amps_emulator.actions")

#: AMPS's event id of the line ``do-echo-message`` writes
ECHO_ID = "29-0103"

#: a step: (step, the run's variables) -> go on? (or an awaitable of it: the answer once the
#: step's work, done off the event loop, is over; the action's next steps wait for it)
Step = Callable[["ActionStep", Vars], "bool | Awaitable[bool]"]


def step_filter(step: ActionStep, option: str) -> Callable[..., bool] | None:
    """The compiled filter of a trigger's ``option`` (None: none given); a ConfigError that
    names the step's place for one that does not compile."""
    text = step.option(option)
    try:
        return compile_filter_for(text) if text else None
    except CommandError as exc:
        raise ConfigError([ConfigIssue(step.file, step.line,
                                       f"{step.module}: invalid <{option}>: {exc}")]) from None


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() in ("true", "yes", "1", "enabled")


def _percent(text: str) -> float:
    value = text.strip().rstrip("%").strip()
    try:
        return float(value)
    except ValueError:
        raise StepFailed(f"{text!r} is not a percentage") from None


def format_value(value: Any) -> str:
    """An expression's value as a variable's text: NULL is empty, integral numbers have no
    decimals, booleans are ``true``/``false``."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return str(int(value))
    return str(value)


class Steps(Housekeeping):
    """The step modules, as methods of the engine (:class:`.engine.Actions`, which sets
    these attributes)."""

    broker: Broker
    host: ActionHost | None
    instance_name: str
    #: ``do-increment-counter``'s counters, by key (for the server's life)
    counters: dict[str, int]
    #: the replication links' sync/async switch, injected by the root when it has one
    replication_control: ReplicationControl | None
    #: the replicated queues' proxied-transfer switch, injected by the root when it has one
    proxied_transfer: ProxiedTransferControl | None
    #: ``do-execute-system``'s commands, run one at a time
    commands: CommandRunner
    #: run the actions whose ``on-execute-event`` names this event
    execute_event: Callable[[str, Vars], None]

    def step_table(self) -> dict[str, Step]:
        """Module name -> step."""
        table: dict[str, Step] = {
            "amps-action-if-condition": self.if_condition,
            "amps-action-if-file-system-usage": self.if_file_system_usage,
            "amps-action-do-publish-message": self.do_publish,
            "amps-action-do-delete-sow": self.do_delete_sow,
            "amps-action-do-query-sow": self.do_query_sow,
            "amps-action-do-extract-values": self.do_extract_values,
            "amps-action-do-translate-data": self.do_translate_data,
            "amps-action-do-increment-counter": self.do_increment_counter,
            "amps-action-do-enable-transport": self.do_enable_transport,
            "amps-action-do-disable-transport": self.do_disable_transport,
            "amps-action-do-shutdown": self.do_shutdown,
            "amps-action-do-echo-message": self.do_echo,
            "amps-action-do-nothing": self.do_echo,
            "amps-action-do-execute-event": self.do_execute_event,
            "amps-action-do-execute-system": self.do_execute_system,
            "amps-action-do-remove-journal": self.do_remove_journal,
            "amps-action-do-archive-journal": self.do_archive_journal,
            "amps-action-do-compress-journal": self.do_compress_journal,
            "amps-action-do-remove-files": self.do_remove_files,
            "amps-action-do-compress-files": self.do_compress_files,
            "amps-action-do-downgrade-replication": self._switch_replication(False),
            "amps-action-do-upgrade-replication": self._switch_replication(True),
            "amps-action-do-enable-proxied-transfer": self._proxied_transfer(True),
            "amps-action-do-disable-proxied-transfer": self._proxied_transfer(False),
        }
        for what in ("authentication", "entitlement"):
            table[f"amps-action-do-enable-{what}"] = self._switch(what, True)
            table[f"amps-action-do-disable-{what}"] = self._switch(what, False)
            table[f"amps-action-do-reset-{what}"] = self._reset(what)
        table["amps-action-do-rotate-logs"] = self.do_rotate_logs
        table["amps-action-do-truncate-statistics"] = self.do_truncate_statistics
        table["amps-action-do-vacuum-statistics"] = self.do_vacuum_statistics
        table["amps-action-do-minidump"] = self.do_minidump
        table["amps-action-do-compact-sow"] = self.do_compact_sow
        return table

    # -- If -------------------------------------------------------------------------------
    def if_condition(self, step: ActionStep, v: Vars) -> bool:
        text = expand_text(step.option("Condition"), v)
        try:
            flt = compile_filter(text)
        except FilterError as exc:
            log.error("%s:%d: %s: invalid condition %r: %s", step.file, step.line, step.module,
                      text, exc)
            return False
        data = v.get("AMPS_DATA")
        doc = decode_json(data) if isinstance(data, bytes) else None
        return bool(flt(doc))

    def if_file_system_usage(self, step: ActionStep, v: Vars) -> bool:
        path = expand_text(step.option("Path"), v, ".") or "."
        threshold = _percent(expand_text(step.option("GreaterThan"), v, "100"))
        try:
            usage = shutil.disk_usage(path)
        except OSError as exc:
            log.warning("%s:%d: %s: cannot read the usage of %s: %s", step.file, step.line,
                        step.module, path, exc)
            return False  # what cannot be evaluated does not hold
        used = 100.0 * (usage.total - usage.free) / usage.total if usage.total else 0.0
        v["AMPS_FILE_SYSTEM_USAGE"] = f"{used:.1f}"
        return used > threshold

    # -- the message path ---------------------------------------------------------------
    def _topic(self, step: ActionStep, v: Vars) -> str:
        name = expand_text(step.option("Topic"), v)
        if not name:
            raise StepFailed("no <Topic>")
        return qualify(name, expand_text(step.option("MessageType"), v, "json") or "json")

    def do_publish(self, step: ActionStep, v: Vars) -> bool:
        topic = self._topic(step, v)
        data = expand(step.option("Data") or "{{AMPS_DATA}}", v)
        broker = self.broker
        queues = broker.queue_service
        if queues is not None:
            topic = queues.publish_target(topic)  # a queue's own name: its feed
        if _flag(step.option("UpdateOnly")):
            sow_topic = broker.sow_service.get(topic) if broker.sow_service is not None else None
            if sow_topic is None:
                raise StepFailed(f"UpdateOnly: {topic!r} is not a SOW topic")
            key = sow_topic.key_for(sow_topic.decode_body(data))
            if sow_topic.get(key) is None:
                log.debug("%s: no record %s in %s to update", step.module, key, topic)
                return True
        publish.publish_message(broker, topic, data, delta=_flag(step.option("Delta")),
                                client_name=self.instance_name)
        return True

    def do_delete_sow(self, step: ActionStep, v: Vars) -> bool:
        topic = self._topic(step, v)
        flt = expand_text(step.option("Filter"), v) or "1=1"
        n = publish.delete_records(self.broker, topic, flt)
        v["AMPS_DELETED_COUNT"] = str(n)
        return True

    def do_query_sow(self, step: ActionStep, v: Vars) -> bool:
        """The first record (by ``OrderBy``) matching ``Filter`` into ``CaptureData``'s
        variable; none: ``DefaultData`` if given, else the action ends."""
        topic_key = self._topic(step, v)
        sow = self.broker.sow_service
        topic = sow.get(topic_key) if sow is not None else None
        if topic is None:
            raise StepFailed(f"{topic_key!r} is not a SOW topic")
        flt = compile_filter_for(expand_text(step.option("Filter"), v) or None)
        res = topic.query(flt, order_by=expand_text(step.option("OrderBy"), v) or None, top_n=1)
        name = expand_text(step.option("CaptureData"), v) or "AMPS_DATA"
        if res.records:
            v[name] = res.records[0].data
            return True
        default = step.option("DefaultData")
        if default is None:
            log.info("%s:%d: %s: no record of %s matches; the action ends", step.file, step.line,
                     step.module, topic_key)
            return False
        v[name] = expand(default, v)
        return True

    def do_extract_values(self, step: ActionStep, v: Vars) -> bool:
        """Each ``Value`` ``NAME=expression``, evaluated over ``Data`` (the triggering message
        by default) by the filter engine, sets the variable ``NAME``."""
        mt = expand_text(step.option("MessageType"), v, "json") or "json"
        data = expand(step.option("Data") or "{{AMPS_DATA}}", v)
        try:
            doc = self.broker.bodies.decode_typed(data, mt)
        except MessageTypeConfigError:
            raise StepFailed(f"unknown message type {mt!r}") from None
        for opt in step.options:
            if opt.name != "Value":
                continue
            name, sep, expr = expand_text(opt.value, v).partition("=")
            if not sep or not name.strip():
                raise StepFailed(f"<Value> {opt.value!r} is not NAME=expression")
            try:
                value = evaluate_expression(expr.strip(), doc)
            except FilterError as exc:
                raise StepFailed(f"<Value> {opt.value!r}: {exc}") from None
            v[name.strip()] = format_value(value)
        return True

    def do_translate_data(self, step: ActionStep, v: Vars) -> bool:
        """``Data`` looked up in the ``Case`` options (``FROM=TO``, first match wins; ``Default``
        when none matches, else ``Data`` unchanged) into the variable ``Value`` names."""
        data = expand_text(step.option("Data"), v)
        target = expand_text(step.option("Value"), v)
        if not target:
            raise StepFailed("no <Value> variable name")
        result = expand_text(step.option("Default"), v, data) if step.option("Default") is not None \
            else data
        for opt in step.options:
            if opt.name == "Case":
                src, sep, dst = expand_text(opt.value, v).partition("=")
                if sep and src == data:
                    result = dst
                    break
        v[target] = result
        return True

    def do_increment_counter(self, step: ActionStep, v: Vars) -> bool:
        """The counter ``Key`` (kept for the server's life) goes up by one; its new value
        goes into the variable ``Value`` names."""
        key = expand_text(step.option("Key"), v)
        target = expand_text(step.option("Value"), v)
        if not target:
            raise StepFailed("no <Value> variable name")
        n = self.counters.get(key, 0) + 1
        self.counters[key] = n
        v[target] = str(n)
        return True

    # -- the server -----------------------------------------------------------------------
    def _host(self) -> ActionHost:
        if self.host is None:
            raise StepFailed("this server runs no transports (an engine without a host)")
        return self.host

    def _set_transport(self, step: ActionStep, v: Vars, enabled: bool) -> bool:
        name = expand_text(step.option("Transport"), v) or None
        try:
            names = self._host().action_set_transport(name, enabled)
        except LookupError as exc:
            raise StepFailed(str(exc.args[0])) from None
        log.warning("transport(s) %s %s by an action", ", ".join(names) or "(none)",
                    "enabled" if enabled else "disabled")
        return True

    def do_enable_transport(self, step: ActionStep, v: Vars) -> bool:
        return self._set_transport(step, v, True)

    def do_disable_transport(self, step: ActionStep, v: Vars) -> bool:
        return self._set_transport(step, v, False)

    def do_shutdown(self, step: ActionStep, v: Vars) -> bool:
        log.warning("%s:%d: shutting down (%s)", step.file, step.line, step.module)
        self._host().request_shutdown()
        return True

    def _switch(self, what: str, enabled: bool) -> Step:
        def switch(step: ActionStep, v: Vars) -> bool:
            self._host().action_switch_security(what, enabled)
            return True
        return switch

    def _reset(self, what: str) -> Step:
        def reset(step: ActionStep, v: Vars) -> bool:
            n = self._host().action_reset_security(
                what, expand_text(step.option("Transport"), v) or None,
                expand_text(step.option("AuthenticationId"), v) or None)
            log.info("%s: %d session(s) reset", step.module, n)
            return True
        return reset

    def do_echo(self, step: ActionStep, v: Vars) -> bool:
        text = expand_text(step.option("Message"), v, step.module)
        log.info("%s", text, extra={"amps_id": ECHO_ID})
        return True

    def do_minidump(self, step: ActionStep, v: Vars) -> bool:
        """A minidump into ``MiniDumpDirectory`` (then the ``on-minidump`` actions run)."""
        try:
            self._host().write_minidump(f"{step.module} at {step.file}:{step.line}")
        except LookupError as exc:  # disabled: nothing to do, as AMPS
            log.info("%s: %s", step.module, exc)
        except OSError as exc:
            raise StepFailed(f"cannot write the minidump: {exc}") from None
        return True

    def do_execute_event(self, step: ActionStep, v: Vars) -> bool:
        event = expand_text(step.option("Event"), v)
        if not event and step.option("EventVariable"):
            event = to_text(v.get(expand_text(step.option("EventVariable"), v), ""))
        if not event:
            raise StepFailed("no <Event> (or an empty <EventVariable>)")
        self.execute_event(event, dict(v))
        return True

    def do_execute_system(self, step: ActionStep, v: Vars) -> Awaitable[bool]:
        """Run ``Command`` with ``/bin/sh -c`` (:mod:`.system`); the action's next steps run
        once it has finished. Its variables are expanded as in any option: the command then
        holds whatever a message put there (AMPS warns against message data in commands)."""
        command = expand_text(step.option("Command"), v)
        if not command.strip():
            raise StepFailed("no <Command>")
        limit = expand_text(step.option("Timeout"), v)
        timeout = parse_duration(limit) if limit else DEFAULT_TIMEOUT
        if timeout <= 0:
            raise StepFailed(f"<Timeout> {limit!r} is not a positive duration")
        runner = self.commands
        if runner.busy():
            raise StepFailed(f"{MAX_WAITING} commands already wait their turn: {command!r} not run")

        async def execute() -> bool:  # not started at all: the action ends as at a failed Do
            outcome = await runner.run(command, timeout, f"{step.file}:{step.line}: {step.module}")
            return outcome.status is not None or outcome.timed_out

        return execute()  # (the engine schedules it, or fails the step without a loop)

    # -- housekeeping (the journal and other files: .housekeeping) ----------------------
    def do_rotate_logs(self, step: ActionStep, v: Vars) -> bool:
        """Every ``file``/``gzip`` log target starts its next file."""
        targets = [h for h in logging.getLogger("amps_emulator").handlers
                   if isinstance(h, RotatingFileTarget)]
        closed = [t.rotate() for t in targets]
        log.info("%s: rotated %d log file(s)%s", step.module, len(closed),
                 f" ({', '.join(closed)})" if closed else "")
        return True

    def do_truncate_statistics(self, step: ActionStep, v: Vars) -> bool:
        """Remove the statistics older than ``Age`` (the history, and the statistics database
        when ``Admin/FileName`` is a file; the file's rows go in its writer thread)."""
        text = expand_text(step.option("Age"), v)
        try:
            age = parse_duration(text)
        except ValueError as exc:
            raise StepFailed(f"<Age> {text!r}: {exc}") from None
        done = self.host.action_truncate_statistics(age) if self.host is not None else None
        log.info("%s: %s", step.module, done or "no statistics are kept (no Admin interface)")
        return True

    def do_vacuum_statistics(self, step: ActionStep, v: Vars) -> bool:
        """Deprecated in AMPS, which no longer vacuums a running instance's statistics: one
        line, nothing done."""
        log.warning("%s:%d: %s is deprecated and does nothing: shrink the statistics database "
                    "offline (sqlite3 FILE VACUUM while the instance is stopped)",
                    step.file, step.line, step.module)
        return True

    def _replication(self, step: ActionStep) -> ReplicationControl | None:
        if self.replication_control is None:
            log.info("%s: no replication destinations to switch", step.module)
        return self.replication_control

    def _switch_replication(self, upgrade: bool) -> Step:
        def step(step: ActionStep, v: Vars) -> bool:
            """``do-downgrade-replication`` / ``do-upgrade-``: the destinations behind by
            ``Age`` (caught up within it, to upgrade), after ``GracePeriod``."""
            control = self._replication(step)
            if control is not None:
                age = parse_duration(expand_text(step.option("Age"), v, "0") or "0")
                grace = parse_duration(expand_text(step.option("GracePeriod"), v, "0") or "0")
                names = (control.upgrade if upgrade else control.downgrade)(age, grace)
                log.info("%s: %s %s", step.module, "upgraded" if upgrade else "downgraded",
                         ", ".join(names) or "nothing")
            return True
        return step

    def _proxied_transfer(self, enabled: bool) -> Step:
        def step(step: ActionStep, v: Vars) -> bool:
            """``do-enable-proxied-transfer`` / ``do-disable-``: this instance takes over (or
            stops taking over) the messages of the replicated queue ``Topic`` whose owner is
            unreachable."""
            control = self.proxied_transfer
            name = expand_text(step.option("Topic"), v)
            if control is None:
                log.info("%s: no replicated queue %r to switch", step.module, name)
                return True
            if not name:
                raise StepFailed("no <Topic>")
            mt = expand_text(step.option("MessageType"), v, "json") or "json"
            try:
                control.set_proxied_transfer(name, mt, enabled)
            except CommandError as exc:
                raise StepFailed(f"{name}: {exc.reason}") from None
            return True
        return step


__all__ = ["ECHO_ID", "Step", "StepFailed", "Steps", "format_value"]
