"""Topic names that are regular expressions: which ones, and their bounded-cost matcher.

A subscription, query, action or queue may name a topic by a regular expression (PCRE-style,
matching anywhere in the name unless anchored, as AMPS does). These two functions are the
protocol's rule for that, shared by the server (routing, SOW, queues, actions) and by the
offline pipeline (journal readers), which must read a topic regex exactly as the server does.
"""

from __future__ import annotations

import re

from amps_emulator.protocol import reasons
from amps_emulator.protocol.reasons import CommandError
from amps_emulator.protocol.saferegex import SafePattern, compile_pattern

__all__ = ["compile_topic_regex", "is_regex_topic"]

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
