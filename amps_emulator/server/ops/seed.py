"""Seed data: messages published at start-up, before the ready line (``--seed FILE``,
``--init-dir DIR``).

A seed file holds JSON lines, one message each::

    {"topic": "orders", "data": {"id": 1, "qty": 5}}
    {"topic": "orders", "data": "{\\"id\\":2}", "expiration": 60}
    {"topic": "prices", "type": "json", "data": {"sym": "IBM"}}

``topic`` (required) names the topic; ``data`` (required) is the body: a JSON object, array
or scalar is written as JSON, a string is the body text itself (for ``json`` it must parse as
JSON). ``type`` (optional, default ``json``, else the topic's SOW message type) must be a
message type the configuration declares, and the topic's own when it is a SOW topic; a body
of another type than ``json`` must be given as a string. ``expiration`` (optional) is the
message's SOW expiration in whole seconds, as the ``e`` header of a publish. Blank lines and
lines starting with ``#`` are skipped.

Every line is checked before anything is published, and start-up fails on the first bad one
with ``file:line: reason`` (:class:`SeedError`). The messages then go through the normal
publish path (transaction log, SOW, views, queues, on-publish actions), in file order, as a
client named :data:`SEED_CLIENT` would publish them.

An init directory (``--init-dir``, the image's ``/docker-entrypoint-init.d``) holds
``*.jsonl`` seed files, applied in name order, and at most one ``*.xml``: the configuration
used when none is given on the command line. Other files there are ignored with a warning.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import msgspec

from amps_emulator.protocol.reasons import CommandError

if TYPE_CHECKING:
    from amps_emulator.config import Config
    from amps_emulator.server.messaging.broker import Broker

log = logging.getLogger("amps_emulator.seed")

#: the client name seed messages are published (and journalled) under
SEED_CLIENT = "amps-emulator-seed"
_KEYS = frozenset({"topic", "data", "type", "expiration"})


class SeedError(Exception):
    """A seed line that cannot be published: ``file:line: reason``."""

    def __init__(self, file: str, line: int, reason: str) -> None:
        super().__init__(f"{file}:{line}: {reason}" if line else f"{file}: {reason}")
        self.file = file
        self.line = line
        self.reason = reason


@dataclass(frozen=True)
class SeedMessage:
    """One message of a seed file, checked: where it was written, and what to publish."""

    file: str
    line: int
    topic: str
    data: bytes
    type: str = "json"
    expiration: int | None = None


def _body(value: object, mtype: str, file: str, line: int) -> bytes:
    if isinstance(value, str):
        body = value.encode("utf-8")
        if mtype == "json":
            try:
                msgspec.json.decode(body)
            except msgspec.DecodeError as exc:
                raise SeedError(file, line, f"\"data\" is a string that is not JSON: {exc}") from None
        return body
    if mtype != "json":
        raise SeedError(file, line, f"\"data\" of type {mtype!r} must be a string (the body text)")
    return msgspec.json.encode(value)


def _topic_type(config: Config | None, topic: str) -> str | None:
    if config is None:
        return None
    sow = config.sow_topic(topic, "json") or config.sow_topic(topic)
    return None if sow is None else sow.message_type


def parse_seed_line(text: str, file: str, line: int, config: Config | None = None) -> SeedMessage | None:
    """One line of a seed file as a :class:`SeedMessage` (None: blank or comment); raises
    :class:`SeedError` naming ``file:line`` and what is wrong."""
    stripped = text.strip()
    if not stripped or stripped.startswith("#"):
        return None
    try:
        obj = msgspec.json.decode(stripped.encode("utf-8"))
    except msgspec.DecodeError as exc:
        raise SeedError(file, line, f"not a JSON line: {exc}") from None
    if not isinstance(obj, dict):
        raise SeedError(file, line, "want a JSON object {\"topic\": ..., \"data\": ...}")
    unknown = sorted(set(obj) - _KEYS)
    if unknown:
        raise SeedError(file, line, f"unknown field(s) {', '.join(map(repr, unknown))}; "
                                    "want topic, data, type, expiration")
    topic = obj.get("topic")
    if not isinstance(topic, str) or not topic:
        raise SeedError(file, line, "\"topic\" is required and must be a non-empty string")
    if "data" not in obj:
        raise SeedError(file, line, "\"data\" is required")
    sow_type = _topic_type(config, topic)
    mtype = obj.get("type", sow_type or "json")
    if not isinstance(mtype, str) or not mtype:
        raise SeedError(file, line, "\"type\" must be a message type name")
    if config is not None and mtype not in config.message_types:
        raise SeedError(file, line, f"message type {mtype!r} is not declared by the configuration")
    if sow_type is not None and mtype != sow_type:
        raise SeedError(file, line, f"topic {topic!r} is a SOW topic of message type {sow_type!r}, "
                                    f"not {mtype!r}")
    expiration = obj.get("expiration")
    if expiration is not None and (isinstance(expiration, bool) or not isinstance(expiration, int)
                                   or expiration < 0):
        raise SeedError(file, line, "\"expiration\" must be a whole number of seconds (0 or more)")
    return SeedMessage(file, line, topic, _body(obj["data"], mtype, file, line), mtype, expiration)


def read_seed(path: str, config: Config | None = None) -> list[SeedMessage]:
    """Every message of the seed file at ``path``, checked against ``config``."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise SeedError(path, 0, f"cannot read the seed file: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise SeedError(path, 0, f"not UTF-8 text: {exc}") from None
    out = []
    for number, text in enumerate(lines, 1):
        msg = parse_seed_line(text, path, number, config)
        if msg is not None:
            out.append(msg)
    return out


@dataclass
class InitDir:
    """What an init directory holds: its configuration (if any) and its seed files."""

    path: str
    config: str | None = None
    seeds: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)


def scan_init_dir(path: str) -> InitDir:
    """The ``*.xml`` configuration and the ``*.jsonl`` seeds (name order) of ``path``;
    raises :class:`SeedError` when it is not a readable directory or holds several
    configurations."""
    try:
        names = sorted(os.listdir(path))
    except OSError as exc:
        raise SeedError(path, 0, f"cannot read the init directory: {exc.strerror or exc}") from None
    found = InitDir(path)
    configs = []
    for name in names:
        full = os.path.join(path, name)
        if not os.path.isfile(full):
            found.ignored.append(name)
        elif name.endswith(".jsonl"):
            found.seeds.append(full)
        elif name.endswith(".xml"):
            configs.append(full)
        else:
            found.ignored.append(name)
    if len(configs) > 1:
        raise SeedError(path, 0, "more than one *.xml configuration in the init directory: "
                                 + ", ".join(os.path.basename(c) for c in configs))
    found.config = configs[0] if configs else None
    return found


def read_seeds(paths: Iterable[str], config: Config | None = None) -> list[SeedMessage]:
    """The messages of every seed file in ``paths``, in order."""
    out: list[SeedMessage] = []
    for path in paths:
        out.extend(read_seed(path, config))
    return out


def apply_seed(broker: Broker, messages: Sequence[SeedMessage]) -> int:
    """Publish ``messages`` through the normal publish path, in order; returns how many.
    A message the path refuses (e.g. a SOW topic without its key) is a :class:`SeedError`
    at its line; the messages before it stay published."""
    from amps_emulator.server.messaging.message_path import publish_message

    for msg in messages:
        topic = msg.topic
        if broker.queue_service is not None:
            topic = broker.queue_service.publish_target(topic)  # a queue's own name: its feed
        try:
            publish_message(broker, topic, msg.data, client_name=SEED_CLIENT,
                            expiration=msg.expiration)
        except CommandError as exc:
            raise SeedError(msg.file, msg.line, f"publish to {msg.topic!r} refused: {exc}") from None
    if messages:
        log.info("seeded %d message(s) from %d file(s)", len(messages),
                 len({m.file for m in messages}))
    return len(messages)
