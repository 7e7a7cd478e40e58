"""Configured ``Actions`` that react to messages: the dead-letter pattern and its relatives.

Implemented triggers (``On``):

* ``amps-action-on-publish-message``: a message is published to a matching topic;
* ``amps-action-on-sow-expire-message``: a SOW record expires, or a queue message leaves
  its queue unprocessed (``{{AMPS_REASON}}``: ``time_limit``, ``forced_expire``,
  ``max_cancels``, ``max_deliveries``; ``expired`` for SOW records);
* ``amps-action-on-sow-delete-message``: records are removed by ``sow_delete``.

Implemented steps (``Do``): ``amps-action-do-publish-message`` (``Topic``, ``Data``; the
message is published exactly as a client's would be: journalled, stored, delivered,
enqueued), ``amps-action-do-delete-sow`` (``Topic``, ``Filter``) and
``amps-action-do-{disable,enable}-{authentication,entitlement}`` (while security blocks are
configured; without them there is nothing to switch).

``Topic`` in ``On`` options is matched like a subscription topic (a regular expression when
it contains regex characters). Variables in option values: ``{{AMPS_DATA}}`` (the message),
``{{AMPS_REASON}}``, ``{{AMPS_TOPIC}}``, ``{{AMPS_SOW_KEY}}``, ``{{AMPS_BOOKMARK}}``,
``{{AMPS_INSTANCE_NAME}}``, ``{{AMPS_DATETIME}}``, ``{{AMPS_UNIX_TIMESTAMP}}``.

Any other configured action module is reported once at start-up as not run by the emulator,
and its action is skipped. Actions triggered by actions are followed to a fixed depth so a
configuration that publishes into its own trigger cannot loop forever.
"""

from __future__ import annotations

import datetime as _dt
import logging
import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from amps_emulator.protocol import reasons
from amps_emulator.protocol.reasons import CommandError
from amps_emulator.server.router import compile_topic_regex, is_regex_topic

if TYPE_CHECKING:
    from amps_emulator.journal.record import JournalRecord
    from amps_emulator.server.delivery import Message
    from amps_emulator.sow import Record

log = logging.getLogger("amps_emulator.actions")

ON_PUBLISH = "amps-action-on-publish-message"
ON_SOW_EXPIRE = "amps-action-on-sow-expire-message"
ON_SOW_DELETE = "amps-action-on-sow-delete-message"
DO_PUBLISH = "amps-action-do-publish-message"
DO_DELETE_SOW = "amps-action-do-delete-sow"
#: the security switches: step -> (what, enabled)
DO_SECURITY = {
    "amps-action-do-disable-authentication": ("authentication", False),
    "amps-action-do-enable-authentication": ("authentication", True),
    "amps-action-do-disable-entitlement": ("entitlement", False),
    "amps-action-do-enable-entitlement": ("entitlement", True),
}
_TRIGGERS = (ON_PUBLISH, ON_SOW_EXPIRE, ON_SOW_DELETE)
_STEPS = (DO_PUBLISH, DO_DELETE_SOW, *DO_SECURITY)
MAX_DEPTH = 8
_VAR = re.compile(r"\{\{(AMPS_[A-Z_]+)\}\}")


class _Trigger:
    __slots__ = ("topic", "regex", "action")

    def __init__(self, topic: str, action: Any) -> None:
        self.topic = topic
        self.regex = compile_topic_regex(topic) if is_regex_topic(topic) else None
        self.action = action

    def matches(self, topic: str) -> bool:
        return topic == self.topic if self.regex is None else self.regex.search(topic) is not None


class Actions:
    def __init__(self, instance_name: str, configured: Iterable[Any]) -> None:
        self.instance_name = instance_name
        #: the message path, injected by the composition root (``app.Server``): publish
        #: ``(topic, data)`` as the instance, delete ``(topic, filter)`` from a SOW topic
        self.publish: Callable[[str, bytes], object] | None = None
        self.delete: Callable[[str, str], object] | None = None
        #: ``(what, enabled)``: switch authentication or entitlement (the security steps)
        self.switch_security: Callable[[str, bool], object] | None = None
        self.on_publish: list[_Trigger] = []
        self.on_sow_expire: list[_Trigger] = []
        self.on_sow_delete: list[_Trigger] = []
        self._depth = 0
        lists = {ON_PUBLISH: self.on_publish, ON_SOW_EXPIRE: self.on_sow_expire,
                 ON_SOW_DELETE: self.on_sow_delete}
        for action in configured:
            unsupported = [s.module for s in (*action.on, *action.steps)
                           if s.module not in _TRIGGERS and s.module not in _STEPS]
            if unsupported:
                log.warning("%s:%d: action skipped: the emulator does not run %s",
                            action.file, action.line, ", ".join(sorted(set(unsupported))))
                continue
            for on in action.on:
                lists[on.module].append(_Trigger(on.option("Topic") or ".*", action))

    # -- the message path's listener (ports.PublishListener) ----------------------------
    def covers(self, topic: str) -> bool:
        return bool(self.on_publish)

    def check_writable(self, topic: str) -> None:
        pass  # actions refuse no publish

    def message_published(self, msg: Message, rec: JournalRecord | None) -> None:
        if self.on_publish:
            self.published(msg)

    def records_removed(self, topic: str, records: list[Record], reason: str) -> None:
        if reason == reasons.OOF_EXPIRED:
            for rec in records:
                self.expired(topic, rec.data, "time_limit", rec.sow_key, rec.bookmark or "")
        else:
            self.deleted(topic, records)

    # -- triggers ----------------------------------------------------------------------
    def published(self, msg: Any) -> None:
        self._fire(self.on_publish, msg.topic, {
            "AMPS_DATA": msg.body, "AMPS_TOPIC": msg.topic, "AMPS_SOW_KEY": msg.sow_key or "",
            "AMPS_BOOKMARK": msg.bookmark or "", "AMPS_REASON": ""})

    def expired(self, topic: str, data: bytes, reason: str, sow_key: str = "",
                bookmark: str = "") -> None:
        self._fire(self.on_sow_expire, topic, {
            "AMPS_DATA": data, "AMPS_TOPIC": topic, "AMPS_REASON": reason,
            "AMPS_SOW_KEY": sow_key, "AMPS_BOOKMARK": bookmark})

    def deleted(self, topic: str, records: Iterable[Any], reason: str = "deleted") -> None:
        if not self.on_sow_delete:
            return
        for rec in records:
            self._fire(self.on_sow_delete, topic, {
                "AMPS_DATA": rec.data, "AMPS_TOPIC": topic, "AMPS_REASON": reason,
                "AMPS_SOW_KEY": rec.sow_key, "AMPS_BOOKMARK": rec.bookmark or ""})

    def _fire(self, triggers: list[_Trigger], topic: str, variables: dict[str, Any]) -> None:
        if not triggers:
            return
        if self._depth >= MAX_DEPTH:
            log.warning("actions: not following a chain deeper than %d (topic %s)", MAX_DEPTH, topic)
            return
        variables.setdefault("AMPS_INSTANCE_NAME", self.instance_name)
        self._depth += 1
        try:
            for trig in triggers:
                if trig.matches(topic):
                    self._run(trig.action, variables)
        finally:
            self._depth -= 1

    # -- steps -------------------------------------------------------------------------
    def _run(self, action: Any, variables: dict[str, Any]) -> None:
        for step in action.do:
            try:
                if step.module == DO_PUBLISH:
                    self._do_publish(step, variables)
                elif step.module == DO_DELETE_SOW:
                    self._do_delete_sow(step, variables)
                elif step.module in DO_SECURITY:
                    if self.switch_security is None:
                        raise RuntimeError("actions: no security switch injected")
                    self.switch_security(*DO_SECURITY[step.module])
            except CommandError as exc:
                log.warning("%s:%d: %s failed: %s", step.file, step.line, step.module, exc)

    def _do_publish(self, step: Any, variables: dict[str, Any]) -> None:
        topic = substitute(step.option("Topic") or "", variables).decode()
        data = substitute(step.option("Data") or "{{AMPS_DATA}}", variables)
        if self.publish is None:
            raise RuntimeError("actions: no message path injected")
        self.publish(topic, data)

    def _do_delete_sow(self, step: Any, variables: dict[str, Any]) -> None:
        topic = substitute(step.option("Topic") or "", variables).decode()
        flt = substitute(step.option("Filter") or "1=1", variables).decode()
        if self.delete is None:
            raise RuntimeError("actions: no message path injected")
        self.delete(topic, flt)


def substitute(template: str, variables: dict[str, Any]) -> bytes:
    """Expand ``{{AMPS_...}}`` variables; bytes values (message data) are inserted as is."""
    out: list[bytes] = []
    pos = 0
    for m in _VAR.finditer(template):
        out.append(template[pos:m.start()].encode())
        out.append(_value(m.group(1), variables))
        pos = m.end()
    out.append(template[pos:].encode())
    return b"".join(out)


def _value(name: str, variables: dict[str, Any]) -> bytes:
    if name in variables:
        v = variables[name]
    elif name == "AMPS_DATETIME":
        v = _dt.datetime.now(_dt.UTC).isoformat()
    elif name == "AMPS_UNIX_TIMESTAMP":
        v = str(int(_dt.datetime.now(_dt.UTC).timestamp()))
    else:
        v = ""
    return v if isinstance(v, bytes) else str(v).encode()
