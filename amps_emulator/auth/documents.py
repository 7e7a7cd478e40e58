"""Permission documents (the web-entitlements format, also used by ``file:`` ResourceURIs).

A document is a JSON object::

    {"logon": true,
     "replication-logon": false,
     "user_name": "alice",                      # optional: becomes the identity
     "password": "s3cret",                      # emulator only: checked against the logon
     "topic": [{"topic": "test", "read": "/priority = 1", "write": false, "select": "-/,+/id"},
               {"topic": ".*", "read": true, "write": true}],
     "admin": [{"topic": ".*", "read": true, "write": false}],
     "replicated-topics": [...]}

A permission entry has ``topic`` (a literal name, or a regular expression when it holds regex
characters), ``read`` and ``write`` (each ``true``, ``false`` or a filter string) and an optional
``select`` (a select list without brackets); a ``replicated-topics`` item may also be a bare
topic name or regex (everything granted). Entries are searched in document order and the first
whose topic matches decides; no match, or no list, is no access. Unknown keys are ignored.

:func:`parse_document` never raises anything but :class:`PermissionDocumentError`, which carries
the user and the reason, for one log line and a refused logon.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import msgspec

from amps_emulator.protocol.filter import FilterError, compile_filter
from amps_emulator.protocol.saferegex import SafePattern, compile_pattern

__all__ = ["PermissionDocument", "PermissionEntry", "PermissionDocumentError", "parse_document",
           "is_regex_topic", "check_select", "MAX_DOCUMENT_BYTES"]

#: characters that make an entry's topic a regular expression (as for subscriptions)
_REGEX_CHARS = frozenset(".*+?^$[](){}|\\")
#: the largest document accepted (a permission document is small; a huge one is a mistake)
MAX_DOCUMENT_BYTES = 4 * 1024 * 1024

# one select directive: + or -, then "/" (the root) or /field[/field...] -- the SOW's path syntax
# without array indexes (select lists do not take them)
_SELECT_ITEM = re.compile(r"[+-]/(?:@?\w(?:[\w.\-]*[\w.])?(?:/@?\w(?:[\w.\-]*[\w.])?)*)?")


def is_regex_topic(topic: str) -> bool:
    return any(ch in _REGEX_CHARS for ch in topic)


def check_select(text: str) -> str:
    """The select list text, normalised (``"-/, +/id"`` -> ``"-/,+/id"``); ``ValueError`` if bad."""
    items = [i.strip() for i in text.split(",") if i.strip()]
    if not items:
        raise ValueError("empty select list")
    for it in items:
        if _SELECT_ITEM.fullmatch(it) is None:
            raise ValueError(f"bad select specifier {it!r} (expected +/path or -/path)")
    return ",".join(items)


class PermissionDocumentError(Exception):
    """A permission document that cannot be used: the user it was for, and why."""

    def __init__(self, user: str, reason: str) -> None:
        super().__init__(f"permission document for user {user!r}: {reason}")
        self.user = user
        self.reason = reason


class PermissionEntry:
    """One entry: a topic (literal or regex) and what it grants."""

    __slots__ = ("topic", "pattern", "read", "write", "read_filter", "write_filter", "select",
                 "_read_fn", "_write_fn")

    def __init__(self, topic: str, read: bool | str, write: bool | str, select: str | None) -> None:
        self.topic = topic
        self.pattern: SafePattern | None = compile_pattern(topic) if is_regex_topic(topic) else None
        self.read = read is not False
        self.write = write is not False
        self.read_filter = read if isinstance(read, str) else None
        self.write_filter = write if isinstance(write, str) else None
        self.select = select
        self._read_fn: Callable[..., bool] | None = \
            compile_filter(self.read_filter) if self.read_filter is not None else None
        self._write_fn: Callable[..., bool] | None = \
            compile_filter(self.write_filter) if self.write_filter is not None else None

    def matches(self, topic: str) -> bool:
        if self.pattern is None:
            return topic == self.topic
        return self.pattern.search(topic) is not None

    def __repr__(self) -> str:
        return (f"PermissionEntry({self.topic!r}, read={self.read_filter or self.read}, "
                f"write={self.write_filter or self.write}, select={self.select!r})")


class PermissionDocument(msgspec.Struct, frozen=True, kw_only=True):
    """A parsed document. ``raw`` is the text it came from (to notice a changed document)."""

    user: str
    logon: bool = False
    replication_logon: bool = False
    user_name: str | None = None
    password: str | None = None
    topics: tuple[PermissionEntry, ...] = ()
    admin: tuple[PermissionEntry, ...] = ()
    replicated_topics: tuple[PermissionEntry, ...] = ()
    raw: bytes = b""


def _bool(doc: dict[str, Any], key: str, user: str) -> bool:
    value = doc.get(key, False)
    if not isinstance(value, bool):
        raise PermissionDocumentError(user, f"{key!r} must be true or false, not {type(value).__name__}")
    return value


def _opt_str(doc: dict[str, Any], key: str, user: str) -> str | None:
    value = doc.get(key)
    if value is not None and not isinstance(value, str):
        raise PermissionDocumentError(user, f"{key!r} must be a string, not {type(value).__name__}")
    return value


def _grant(entry: dict[str, Any], key: str, where: str, user: str) -> bool | str:
    value = entry.get(key, False)
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        if not value.strip():
            raise PermissionDocumentError(user, f"{where}: {key!r} is an empty filter")
        try:
            compile_filter(value)
        except FilterError as e:
            raise PermissionDocumentError(user, f"{where}: {key!r} is a bad filter: {e.detail or e}") \
                from None
        return value
    raise PermissionDocumentError(user, f"{where}: {key!r} must be true, false or a filter string, "
                                        f"not {type(value).__name__}")


def _entries(doc: dict[str, Any], key: str, user: str, *, names_allowed: bool = False
             ) -> tuple[PermissionEntry, ...]:
    value = doc.get(key)
    if value is None:
        return ()
    if not isinstance(value, list):
        raise PermissionDocumentError(user, f"{key!r} must be a list of entries, not {type(value).__name__}")
    out: list[PermissionEntry] = []
    for i, entry in enumerate(value):
        where = f"{key}[{i}]"
        if names_allowed and isinstance(entry, str) and entry:
            entry = {"topic": entry, "read": True, "write": True}
        if not isinstance(entry, dict):
            raise PermissionDocumentError(user, f"{where} must be an object, not {type(entry).__name__}")
        topic = entry.get("topic")
        if not isinstance(topic, str) or not topic:
            raise PermissionDocumentError(user, f"{where}: 'topic' must be a non-empty string")
        read = _grant(entry, "read", where, user)
        write = _grant(entry, "write", where, user)
        select_text = entry.get("select")
        select: str | None = None
        if select_text is not None:
            if not isinstance(select_text, str):
                raise PermissionDocumentError(user, f"{where}: 'select' must be a string, "
                                                    f"not {type(select_text).__name__}")
            try:
                select = check_select(select_text)
            except ValueError as e:
                raise PermissionDocumentError(user, f"{where}: {e}") from None
        try:
            out.append(PermissionEntry(topic, read, write, select))
        except (re.error, OverflowError, RecursionError) as e:
            raise PermissionDocumentError(user, f"{where}: bad topic regular expression {topic!r}: {e}") \
                from None
        except FilterError as e:  # pragma: no cover - the filters compiled above
            raise PermissionDocumentError(user, f"{where}: {e}") from None
    return tuple(out)


def parse_document(data: bytes | str, user: str) -> PermissionDocument:
    """Parse and check a permission document fetched for ``user``.

    Raises :class:`PermissionDocumentError` (and nothing else) for text that is not JSON, not
    an object, too large, or has a field of the wrong type, a bad filter, regex or select list.
    """
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise PermissionDocumentError(user, f"document is {len(raw)} bytes, more than {MAX_DOCUMENT_BYTES}")
    try:
        doc = msgspec.json.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as e:
        raise PermissionDocumentError(user, f"not valid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise PermissionDocumentError(user, f"document must be a JSON object, not {type(doc).__name__}")
    try:
        return PermissionDocument(
            user=user,
            logon=_bool(doc, "logon", user),
            replication_logon=_bool(doc, "replication-logon", user),
            user_name=_opt_str(doc, "user_name", user),
            password=_opt_str(doc, "password", user),
            topics=_entries(doc, "topic", user),
            admin=_entries(doc, "admin", user),
            replicated_topics=_entries(doc, "replicated-topics", user, names_allowed=True),
            raw=raw,
        )
    except RecursionError:
        raise PermissionDocumentError(user, "document nested too deeply") from None
