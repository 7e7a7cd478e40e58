"""Topic names that are regular expressions: which ones, and their bounded-cost matcher.

A subscription, query, action or queue may name a topic by a regular expression (PCRE-style,
matching anywhere in the name unless anchored, as AMPS does). These two functions are the
protocol's rule for that, shared by the server (routing, SOW, queues, actions) and by the
offline pipeline (journal readers), which must read a topic regex exactly as the server does.
"""

from __future__ import annotations

import re
from typing import overload

from amps_emulator.protocol import reasons
from amps_emulator.protocol.reasons import CommandError
from amps_emulator.protocol.saferegex import SafePattern, compile_pattern

__all__ = ["compile_topic_regex", "is_regex_topic", "TYPE_SEP", "qualify", "split_topic",
           "display_name", "type_of", "TOPIC_COMMANDS", "valid_topic_name", "check_topic_name"]

#: AMPS identifies a topic by (message type, name): ``orders`` over json and ``orders`` over
#: fix are two topics. Inside the server a topic is one string, its *key*: the name itself for
#: json (so the JSON path is untouched), ``name + TYPE_SEP + type`` for any other type. The
#: separator is a control character no AMPS client puts in a topic name; the key never goes
#: on the wire (:func:`display_name` is what a header carries), and a topic name from the wire
#: holding a control character is refused (:func:`check_topic_name`), so that no client can
#: spell another type's key (``orders\x1fnvfix`` from a json client) past the entitlements,
#: which are checked on (type, name).
TYPE_SEP = "\x1f"

#: the commands whose ``topic`` names what they act on (an ``unsubscribe`` names none)
TOPIC_COMMANDS = frozenset({"publish", "delta_publish", "subscribe", "delta_subscribe", "sow",
                            "sow_and_subscribe", "sow_and_delta_subscribe", "sow_delete"})

_CONTROL = re.compile("[\x00-\x1f\x7f]")


def valid_topic_name(topic: str) -> bool:
    """Whether a topic name (or topic regex) from the wire is free of control characters
    (U+0000 to U+001F, U+007F)."""
    if topic.isascii():
        return topic.isprintable()  # (for ASCII: exactly no control character)
    return _CONTROL.search(topic) is None


def check_topic_name(topic: str) -> None:
    """Refuse a topic name from the wire that holds a control character: ``invalid topic``."""
    if not valid_topic_name(topic):
        raise CommandError(reasons.INVALID_TOPIC,
                           f"{topic!r}: a topic name may not hold control characters")


def qualify(name: str, message_type: str) -> str:
    """The key of topic ``name`` of ``message_type``."""
    return name if message_type == "json" else f"{name}{TYPE_SEP}{message_type}"


def split_topic(key: str) -> tuple[str, str]:
    """``(name, message type)`` of a topic key."""
    name, sep, mt = key.partition(TYPE_SEP)
    return (name, mt) if sep else (key, "json")


@overload
def display_name(key: str) -> str: ...
@overload
def display_name(key: None) -> None: ...
def display_name(key: str | None) -> str | None:
    """The topic name a client sees for a topic key (``None`` stays ``None``)."""
    if key is None or TYPE_SEP not in key:
        return key
    return key.partition(TYPE_SEP)[0]


def type_of(key: str) -> str:
    """The message type of a topic key."""
    return key.partition(TYPE_SEP)[2] if TYPE_SEP in key else "json"

# Characters whose presence makes a subscription topic a regular expression.
_REGEX_CHARS = frozenset(".*+?^$[](){}|\\")


def is_regex_topic(topic: str) -> bool:
    return any(ch in _REGEX_CHARS for ch in topic)


def compile_topic_regex(topic: str) -> SafePattern:
    """A topic regex (PCRE-style) whose matching cost is bounded (:mod:`protocol.saferegex`):
    a pathological topic pattern cannot stall the server."""
    try:
        return compile_pattern(topic)
    except (re.error, OverflowError, RecursionError) as exc:
        raise CommandError(reasons.BAD_REGEX_TOPIC, f"{topic!r}: {exc}") from None
