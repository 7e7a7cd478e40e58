"""The ``/AMPS/`` event topics: ``/AMPS/ClientStatus`` and ``/AMPS/SOWStats``.

AMPS publishes its own events to topics under ``/AMPS/`` (User Guide, "Event Topics"), and a
subscriber receives them as messages of its connection's type: a json connection gets JSON, a
fix connection FIX. Inside the server a topic is (type, name), so an event is published once
per message type that someone reads it in: to ``/AMPS/ClientStatus`` of json for the json
subscribers, of fix for the fix ones, each body written by that type's codec with that type's
field names (JSON, BSON, MessagePack: ``client_name`` under a ``ClientStatus`` object; XML:
``<ClientStatus><ClientName>``; FIX: numeric tags, ``20067``). The types that cannot carry
arbitrary fields (binary, composite, protobuf, struct: ``Capabilities.amps_topics``) get
nothing. Events go through the message path like any publish, so content filters work on
them and a SOW topic configured for ``/AMPS/SOWStats`` keeps the latest per key.

* ``/AMPS/ClientStatus``: a logon, each subscription entered (``subscribe``,
  ``sow_and_subscribe``, the delta forms) or removed (``unsubscribe``), each ``sow`` query and
  ``sow_delete``; at a disconnect, one ``unsubscribe`` per subscription the client still had,
  then the ``disconnect``.
* ``/AMPS/SOWStats``: every ``SOWStatsInterval``, one message per SOW topic: its message type,
  name, record count and the time. In a fix type whose ``AMPSVersionCompliance`` is 5, the
  topic and the record count have the tags unified with ``/AMPS/ClientStatus`` (20068, 20075)
  rather than AMPS 4.X's (20066, 20067).

NVFIX and BFlat bodies carry the JSON field names, flat (the User Guide lists the names of
FIX, XML and JSON only) [unverified].
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from amps_emulator.protocol.bookmarks import format_timestamp
from amps_emulator.protocol.msgtypes import (
    BflatCodec,
    CodecError,
    FixCodec,
    MessageCodec,
    MessageTypeConfigError,
    NvfixCodec,
    XmlCodec,
)
from amps_emulator.protocol.topics import display_name, qualify
from amps_emulator.server.core.amps_names import connection_name
from amps_emulator.server.core.ports import ServiceHost, Timer

if TYPE_CHECKING:
    from amps_emulator.protocol.command import Command
    from amps_emulator.server.core.ports import Client, SowService
    from amps_emulator.server.core.router import Subscription

__all__ = ["EventTopics", "CLIENT_STATUS", "SOW_STATS", "CLIENT_STATUS_FIELDS", "SOW_STATS_FIELDS",
           "SOW_STATS_UNIFIED_FIELDS"]

log = logging.getLogger("amps_emulator.events")

CLIENT_STATUS = "/AMPS/ClientStatus"
SOW_STATS = "/AMPS/SOWStats"

#: the field names of each event, as (JSON/BSON/MsgPack, XML, FIX tag)
CLIENT_STATUS_FIELDS: dict[str, tuple[str, str]] = {
    "reason": ("Reason", "20062"),
    "timestamp": ("Timestamp", "20065"),
    "event": ("Event", "20066"),
    "client_name": ("ClientName", "20067"),
    "topic": ("Tpc", "20068"),
    "filter": ("Filter", "20069"),
    "sub_id": ("SubId", "20070"),
    "connection_name": ("ConnName", "20071"),
    "options": ("Options", "20072"),
    "query_id": ("QId", "20073"),
    "correlation_id": ("CorrelationID", "20074"),
    "client_address": ("ClientAddr", "20080"),
    "auth_id": ("AuthId", "20081"),
    "entitlement_filter": ("EntitlementFilter", "20082"),
}
SOW_STATS_FIELDS: dict[str, tuple[str, str]] = {
    "message_type": ("MessageType", "20007"),
    "timestamp": ("Timestamp", "20065"),
    "topic": ("Topic", "20066"),
    "record_count": ("Records", "20067"),
}
#: ``/AMPS/SOWStats`` in a fix type whose ``AMPSVersionCompliance`` is 5: the tags unified with
#: those of ``/AMPS/ClientStatus`` (the topic is 20068 in both)
SOW_STATS_UNIFIED_FIELDS: dict[str, tuple[str, str]] = {
    **SOW_STATS_FIELDS, "topic": ("Topic", "20068"), "record_count": ("Records", "20075")}

#: the commands that are a client status event once they succeeded
SUBSCRIBING = frozenset({"subscribe", "delta_subscribe", "sow_and_subscribe",
                         "sow_and_delta_subscribe"})
_EVENT_COMMANDS = SUBSCRIBING | {"sow", "sow_delete", "unsubscribe", "logon"}


class EventsHost(ServiceHost, Protocol):
    """What the event topics read of the broker (here, not in ``ports``: it names the SOW
    service)."""

    sow_service: SowService | None


def event_body(codec: MessageCodec, root: str, names: dict[str, tuple[str, str]],
               fields: dict[str, Any]) -> bytes:
    """One event written by ``codec`` with the names its type uses (``root``: the object
    the JSON-like and XML forms nest the fields in). Raises ``CodecError``."""
    if isinstance(codec, FixCodec):  # (the forms without a NULL leave absent fields out)
        return codec.encode({names[k][1]: v for k, v in fields.items() if v is not None})
    if isinstance(codec, XmlCodec):
        return codec.encode({root: {names[k][0]: v for k, v in fields.items() if v is not None}})
    if isinstance(codec, (NvfixCodec, BflatCodec)):
        return codec.encode({k: v for k, v in fields.items() if v is not None})
    return codec.encode({root: dict(fields)})


class EventTopics:
    """Publishes the ``/AMPS/`` events of one server (see the module docstring).

    ``publish(topic_key, body)``: the message path (``publish.publish_message``, passed in by
    the root). ``interval``: ``SOWStatsInterval`` in seconds (None: no SOW statistics)."""

    def __init__(self, broker: EventsHost, publish: Callable[[str, bytes], object],
                 interval: float | None = None) -> None:
        self.broker = broker
        self._publish = publish
        self.interval = interval
        self._timer: Timer | None = None
        self._types: list[tuple[str, MessageCodec]] | None = None

    # -- which types read the events ----------------------------------------------------------
    def _carriers(self) -> list[tuple[str, MessageCodec]]:
        """The message types an event can be written in (built on first use)."""
        if self._types is None:
            registry = self.broker.bodies.registry
            out = []
            for name in registry.names():
                try:
                    codec = registry.codec(name)
                except MessageTypeConfigError:  # (bson without pymongo: nobody uses it)
                    continue
                if codec.capabilities.amps_topics:
                    out.append((name, codec))
            self._types = out
        return self._types

    def _readers(self, topic: str) -> list[tuple[str, MessageCodec]]:
        """The types that someone reads ``topic`` in: a subscription or a SOW topic (a
        message nobody reads is not built; one that is built is recorded as any publish)."""
        server = self.broker
        sow = server.sow_service
        out = []
        for name, codec in self._carriers():
            key = qualify(topic, name)
            if server.router.match(key) or (sow is not None and sow.get(key, create=False)):
                out.append((name, codec))
        return out

    def _emit(self, topic: str, root: str, names: dict[str, tuple[str, str]],
              fields: dict[str, Any], unified: dict[str, tuple[str, str]] | None = None) -> None:
        """``unified``: the names a fix type with ``AMPSVersionCompliance`` 5 writes."""
        for name, codec in self._readers(topic):
            written = names
            if unified is not None and isinstance(codec, FixCodec) and codec.version_compliance >= 5:
                written = unified
            try:
                body = event_body(codec, root, written, fields)
            except CodecError as exc:  # a value this type cannot hold: the others still get it
                log.debug("%s as %s: %s", topic, name, exc)
                continue
            try:
                self._publish(qualify(topic, name), body)
            except Exception:  # an event must never fail what caused it
                log.exception("publishing %s as %s failed", topic, name)

    # -- /AMPS/ClientStatus -----------------------------------------------------------------
    def _now(self) -> str:
        return format_timestamp(int(self.broker.wallclock() * 1_000_000))

    def _client_fields(self, client: Client, event: str) -> dict[str, Any]:
        session = client.session
        return {
            "timestamp": self._now(), "event": event, "client_name": client.client_name,
            "connection_name": connection_name(self.broker.instance_name, client),
            "client_address": client.peer,
            "auth_id": session.user_id if session is not None else client.user_id,
        }

    def unsubscribing(self, client: Client, cmd: Command) -> list[Subscription]:
        """Before ``cmd`` runs: the subscriptions an ``unsubscribe`` removes (its event names
        each of them; ids it does not know, such as finished queries, make no event)."""
        if cmd.command != "unsubscribe" or not client.logged_on:
            return []
        ids = [i.strip() for i in (cmd.sub_id or "").split(",")]
        subs = client.subs
        return list(subs.values()) if "all" in ids else [subs[i] for i in ids if i in subs]

    def command(self, client: Client, cmd: Command, removed: Iterable[Subscription] = ()) -> None:
        """``cmd`` of ``client`` succeeded: its client status event, if it is one
        (``removed``: what :meth:`unsubscribing` found before an ``unsubscribe`` ran)."""
        what = cmd.command
        if what not in _EVENT_COMMANDS or not client.logged_on or not self._readers(CLIENT_STATUS):
            return
        if what == "unsubscribe":
            for sub in removed:
                fields = self._client_fields(client, what)
                fields.update(correlation_id=cmd.correlation_id, topic=display_name(sub.topic),
                              sub_id=sub.sub_id)
                self._emit(CLIENT_STATUS, "ClientStatus", CLIENT_STATUS_FIELDS, fields)
            return
        fields = self._client_fields(client, what)
        if what != "logon":
            fields.update(correlation_id=cmd.correlation_id,
                          topic=display_name(cmd.topic) if cmd.topic else None,
                          filter=cmd.filter, options=cmd.options, sub_id=cmd.sub_id)
            if what == "sow" or what.startswith("sow_and"):
                fields["query_id"] = cmd.query_id
        self._emit(CLIENT_STATUS, "ClientStatus", CLIENT_STATUS_FIELDS, fields)

    def disconnected(self, client: Client, subs: Iterable[Subscription]) -> None:
        """``client`` is gone: an ``unsubscribe`` per subscription it had, then ``disconnect``."""
        if not client.logged_on or not self._readers(CLIENT_STATUS):
            return
        for sub in subs:
            fields = self._client_fields(client, "unsubscribe")
            fields.update(topic=display_name(sub.topic), sub_id=sub.sub_id)
            self._emit(CLIENT_STATUS, "ClientStatus", CLIENT_STATUS_FIELDS, fields)
        self._emit(CLIENT_STATUS, "ClientStatus", CLIENT_STATUS_FIELDS,
                   self._client_fields(client, "disconnect"))

    # -- /AMPS/SOWStats --------------------------------------------------------------------
    def start(self) -> None:
        """Publish the SOW statistics every :attr:`interval` from now on (if configured)."""
        if self.interval is not None and self._timer is None:
            self._timer = self.broker.call_later(self.interval, self._tick)

    def _tick(self) -> None:
        self._timer = self.broker.call_later(self.interval or 0.0, self._tick)
        try:
            self.sow_stats()
        except Exception:  # keep the timer whatever one round hit
            log.exception("publishing %s failed", SOW_STATS)
        self.broker.turn.request()

    def sow_stats(self) -> None:
        """One ``/AMPS/SOWStats`` message per SOW topic, now."""
        sow = self.broker.sow_service
        if sow is None or not self._readers(SOW_STATS):
            return
        now = self._now()
        for key, topic in sow.sow.topics.items():
            if display_name(key) == SOW_STATS:
                continue  # the statistics' own store
            self._emit(SOW_STATS, "SOWStats", SOW_STATS_FIELDS, {
                "message_type": topic.spec.message_type, "topic": display_name(key),
                "record_count": topic.count(), "timestamp": now}, SOW_STATS_UNIFIED_FIELDS)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
