"""Frames of the emulator replication link, the handshake and its checks.

Every frame is an AMPS frame (``protocol.codec``: 4-byte big-endian length, a flat JSON header,
the body). Header ``c`` says what it is:

==============  ===========================================================================
``c``           header fields (body)
==============  ===========================================================================
``repl_hello``  ``v`` protocol version, ``name``, ``group``, ``hw`` {publisher id: last
                sequence} (as strings), ``facts`` the validation facts, ``txlog`` the
                recorded topics, ``routes`` the Destinations (see :class:`Hello`), ``aci``
                (connecting side only) the Destination's AckConflationInterval; ``z`` the
                compression codecs it decodes (``replication.compression``); connecting
                side only: ``user`` and ``pw``, the logon (:class:`Logon`) its Authenticator
                gives, checked before anything is answered
``repl_refuse`` ``reason``: the link is refused; the side that decided logs it too
``repl_rec``    ``pos`` upstream position, ``k`` kind, ``t`` topic, ``mt`` message type,
                ``pid``/``seq`` the bookmark, ``s`` client sequence, ``cn`` client name,
                ``ts`` origin time (us), ``e`` expiration, ``x`` sow key, ``cid``
                correlation id, ``path`` instance names so far, ``ug`` the sender's Group,
                ``sv`` what the sender had received before it, per instance (JSON
                {name: bookmark}, ``""`` for the receiver; see ``journal.failover``),
                ``h`` the record's other headers as JSON (a sow_delete's filter or keys)
                (body: the message)
``repl_batch``  ``via`` the sender's Name, ``ug`` its Group, ``sv`` (as in ``repl_rec``) for
                every record of the batch (body: a MessagePack array of parts, :mod:`.batch`:
                ``[1, topic, message type, client name, publisher id, log time, last
                position, [sequences], [s] or nil, [bodies]]`` a client's run of publishes
                logged at once; ``[2, [records]]`` records as the sender logged them, each a
                map of the fields of ``journal.record.JournalRecord``: ``position`` is the
                upstream position; the origin time is the record's ``x-emu-repl-origin-ts``
                header, else its ``timestamp``; its path is its ``x-emu-repl-path`` header,
                then ``via``). What a link streams: a frame per run of records sharing their
                ``sv``, no ack awaited before the next
``repl_ack``    ``pos``: every record up to this upstream position is applied downstream
``repl_qreq``   (downstream to upstream) ``q`` queue, ``bm`` comma list of bookmarks: a
                transfer request, asking the upstream, which owns those messages of a
                replicated queue, to give them to the downstream (answered, if granted, by
                a journaled transfer record that replicates like any record)
``repl_z``      ``z`` a codec: every byte the sender writes after this frame is compressed
                with it (``replication.compression``)
``repl_boot``   ``n``: a bootstrap source sent all ``n`` records it had (the hello asked for a
                ``bootstrap``: SOW records no longer in its log, then its log, as ``repl_rec``)
==============  ===========================================================================

Version 2 (``emu-repl/2``) added ``repl_batch``; an instance of version 1 is refused at the
handshake (its version is named).

A real AMPS (or anything else) that connects sends something that is not a ``repl_hello`` of
this version: :func:`classify_first_frame` names it, the listener logs one line and closes.

The connecting side's hello is its logon: the listener authenticates its ``user``/``pw`` with the
replication transport's Authentication and Entitlement before it answers (its own hello, or a
``repl_refuse``) or reads another frame.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, NamedTuple

import msgspec

from amps_emulator.config.model import topic_matches
from amps_emulator.config.values import is_regex
from amps_emulator.protocol.codec import ProtocolError, frame, split_frame
from amps_emulator.replication.compression import CODECS

if TYPE_CHECKING:
    from amps_emulator.config.model import Destination

PROTOCOL_VERSION = "emu-repl/2"


class NotAnEmulator(Exception):
    """The peer on the replication port is not an emulator speaking this protocol."""


class LinkRefused(Exception):
    """The handshake failed; ``reason`` is what both sides log."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Logon(NamedTuple):
    """The credentials a connecting instance's hello carries (its Authenticator's)."""

    user: str = ""
    password: str | None = None

    def __repr__(self) -> str:  # never the password
        return f"Logon(user={self.user!r})"


class TopicFacts(msgspec.Struct, frozen=True):
    """What one side says about a topic, for the validation checks."""

    txlog: bool  # recorded in the transaction log
    sow_keys: tuple[str, ...] | None  # SOW Key list (None: no SOW topic)
    queue: str | None  # "queue" / "local" / "group_local" when it is a queue
    underlying: str | None  # the queue's underlying topic


class RouteTopic(msgspec.Struct, frozen=True):
    """One ``Topic`` of a side's Destination: what it selects and the checks it keeps."""

    name: str  # literal or regex
    message_type: str
    filter: str | None = None
    validations: tuple[str, ...] = ()


class Route(msgspec.Struct, frozen=True):
    """One of a side's Destinations, for the ``replicate``, ``replicate_filter``, ``cascade``
    and ``queue_passthrough`` checks of the other side."""

    name: str
    group: str
    topics: tuple[RouteTopic, ...]
    pass_through: str | None = None

    def selects(self, topic: str, message_type: str) -> RouteTopic | None:
        """The Topic selecting this topic: a literal name before any regex (as Destination)."""
        hits = [t for t in self.topics if t.message_type == message_type and topic_matches(t.name, topic)]
        return next((t for t in hits if not is_regex(t.name)), hits[0] if hits else None)

    def passes(self, group: str) -> bool:
        return self.pass_through is not None and re.search(self.pass_through, group) is not None


class BootstrapAsk(msgspec.Struct, frozen=True):
    """What an instance that bootstraps asks its source for (``Bootstrap``): the topics, and
    whether the SOW contents, the transaction log, or both."""

    topics: tuple[tuple[str, str], ...]  # (name or regex, message type)
    data_types: tuple[str, ...] = ("sow", "txlog")

    def selects(self, topic: str, message_type: str) -> bool:
        return any(mt == message_type and topic_matches(name, topic) for name, mt in self.topics)


class Hello(msgspec.Struct, frozen=True):
    """One side's handshake: who it is, what it holds, what its topics are, where it
    replicates them."""

    name: str
    group: str
    hw: dict[int, int]  # publisher id -> last sequence held
    facts: dict[str, TopicFacts] = {}  # "topic\x00message type" -> facts
    txlog: tuple[tuple[str, str], ...] = ()  # TransactionLog Topics: (name or regex, message type)
    routes: tuple[Route, ...] = ()  # its Replication Destinations
    #: set when this side connects to bootstrap from the other (not to replicate)
    bootstrap: BootstrapAsk | None = None
    version: str = PROTOCOL_VERSION
    #: the connecting side's AckConflationInterval for this link (seconds; None: once a turn)
    ack_interval: float | None = None
    #: the compression codecs this side decodes (a peer from before compression lists none)
    codecs: tuple[str, ...] = CODECS

    def encode(self, logon: Logon | None = None) -> bytes:
        """The ``repl_hello`` frame; ``logon``: the connecting side's credentials."""
        h: dict[str, Any] = {"c": "repl_hello", "v": self.version, "name": self.name, "group": self.group,
                             "hw": msgspec.json.encode({str(k): v for k, v in self.hw.items()}).decode(),
                             "facts": msgspec.json.encode(self.facts).decode(),
                             "txlog": msgspec.json.encode(self.txlog).decode(),
                             "routes": msgspec.json.encode(self.routes).decode()}
        if self.bootstrap is not None:
            h["bootstrap"] = msgspec.json.encode(self.bootstrap).decode()
        if self.ack_interval is not None:
            h["aci"] = self.ack_interval
        if self.codecs:
            h["z"] = ",".join(self.codecs)
        if logon is not None:
            h["user"] = logon.user
            if logon.password is not None:
                h["pw"] = logon.password
        return frame(h)

    @classmethod
    def from_header(cls, h: dict[str, Any]) -> Hello:
        try:
            hw = {int(k): int(v) for k, v in msgspec.json.decode(h.get("hw") or "{}").items()}
            facts = msgspec.json.decode(h.get("facts") or "{}", type=dict[str, TopicFacts])
            txlog = msgspec.json.decode(h.get("txlog") or "[]", type=tuple[tuple[str, str], ...])
            routes = msgspec.json.decode(h.get("routes") or "[]", type=tuple[Route, ...])
            boot = msgspec.json.decode(h["bootstrap"], type=BootstrapAsk) if h.get("bootstrap") else None
            aci = h.get("aci")
            return cls(name=str(h["name"]), group=str(h["group"]), hw=hw, facts=facts, txlog=txlog,
                       routes=routes, bootstrap=boot, version=str(h["v"]),
                       ack_interval=None if aci is None else float(aci),
                       codecs=tuple(c for c in str(h.get("z") or "").split(",") if c))
        except (KeyError, ValueError, TypeError, AttributeError, msgspec.DecodeError) as exc:
            raise NotAnEmulator(f"malformed replication hello: {exc}") from None

    def records(self, topic: str, message_type: str) -> bool:
        """Whether this side's transaction log records the topic."""
        fact = self.facts.get(fact_key(topic, message_type))
        if fact is not None and fact.txlog:
            return True
        return any(mt == message_type and topic_matches(name, topic) for name, mt in self.txlog)


def fact_key(topic: str, message_type: str) -> str:
    return f"{topic}\x00{message_type}"


def classify_first_frame(payload: bytes) -> Hello:
    """The peer's hello, or :class:`NotAnEmulator` saying what arrived instead."""
    return classify_hello(payload)[0]


def classify_hello(payload: bytes) -> tuple[Hello, Logon]:
    """The peer's hello and the logon it carries (empty: none), or :class:`NotAnEmulator`."""
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
    pw = header.get("pw")
    return hello, Logon(str(header.get("user") or ""), None if pw is None else str(pw))


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


def destination_checks(dest: Destination, local: Hello
                       ) -> tuple[dict[str, frozenset[str]], dict[str, str | None]]:
    """Per topic ``dest`` selects, the validation checks and the Filter it keeps (what
    :func:`check_peer` takes)."""
    keep: dict[str, frozenset[str]] = {}
    filters: dict[str, str | None] = {}
    for key in local.facts:
        topic, mtype = key.split("\x00", 1)
        selected = dest.selects(topic, mtype)
        if selected is not None:
            keep[key] = selected.validations
            filters[key] = selected.filter
    return keep, filters


def check_peer(local: Hello, remote: Hello, *, expected_group: str | None, expected_name: str | None,
               checks: dict[str, frozenset[str]], filters: dict[str, str | None] | None = None) -> None:
    """Raise :class:`LinkRefused` when the link must not be made.

    ``expected_group``/``expected_name``: what this side's Destination names (None on the
    accepting side). ``checks``: per fact key, the validation checks this side's Destination
    Topic keeps for it (docs/design/replication.md 1.4: ``txlog``, ``replicate``, ``sow``, ``keys``,
    ``cascade``, ``replicate_filter``, ``queue``, ``queue_underlying``, ``queue_passthrough``);
    ``filters``: per fact key, the Filter that Topic applies (None: none)."""
    if remote.name == local.name:
        raise LinkRefused(f"peer instance has this instance's own Name {local.name!r}")
    if expected_group is not None and remote.group != expected_group:
        raise LinkRefused(f"peer {remote.name!r} is in Group {remote.group!r}, the Destination "
                          f"names Group {expected_group!r}")
    if expected_name is not None and expected_name != expected_group and remote.name != expected_name:
        raise LinkRefused(f"peer is {remote.name!r}, the Destination names {expected_name!r}")
    for key, keep in sorted(checks.items()):
        mine = local.facts.get(key)
        if mine is None:
            continue
        topic, mtype = key.split("\x00", 1)
        _check_topic(local, remote, topic, mtype, mine, remote.facts.get(key), keep,
                     (filters or {}).get(key))


def _check_topic(local: Hello, remote: Hello, topic: str, mtype: str, mine: TopicFacts,
                 theirs: TopicFacts | None, keep: frozenset[str], my_filter: str | None) -> None:
    peer = repr(remote.name)
    if "txlog" in keep and not remote.records(topic, mtype):
        raise LinkRefused(f"validation txlog: topic {topic!r} is not recorded on {peer}")
    their_keys = theirs.sow_keys if theirs is not None else None
    if "sow" in keep and mine.sow_keys is not None and their_keys is None:
        raise LinkRefused(f"validation sow: topic {topic!r} has a SOW here but not on {peer}")
    if "keys" in keep and mine.sow_keys is not None and their_keys is not None \
            and mine.sow_keys != their_keys:
        raise LinkRefused(f"validation keys: topic {topic!r} has Keys {list(mine.sow_keys)} here, "
                          f"{list(their_keys)} on {peer}")
    their_queue = theirs.queue if theirs is not None else None
    if mine.queue is not None and their_queue != mine.queue:
        raise LinkRefused(f"validation queue: {topic!r} is a {mine.queue} queue here, "
                          f"{their_queue or 'not a queue'} on {peer}")
    if mine.queue is not None and theirs is not None and theirs.underlying != mine.underlying:
        raise LinkRefused(f"validation queue_underlying: queue {topic!r} reads {mine.underlying!r} "
                          f"here, {theirs.underlying!r} on {peer}")
    onward = [(r, t) for r in remote.routes if (t := r.selects(topic, mtype)) is not None]
    back = [(r, t) for r, t in onward if r.group == local.group]
    if "replicate" in keep and not back:
        raise LinkRefused(f"validation replicate: {peer} does not replicate topic {topic!r} back to "
                          f"Group {local.group!r} (exclude the check for a one-way link)")
    if "replicate_filter" in keep and my_filter is not None and back and \
            all(t.filter != my_filter for _, t in back):
        raise LinkRefused(f"validation replicate_filter: topic {topic!r} replicates with Filter "
                          f"{my_filter!r} here, {peer} replicates it back with "
                          f"{back[0][1].filter!r}")
    if "cascade" in keep:
        wanted = keep - {"cascade"}
        for r, t in onward:
            missing = sorted(wanted - set(t.validations))
            if missing:
                raise LinkRefused(f"validation cascade: {peer} does not check {', '.join(missing)} "
                                  f"for topic {topic!r} on its Destination {r.name!r}")
    if "queue_passthrough" in keep and mine.queue is not None:
        for r, _ in onward:
            if not r.passes(local.group):
                raise LinkRefused(f"validation queue_passthrough: {peer} does not pass queue "
                                  f"{topic!r} from Group {local.group!r} through to {r.name!r}")


__all__ = ["PROTOCOL_VERSION", "BootstrapAsk", "Hello", "LinkRefused", "Logon", "NotAnEmulator", "Route",
           "RouteTopic", "TopicFacts", "check_peer", "classify_first_frame", "classify_hello",
           "destination_checks", "fact_key", "refuse_frame", "transfer_request", "transfer_request_frame"]
