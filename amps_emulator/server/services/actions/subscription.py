"""The subscription an ``on-publish-message`` action is: its ``Options``.

AMPS enters the trigger of an ``on-publish-message`` as a subscription of an internal
client, and its ``Options`` are that subscription's options: any a ``subscribe`` takes
without a bookmark (the config reader refuses the others, :mod:`config.actions_section`).
They are parsed by the clients' parser and mean for the run what they mean for what a
client's subscription receives:

* ``select=[...]``: ``AMPS_DATA`` (and ``AMPS_DATA_LENGTH``) is the message projected by the
  select list, as a subscriber with that list receives it;
* ``conflation=<interval>`` (``conflation_key=[...]``, by default the SowKey): the first
  message of a key starts its interval on the server clock; the action runs once for the
  key when it ends, with the latest message (:class:`server.delivery.conflation.Conflation`,
  the machinery of the clients' conflated subscriptions). With ``timestamp``,
  ``AMPS_TIMESTAMP`` is when the first message of the interval was processed, as the
  timestamp of a client's conflated message is;
* ``no_sowkey``: ``AMPS_SOW_KEY`` is empty;
* ``non_regex_topic``: the ``Topic`` is a literal name (the engine's trigger reads it);
* ``none``, ``bookmark``, ``oof``, ``max_backlog``, and ``timestamp`` without conflation:
  accepted and change nothing (every run has ``AMPS_BOOKMARK`` and ``AMPS_TIMESTAMP``; the
  action runs for publishes, not out-of-focus notifications; it takes no queue lease).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from amps_emulator.config import ConfigError, ConfigIssue
from amps_emulator.protocol.command import parse_options
from amps_emulator.protocol.msgtypes import MessageTypeConfigError
from amps_emulator.protocol.reasons import CommandError
from amps_emulator.server.core.message import UNDECODED
from amps_emulator.server.delivery.conflation import Conflation, Held, parse_interval, parse_keys
from amps_emulator.server.delivery.fanout import selected
from amps_emulator.sow.query import Select, selection

if TYPE_CHECKING:
    from amps_emulator.config.model import ActionStep
    from amps_emulator.server.core.message import Message
    from amps_emulator.server.delivery.conflation import ConflationHost

__all__ = ["ActionSubscription"]

#: a conflated run: the latest message of the key, and when to say it was processed (us)
Emit = Callable[["Message", "int | None"], None]


class _Conflated(Conflation):
    """An action's conflation: the latest message of a key runs the action."""

    def __init__(self, host: ConflationHost, interval: float, keys: tuple[tuple, ...] | None,
                 out: Emit, first_stamp: bool) -> None:
        super().__init__(host, interval, keys)
        self.out = out
        self.first_stamp = first_stamp

    def emit(self, held: Held) -> None:
        self.out(held.msg, round(held.first_ts * 1_000_000) if self.first_stamp else None)


class ActionSubscription:
    """The ``Options`` of one ``on-publish-message``; ``ConfigError`` at their line when a
    value is bad (a select list, a conflation key)."""

    __slots__ = ("options", "select", "no_sowkey", "literal", "conflation", "_interval",
                 "_keys", "_host")

    def __init__(self, step: ActionStep, host: ConflationHost) -> None:
        given = next((o for o in step.options if o.name == "Options"), None)
        text = given.value if given is not None else ""
        line = given.line if given is not None and given.line else step.line
        try:
            opts = parse_options(text)
            self.select: Select | None = selection(opts.get("select"))
            conflation = opts.get("conflation")
            self._interval = parse_interval(conflation) if isinstance(conflation, str) else None
            key_text = opts.get("conflation_key")
            self._keys = parse_keys(key_text) if isinstance(key_text, str) \
                and self._interval is not None else None
        except CommandError as exc:
            raise ConfigError([ConfigIssue(step.file, line,
                                           f"{step.module}: invalid <Options>: {exc}")]) from None
        self.options = opts
        self.no_sowkey = "no_sowkey" in opts
        self.literal = "non_regex_topic" in opts
        self._host = host
        self.conflation: Conflation | None = None
        if self.select is not None:
            _check_select(step, host, line)

    def conflate(self, out: Emit) -> None:
        """Arm the conflation (if any): its runs go to ``out``."""
        if self._interval is not None and self.conflation is None:
            self.conflation = _Conflated(self._host, self._interval, self._keys, out,
                                         "timestamp" in self.options)

    def data(self, msg: Message, doc: Any) -> bytes:
        """``AMPS_DATA``: the message as the subscription delivers it."""
        if self.select is None:
            return msg.body
        bodies = self._host.bodies
        if doc is UNDECODED:
            doc = bodies.decode(msg.body, msg.topic)
        return selected(msg.body, self.select, doc, bodies.encoder(msg.topic))

    def close(self) -> None:
        if self.conflation is not None:
            self.conflation.close()


def _check_select(step: ActionStep, host: ConflationHost, line: int) -> None:
    """A select list on a message type that has none is a config error (as a client's
    subscription gets ``invalid options``)."""
    mt = (step.option("MessageType") or "json").strip()
    try:
        ok = host.bodies.codec(mt).capabilities.select
    except MessageTypeConfigError:
        return  # (an unknown type: the config reader says so)
    if not ok:
        raise ConfigError([ConfigIssue(step.file, line, f"{step.module}: invalid <Options>: "
                                                        f"{mt} messages do not support select lists")])
