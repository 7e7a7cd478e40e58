"""AMPS bookmarks: the value type, publisher ids, and parse/format for every client form.

Dependency-free (stdlib only) so it can move to ``protocol/bookmarks.py`` unchanged.

Forms accepted by :func:`parse_bookmark` (wire protocol doc section 6):

=============================  ==========================================================
text                           parsed value
=============================  ==========================================================
``P|S|``                       :class:`Bookmark` (two unsigned 64-bit decimals, each
                               followed by ``|``; the trailing ``|`` is required)
``0`` / ``epoch``              :data:`EPOCH` -- replay the whole log, then go live
``0|1|`` / ``now``             :data:`NOW` -- no replay, only new messages
``recent``                     :data:`RECENT` -- client-side keyword (most recent value in
                               the client's bookmark store); the journal treats it as EPOCH
``YYYYmmddTHHMMSS[.f{1,6}][Z]``  :class:`BookmarkTimestamp` -- first message logged at or
                               after that instant; always UTC (``Z`` optional)
``a,b,c``                      :class:`BookmarkList` of bookmarks / timestamps / ``0`` /
                               ``0|1|`` -- AMPS starts from the earliest of them
``[a:b]`` ``[a:b)`` ``(a:b]``  :class:`BookmarkRange`; ``[``/``]`` inclusive, ``(``/``)``
``(a:b)``                      exclusive. ``a``: any non-range form; ``b``: a bookmark,
                               a timestamp or ``0|1|``/``now``
=============================  ==========================================================

Keywords are matched case-insensitively; surrounding whitespace (also around list items and
range ends) is ignored. Anything else raises :class:`BookmarkError` (a ``ValueError``) whose
message quotes the offending text; the server maps it to the AMPS reason ``invalid bookmark``.

:func:`format_bookmark` produces the canonical text of any parsed value, and
``parse_bookmark(format_bookmark(v)) == v`` for every value.

Publisher ids: :func:`publisher_id_for` is the first 8 bytes, big-endian, of
``blake2b(client_name.encode("utf-8"), digest_size=8, person=b"amps-emu-pubid")``, with 0
mapped to 1 (publisher id 0 is reserved for EPOCH/NOW and journal-internal records). It is
stable across runs, processes and machines (never Python's ``hash()``), so external tools can
recompute it from a client name.
"""

from __future__ import annotations

import datetime as _dt
import enum
import hashlib
import re
import types
from dataclasses import dataclass

__all__ = [
    "Bookmark",
    "BookmarkError",
    "BookmarkKeyword",
    "BookmarkList",
    "BookmarkRange",
    "BookmarkSpec",
    "BookmarkTimestamp",
    "EPOCH",
    "NOW",
    "RECENT",
    "format_bookmark",
    "format_timestamp",
    "parse_bookmark",
    "parse_timestamp",
    "publisher_id_for",
]

_U64_MAX = (1 << 64) - 1
_PUBID_PERSON = b"amps-emu-pubid"


class BookmarkError(ValueError):
    """A bookmark string that is not one of the accepted forms (AMPS: ``invalid bookmark``)."""


@dataclass(frozen=True, slots=True, order=True)
class Bookmark:
    """One message's bookmark ``publisher_id|sequence|``."""

    publisher_id: int
    sequence: int

    def __post_init__(self) -> None:
        if not (0 <= self.publisher_id <= _U64_MAX and 0 <= self.sequence <= _U64_MAX):
            raise BookmarkError(f"bookmark fields out of uint64 range: {self.publisher_id}|{self.sequence}|")

    def __str__(self) -> str:
        return f"{self.publisher_id}|{self.sequence}|"


class BookmarkKeyword(enum.Enum):
    """The special bookmark values."""

    EPOCH = "0"
    NOW = "0|1|"
    RECENT = "recent"

    def __str__(self) -> str:
        return self.value


EPOCH = BookmarkKeyword.EPOCH
NOW = BookmarkKeyword.NOW
RECENT = BookmarkKeyword.RECENT


@dataclass(frozen=True, slots=True)
class BookmarkTimestamp:
    """A point in time, microseconds since the Unix epoch (UTC)."""

    micros: int

    def __str__(self) -> str:
        return format_timestamp(self.micros)


ListItem = Bookmark | BookmarkTimestamp | BookmarkKeyword
RangeEnd = Bookmark | BookmarkTimestamp | BookmarkKeyword


@dataclass(frozen=True, slots=True)
class BookmarkList:
    """A comma list, typically one bookmark per publisher (``2222|1|,1111|2|``)."""

    items: tuple[ListItem, ...]

    def __str__(self) -> str:
        return ",".join(format_bookmark(i) for i in self.items)


@dataclass(frozen=True, slots=True)
class BookmarkRange:
    """``[start:end]`` with per-end inclusivity (``[``/``]`` inclusive, ``(``/``)`` exclusive)."""

    start: Bookmark | BookmarkTimestamp | BookmarkKeyword | BookmarkList
    end: RangeEnd
    start_inclusive: bool = True
    end_inclusive: bool = True

    def __str__(self) -> str:
        return (
            ("[" if self.start_inclusive else "(")
            + format_bookmark(self.start)
            + ":"
            + format_bookmark(self.end)
            + ("]" if self.end_inclusive else ")")
        )


BookmarkSpec = Bookmark | BookmarkKeyword | BookmarkTimestamp | BookmarkList | BookmarkRange

_BOOKMARK_RE = re.compile(r"([0-9]{1,20})\|([0-9]{1,20})\|")
_TS_RE = re.compile(r"([0-9]{4})([0-9]{2})([0-9]{2})T([0-9]{2})([0-9]{2})([0-9]{2})(?:\.([0-9]{1,6}))?(Z?)")
_UNIX_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_KEYWORDS = types.MappingProxyType({"0": EPOCH, "epoch": EPOCH, "0|1|": NOW, "now": NOW, "recent": RECENT})


def publisher_id_for(client_name: str) -> int:
    """Stable 64-bit publisher id of a client name (see module docstring for the exact hash)."""
    digest = hashlib.blake2b(client_name.encode("utf-8"), digest_size=8, person=_PUBID_PERSON).digest()
    return int.from_bytes(digest, "big") or 1


def parse_timestamp(text: str) -> int:
    """``YYYYmmddTHHMMSS[.ffffff][Z]`` (UTC) -> microseconds since the Unix epoch."""
    m = _TS_RE.fullmatch(text)
    if m is None:
        raise BookmarkError(f"invalid bookmark timestamp {text!r}: expected YYYYmmddTHHMMSS[.ffffff][Z]")
    year, month, day, hour, minute, second = (int(g) for g in m.group(1, 2, 3, 4, 5, 6))
    frac = m.group(7) or ""
    try:
        when = _dt.datetime(year, month, day, hour, minute, second, tzinfo=_dt.UTC)
    except ValueError as exc:
        raise BookmarkError(f"invalid bookmark timestamp {text!r}: {exc}") from None
    delta = when - _UNIX_EPOCH
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + int(frac.ljust(6, "0") or 0)


def format_timestamp(micros: int) -> str:
    """Microseconds since the Unix epoch -> ``YYYYmmddTHHMMSS[.ffffff]Z`` (fraction only if non-zero)."""
    seconds, frac = divmod(micros, 1_000_000)
    when = _UNIX_EPOCH + _dt.timedelta(seconds=seconds)
    text = when.strftime("%Y%m%dT%H%M%S")
    if len(text) != 15:  # strftime does not zero-pad years < 1000 on every libc
        text = (f"{when.year:04d}{when.month:02d}{when.day:02d}"
                f"T{when.hour:02d}{when.minute:02d}{when.second:02d}")
    return f"{text}.{frac:06d}Z" if frac else f"{text}Z"


def _parse_single(text: str, whole: str) -> Bookmark | BookmarkTimestamp | BookmarkKeyword:
    item = text.strip()
    keyword = _KEYWORDS.get(item.lower())
    if keyword is not None:
        return keyword
    m = _BOOKMARK_RE.fullmatch(item)
    if m is not None:
        pub, seq = int(m.group(1)), int(m.group(2))
        if pub > _U64_MAX or seq > _U64_MAX:
            raise BookmarkError(f"invalid bookmark {whole!r}: {item!r} does not fit in two uint64 values")
        return Bookmark(pub, seq)
    if item[:1].isdigit() and "T" in item:
        return BookmarkTimestamp(parse_timestamp(item))
    if not item:
        raise BookmarkError(f"invalid bookmark {whole!r}: empty item")
    raise BookmarkError(
        f"invalid bookmark {whole!r}: {item!r} is not P|S|, 0, 0|1|, a timestamp "
        "YYYYmmddTHHMMSS[.ffffff][Z] or one of recent/now/epoch"
    )


def _parse_list_or_single(text: str, whole: str):
    if "," not in text:
        return _parse_single(text, whole)
    items = tuple(_parse_single(part, whole) for part in text.split(","))
    for item in items:
        if item is RECENT:
            raise BookmarkError(f"invalid bookmark {whole!r}: 'recent' cannot appear in a list")
    return BookmarkList(items)


def parse_bookmark(text: str) -> BookmarkSpec:
    """Parse any client bookmark form (see module docstring); raises :class:`BookmarkError`."""
    if not isinstance(text, str):
        raise BookmarkError(f"invalid bookmark {text!r}: not a string")
    stripped = text.strip()
    if not stripped:
        raise BookmarkError("invalid bookmark '': empty")
    if stripped[0] in "[(":
        if stripped[-1] not in "])":
            raise BookmarkError(f"invalid bookmark range {text!r}: must end with ']' or ')'")
        inner = stripped[1:-1]
        if inner.count(":") != 1:
            raise BookmarkError(f"invalid bookmark range {text!r}: "
                                "expected exactly one ':' between start and end")
        start_text, end_text = inner.split(":")
        if not start_text.strip() or not end_text.strip():
            raise BookmarkError(f"invalid bookmark range {text!r}: start and end are both required")
        start = _parse_list_or_single(start_text, text)
        end = _parse_single(end_text, text)
        if isinstance(end, BookmarkKeyword) and end is not NOW:
            raise BookmarkError(f"invalid bookmark range {text!r}: "
                                "the end must be a bookmark, a timestamp or now")
        return BookmarkRange(start, end, stripped[0] == "[", stripped[-1] == "]")
    if stripped[-1] in "])":
        raise BookmarkError(f"invalid bookmark range {text!r}: must start with '[' or '('")
    return _parse_list_or_single(stripped, text)


def format_bookmark(value: BookmarkSpec) -> str:
    """Canonical wire text of a parsed bookmark value (inverse of :func:`parse_bookmark`)."""
    if isinstance(value, (Bookmark, BookmarkKeyword, BookmarkTimestamp, BookmarkList, BookmarkRange)):
        return str(value)
    raise TypeError(f"not a bookmark value: {value!r}")
