"""Frames of the emulator replication link, the handshake and its checks.

Every frame is an AMPS frame (``protocol.codec``: 4-byte big-endian length, a flat JSON header,
the body). Header ``c`` says what it is:

==============  ===========================================================================
``c``           header fields (body)
==============  ===========================================================================
``repl_hello``  ``v`` protocol version, ``name``, ``group``, ``hw`` {publisher id: last
                sequence} (as strings), ``facts`` the validation facts (see :class:`Hello`),
                ``aci`` (connecting side only) the Destination's AckConflationInterval
``repl_refuse`` ``reason``: the link is refused; the side that decided logs it too
``repl_rec``    ``pos`` upstream position, ``k`` kind, ``t`` topic, ``mt`` message type,
                ``pid``/``seq`` the bookmark, ``s`` client sequence, ``cn`` client name,
                ``ts`` origin time (us), ``e`` expiration, ``x`` sow key, ``cid``
                correlation id, ``path`` instance names so far, ``ug`` the sender's Group,
                ``h`` the record's other headers as JSON (a sow_delete's filter or keys)
                (body: the message)
``repl_ack``    ``pos``: every record up to this upstream position is applied downstream
``repl_qreq``   (downstream to upstream) ``q`` queue, ``bm`` comma list of bookmarks: a
                transfer request, asking the upstream, which owns those messages of a
                replicated queue, to give them to the downstream (answered, if granted, by
                a journaled transfer record that replicates like any record)
==============  ===========================================================================

A real AMPS (or anything else) that connects sends something that is not a ``repl_hello`` of
this version: :func:`classify_first_frame` names it, the listener logs one line and closes.
"""

from __future__ import annotations

from typing import Any

import msgspec

from amps_emulator.protocol.codec import ProtocolError, frame, split_frame

PROTOCOL_VERSION = "emu-repl/1"


class NotAnEmulator(Exception):
    """The peer on the replication port is not an emulator speaking this protocol."""


class LinkRefused(Exception):
    """The handshake failed; ``reason`` is what both sides log."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class TopicFacts(msgspec.Struct, frozen=True):
    """What one side says about a topic, for the validation checks."""

    txlog: bool  # recorded in the transaction log
    sow_keys: tuple[str, ...] | None  # SOW Key list (None: no SOW topic)
    queue: str | None  # "queue" / "local" / "group_local" when it is a queue
    underlying: str | None  # the queue's underlying topic


class Hello(msgspec.Struct, frozen=True):
    """One side's handshake: who it is, what it holds, what its topics are."""

    name: str
    group: str
    hw: dict[int, int]  # publisher id -> last sequence held
    facts: dict[str, TopicFacts] = {}  # "topic\x00message type" -> facts
    version: str = PROTOCOL_VERSION
    #: the connecting side's AckConflationInterval for this link (seconds; None: once a turn)
    ack_interval: float | None = None

    def encode(self) -> bytes:
        h: dict[str, Any] = {"c": "repl_hello", "v": self.version, "name": self.name, "group": self.group,
                             "hw": msgspec.json.encode({str(k): v for k, v in self.hw.items()}).decode(),
                             "facts": msgspec.json.encode(self.facts).decode()}
        if self.ack_interval is not None:
            h["aci"] = self.ack_interval
        return frame(h)

    @classmethod
    def from_header(cls, h: dict[str, Any]) -> Hello:
        try:
            hw = {int(k): int(v) for k, v in msgspec.json.decode(h.get("hw") or "{}").items()}
            facts = msgspec.json.decode(h.get("facts") or "{}", type=dict[str, TopicFacts])
            aci = h.get("aci")
            return cls(name=str(h["name"]), group=str(h["group"]), hw=hw, facts=facts, version=str(h["v"]),
                       ack_interval=None if aci is None else float(aci))
        except (KeyError, ValueError, TypeError, AttributeError, msgspec.DecodeError) as exc:
            raise NotAnEmulator(f"malformed replication hello: {exc}") from None


def fact_key(topic: str, message_type: str) -> str:
    return f"{topic}\x00{message_type}"


def classify_first_frame(payload: bytes) -> Hello:
    """The peer's hello, or :class:`NotAnEmulator` saying what arrived instead."""
    try:
        header, _ = split_frame(payload)
    except ProtocolError as exc:
        raise NotAnEmulator(f"not an emulator replication peer ({exc}); AMPS replication is "
                            "proprietary and only emulator instances replicate with each other") from None
    if header.get("c") != "repl_hello":
        raise NotAnEmulator(f"not an emulator replication peer (first command {header.get('c')!r}); "
                            "AMPS replication is proprietary and only emulator instances replicate "
                            "with each other")
    hello = Hello.from_header(header)
    if hello.version != PROTOCOL_VERSION:
        raise NotAnEmulator(f"replication protocol {hello.version!r} is not {PROTOCOL_VERSION!r}")
    return hello


def refuse_frame(reason: str) -> bytes:
    return frame({"c": "repl_refuse", "reason": reason})


def transfer_request_frame(queue: str, bookmarks: list[str]) -> bytes:
    return frame({"c": "repl_qreq", "q": queue, "bm": ",".join(bookmarks)})


def transfer_request(h: dict[str, Any]) -> tuple[str, list[str]]:
    """The queue and bookmarks of a ``repl_qreq`` header."""
    try:
        return str(h["q"]), [b for b in str(h["bm"]).split(",") if b]
    except KeyError as exc:
        raise ProtocolError(f"malformed transfer request: no {exc}") from None


def check_peer(local: Hello, remote: Hello, *, expected_group: str | None, expected_name: str | None,
               checks: dict[str, frozenset[str]]) -> None:
    """Raise :class:`LinkRefused` when the link must not be made.

    ``expected_group``/``expected_name``: what this side's Destination names (None on the
    accepting side). ``checks``: per fact key, the validation checks this side's Destination
    Topic keeps (``txlog``, ``sow``, ``keys``, ``queue``, ``queue_underlying``)."""
    if remote.name == local.name:
        raise LinkRefused(f"peer instance has this instance's own Name {local.name!r}")
    if expected_group is not None and remote.group != expected_group:
        raise LinkRefused(f"peer {remote.name!r} is in Group {remote.group!r}, the Destination "
                          f"names Group {expected_group!r}")
    if expected_name is not None and expected_name != expected_group and remote.name != expected_name:
        raise LinkRefused(f"peer is {remote.name!r}, the Destination names {expected_name!r}")
    for key, keep in sorted(checks.items()):
        mine = local.facts.get(key)
        theirs = remote.facts.get(key)
        topic = key.split("\x00", 1)[0]
        if mine is None:
            continue
        if "txlog" in keep and (theirs is None or not theirs.txlog):
            raise LinkRefused(f"validation txlog: topic {topic!r} is not recorded on {remote.name!r}")
        if theirs is None:
            continue
        if "sow" in keep and mine.sow_keys is not None and theirs.sow_keys is None:
            raise LinkRefused(f"validation sow: topic {topic!r} has a SOW here but not on {remote.name!r}")
        if "keys" in keep and mine.sow_keys is not None and theirs.sow_keys is not None \
                and mine.sow_keys != theirs.sow_keys:
            raise LinkRefused(f"validation keys: topic {topic!r} has Keys {list(mine.sow_keys)} here, "
                              f"{list(theirs.sow_keys)} on {remote.name!r}")
        if mine.queue is not None and theirs.queue != mine.queue:
            raise LinkRefused(f"validation queue: {topic!r} is a {mine.queue} queue here, "
                              f"{theirs.queue or 'not a queue'} on {remote.name!r}")
        if mine.queue is not None and theirs.underlying != mine.underlying:
            raise LinkRefused(f"validation queue_underlying: queue {topic!r} reads {mine.underlying!r} "
                              f"here, {theirs.underlying!r} on {remote.name!r}")


__all__ = ["PROTOCOL_VERSION", "Hello", "LinkRefused", "NotAnEmulator", "TopicFacts", "check_peer",
           "classify_first_frame", "fact_key", "refuse_frame", "transfer_request", "transfer_request_frame"]
