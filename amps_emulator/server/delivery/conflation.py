"""Conflated subscriptions: ``conflation=<interval>`` (and ``conflation_key=[...]``).

A conflated subscription does not get every message as it is published. The first message
for a conflation key starts that key's interval; until it ends, later messages with the same
key replace the retained one; at the end the latest goes out (for a delta subscription, the
merge of every delta of the interval). Messages are therefore not delivered strictly in
publish order. With the ``timestamp`` option the message carries the time of the first
message it conflated.

* ``conflation_key``: the fields whose values make a message unique; by default the SowKey
  (SOW topics). A topic that is not in the SOW needs the option.
* ``conflation=none`` (or absent): no conflation; ``auto``: a fixed interval of
  :data:`AUTO_INTERVAL` (AMPS tunes it to the client; the emulator does not).
* ``oof`` needs the default key (the topic's own): an out-of-focus message goes out at once,
  and drops what was retained for that record.
* Only the subscription is conflated: a ``sow_and_subscribe``'s query results are not.

Bad values fail the subscription with ``invalid options``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from amps_emulator.config.units import AUTO_CONFLATION, parse_conflation
from amps_emulator.protocol import reasons
from amps_emulator.protocol.bookmarks import format_timestamp
from amps_emulator.protocol.codec import frame_raw, json_str
from amps_emulator.protocol.filter.values import resolve
from amps_emulator.protocol.msgtypes import CodecError
from amps_emulator.protocol.reasons import CommandError
from amps_emulator.protocol.topics import display_name
from amps_emulator.server.core.message import UNDECODED
from amps_emulator.server.core.ports import ServiceHost
from amps_emulator.server.delivery.fanout import delivery_tail, selected
from amps_emulator.sow.delta import merge
from amps_emulator.sow.paths import PathError, parse_path

if TYPE_CHECKING:
    from amps_emulator.server.core.ports import SowService
    from amps_emulator.server.core.router import Subscription


class ConflationHost(ServiceHost, Protocol):
    """What a conflated subscription reads of the broker: its SOW service (whether the topic
    is a SOW topic, and its key)."""

    sow_service: SowService | None

__all__ = ["Conflation", "Conflator", "Held", "conflation_for", "parse_interval", "parse_keys",
           "AUTO_INTERVAL"]

AUTO_INTERVAL = AUTO_CONFLATION  # seconds, for conflation=auto
_encode = msgspec.json.encode


def parse_interval(text: str) -> float | None:
    """The seconds of ``conflation=<text>`` (None: ``none``); ``CommandError`` when bad."""
    try:
        return parse_conflation(text)
    except ValueError as exc:
        raise CommandError(reasons.INVALID_OPTIONS, f"conflation={text}: {exc}") from None


def parse_keys(text: str) -> tuple[tuple, ...]:
    """The field paths of ``conflation_key=[...]``; ``CommandError`` when bad."""
    t = text.strip()
    if t.startswith("[") and t.endswith("]"):
        t = t[1:-1]
    out = []
    for item in (i.strip() for i in t.split(",")):
        try:
            path = parse_path(item) if item else ()
        except PathError as exc:
            raise CommandError(reasons.INVALID_OPTIONS, f"conflation_key: {exc}") from None
        if not path:
            raise CommandError(reasons.INVALID_OPTIONS, f"conflation_key=[{text}]")
        out.append(path)
    return tuple(out)


def conflation_for(broker: ConflationHost, sub: Subscription) -> Conflator | None:
    """The subscription's conflator from its options (``None``: not conflated); raises
    ``CommandError(invalid options)`` for a bad combination."""
    opts = sub.options
    value = opts.get("conflation")
    if not isinstance(value, str):
        return None
    interval = parse_interval(value)
    if interval is None:
        return None
    key_text = opts.get("conflation_key")
    keys = parse_keys(key_text) if isinstance(key_text, str) else None
    sow = broker.sow_service
    topic = None if sub.regex is not None or sow is None else sow.get(sub.topic)
    if keys is not None and topic is not None and topic.spec.keys and \
            keys == tuple(parse_path(k) for k in topic.spec.keys):
        keys = None  # the topic's own key: the SowKey says the same
    if keys is None and topic is None and sub.regex is None:
        raise CommandError(reasons.INVALID_OPTIONS,
                           f"conflation on {sub.topic!r} (not a SOW topic) needs conflation_key")
    if keys is not None and "oof" in opts:
        raise CommandError(reasons.INVALID_OPTIONS,
                           "oof with conflation needs the topic's own key as conflation_key")
    return Conflator(broker, sub, interval, keys)


class Held:
    """What a conflation key retains: the latest message, when its interval ends, when the
    first message of the interval was processed (seconds) and, for a delta subscription,
    the merge of the interval's deltas."""

    __slots__ = ("deadline", "first_ts", "msg", "delta")

    def __init__(self, deadline: float, first_ts: float) -> None:
        self.deadline = deadline
        self.first_ts = first_ts
        self.msg: Any = None
        self.delta: Any = None  # merged delta document (delta subscriptions)


class Conflation:
    """The latest message of each conflation key (its ``keys`` fields' values, or its SowKey),
    retained from the key's first message for ``interval`` seconds of the server clock;
    :meth:`emit` gets it when the interval ends."""

    def __init__(self, broker: ConflationHost, interval: float,
                 keys: tuple[tuple, ...] | None) -> None:
        self.broker = broker
        self.interval = interval
        self.keys = keys
        self._held: dict[Any, Held] = {}
        self._timer: Any = None
        self._timer_at: float | None = None

    def _key(self, msg: Any) -> Any:
        if self.keys is None:
            return (msg.topic, msg.sow_key)
        doc = msg.doc if msg.doc is not UNDECODED else self.broker.bodies.decode(msg.body, msg.topic)
        return (msg.topic, _encode([resolve(doc, p) for p in self.keys]))

    def hold(self, msg: Any, delta_body: bytes | None) -> None:
        """Retain ``msg`` (``delta_body``: its delta, for a delta subscription)."""
        key = self._key(msg)
        held = self._held.get(key)
        if held is None:
            now = self.broker.clock()
            first = msg.timestamp  # when the first conflated publish was processed
            held = self._held[key] = Held(now + self.interval, self.broker.wallclock()
                                           if first is None else first / 1_000_000)
            self._arm(held.deadline)
        held.msg = msg
        if delta_body is not None:
            d = self.broker.bodies.decode(delta_body, msg.topic)
            held.delta = d if held.delta is None else merge(held.delta, d)
        else:
            held.delta = None

    def drop(self, topic: str, sow_key: str) -> None:
        """The record went out of focus: what was retained for it is not delivered."""
        if self.keys is None:
            self._held.pop((topic, sow_key), None)

    def _arm(self, at: float) -> None:
        if self._timer is not None and self._timer_at is not None and self._timer_at <= at:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = at
        self._timer = self.broker.call_later(max(0.0, at - self.broker.clock()), self._fire)

    def _fire(self) -> None:
        self._timer = self._timer_at = None
        if self.gone():
            self._held.clear()
            return
        now = self.broker.clock()
        due = [k for k, h in self._held.items() if h.deadline <= now]
        for k in due:
            self.emit(self._held.pop(k))
        if self._held:
            self._arm(min(h.deadline for h in self._held.values()))
        self.broker.turn.request()

    def gone(self) -> bool:
        """Whether what it conflates for went away (nothing more is emitted)."""
        return False

    def emit(self, held: Held) -> None:
        """The interval of ``held``'s key ended: its latest message goes on."""
        raise NotImplementedError

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = self._timer_at = None
        self._held.clear()


class Conflator(Conflation):
    """A client's conflated subscription: the latest message of a key goes to the client."""

    def __init__(self, broker: ConflationHost, sub: Subscription, interval: float,
                 keys: tuple[tuple, ...] | None) -> None:
        super().__init__(broker, interval, keys)
        self.sub = sub

    def gone(self) -> bool:
        return bool(self.sub.conn.closed)

    def emit(self, held: Held) -> None:
        msg, sub = held.msg, self.sub
        ts = format_timestamp(round(held.first_ts * 1_000_000)) \
            if "timestamp" in sub.options else None
        bodies = self.broker.bodies
        encode = bodies.encoder(msg.topic)
        body = msg.body
        if held.delta is not None:
            try:
                body = encode(held.delta)
            except CodecError:  # the type cannot write the merged delta: the whole message
                body = msg.body
        if sub.select is not None:
            body = selected(body, sub.select, bodies.decode(body, msg.topic), encode)
        head = b'{"c":"p","t":' + json_str(display_name(msg.topic)) + b',"sids":' + json_str(sub.sub_id)
        sub.conn.send(frame_raw(head + delivery_tail(msg.bookmark, msg.correlation_id,
                                                     msg.sow_key, msg.expiration, ts), body))
        watch = self.broker.delivered
        if watch is not None:
            watch(sub.conn, msg.topic, msg.body, msg.bookmark, msg.correlation_id)
