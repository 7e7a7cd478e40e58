"""A topic's delivery plan: what the fan-out works out once per set of subscriptions rather
than once per message.

Most subscriptions take every message they match as it is: no select list, no delta, no
``timestamp`` or ``oof`` option, no conflation, no entitlement, no paginated window or
aggregation. For those, what a message makes is fixed by which of their filters it passes:
one ``p`` frame per connection, whose ``sids`` lists that connection's subscriptions that
passed, in the order the router gives them. A :class:`Plan` keeps, for each outcome of the
filters seen so far, that list of (connection, encoded ``sids``), so a message costs one
evaluation per distinct filter (subscriptions with the same filter text share it) and one
frame per connection, built from the message's header, that ``sids`` and the body, and
sent, all in one call (:func:`fan_send`, compiled when built).

Every other subscription, and every subscription of a connection that has one of those (its
frames for a message keep the order the general path gives them), goes the general way
(:data:`Plan.general`). A plan is valid for the tuple of subscriptions it was made from
(``Router.match`` returns the same tuple until the subscriptions change) and for the
:attr:`Subscription.revision` it was made at (a subscription's live state or entitlement
set after it was routed moves it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from amps_emulator import accel
from amps_emulator.protocol.codec import frame_parts, json_str

if TYPE_CHECKING:
    from amps_emulator.server.core.router import Subscription

#: filter outcomes a plan keeps the targets of (more: it starts again)
MAX_OUTCOMES = 256

#: (the connection's ``send``, encoded ``sids``, the connection) of each connection a message
#: goes to
Targets = list[tuple[Callable[[bytes], None], bytes, Any]]


def plain(sub: Subscription) -> bool:
    """Whether ``sub`` takes each message it matches as it is (see the module docstring)."""
    opts = sub.options
    return (sub.select is None and not sub.delta and sub.conflator is None
            and sub.live is None and sub.entitlement is None
            and "timestamp" not in opts and "oof" not in opts)


class Plan:
    """The delivery plan of one set of subscriptions (see the module docstring)."""

    __slots__ = ("subs", "revision", "filters", "general", "_slots", "_targets")

    def __init__(self, subs: tuple[Subscription, ...], revision: int) -> None:
        self.subs = subs
        self.revision = revision
        complex_conns = {id(s.conn) for s in subs if not plain(s)}
        #: the subscriptions the general path delivers to, in the router's order
        self.general: tuple[Subscription, ...] = tuple(
            s for s in subs if id(s.conn) in complex_conns)
        filters: list[Any] = []
        index: dict[object, int] = {}
        slots: list[tuple[Any, str, int]] = []
        for sub in subs:
            if id(sub.conn) in complex_conns:
                continue
            f = sub.filter
            i = -1
            if f is not None:
                # the same text, the same answer (unless it reads the clock, UNIX_TIMESTAMP())
                text = getattr(f, "text", None)
                key: object = text if getattr(f, "deterministic", False) \
                    and isinstance(text, str) else sub
                i = index.get(key, -1)
                if i < 0:
                    i = index[key] = len(filters)
                    filters.append(f)
            slots.append((sub.conn, sub.sub_id, i))
        #: one filter per distinct filter text, evaluated once per message
        self.filters: tuple[Any, ...] = tuple(filters)
        self._slots = slots
        self._targets: dict[tuple[bool, ...], Targets] = {}

    def targets(self, passed: tuple[bool, ...] = ()) -> Targets:
        """(the connection's ``send``, encoded ``sids``, the connection) of each connection a
        message goes to, the outcome of :attr:`filters` being ``passed`` (see :func:`fan_send`)."""
        found = self._targets.get(passed)
        if found is None:
            found = self._build(passed)
            if len(self._targets) >= MAX_OUTCOMES:
                self._targets.clear()
            self._targets[passed] = found
        return found

    def _build(self, passed: Sequence[bool]) -> Targets:
        by_conn: dict[int, tuple[Any, list[str]]] = {}
        for conn, sub_id, i in self._slots:
            if i < 0 or passed[i]:
                entry = by_conn.get(id(conn))
                if entry is None:
                    by_conn[id(conn)] = (conn, [sub_id])
                else:
                    entry[1].append(sub_id)
        return [(conn.send, json_str(ids[0] if len(ids) == 1 else ",".join(ids)), conn)
                for conn, ids in by_conn.values()]


def fan_send_py(targets: Targets, head: bytes, tail: bytes, body: bytes) -> int:
    """Send each connection of ``targets`` its frame of a delivery: ``head``, its ``sids``,
    ``tail``, then ``body``; returns the bytes sent. The pure-Python twin of
    ``_speedups.fan_send``."""
    total = 0
    for send, sids, _ in targets:
        data = frame_parts(head, sids, tail, body)
        total += len(data)
        send(data)
    return total


if accel.COMPILED:
    from amps_emulator._speedups import fan_send
else:
    fan_send = fan_send_py
