"""Query result shaping: ``orderby``, ``top_n``/``skip_n``, ``select`` projections, results.

orderby
-------
``"/a DESC, /b/c, [/odd name] asc, /id TEXT"``: a comma list of identifiers, each optionally
followed by ``ASC`` or ``DESC`` and/or the ``TEXT`` hint (any case, either order).  Anything
else raises ``CommandError(invalid order by)``.  ``TEXT`` sorts the field by its text (a
number by its JSON text, so ``10`` sorts before ``9``); NULL still sorts as below.
Ordering is a total order chosen to agree with the filter comparison rules where they are
total: numbers (and booleans as 1/0) by value, then strings by text (a non-numeric string is
greater than any number, as in filters); numeric strings sort as strings; NULL (missing,
``null``, ``''``, objects, empty arrays) sorts last in ``ASC`` and first in ``DESC``.  An array
sorts by its first element.  Ties keep the store's natural order (the sort is stable).

select
------
``"[-/,+/subId,+/bookmark]"`` (brackets optional): ``+``/``-`` directives on fields; ``-/`` and
``+/`` exclude / include everything.  Each field follows the most specific directive on its
path (the first one given, if a path is named twice), and is included when none applies;
``-/event,+/event/description`` keeps only that subfield of ``/event``.  A list of inclusions
only therefore returns the whole message (AMPS clients send ``-/`` first, e.g. the
SOWRecoveryPointAdapter).  Paths with array indexes are refused with
``CommandError(invalid options)``.  Non-object bodies are returned unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec

from amps_emulator.protocol.filter.values import first, resolve
from amps_emulator.protocol.msgtypes import CodecError
from amps_emulator.protocol.reasons import INVALID_OPTIONS, INVALID_ORDER_BY, CommandError
from amps_emulator.sow.paths import PathError, parse_path
from amps_emulator.sow.record import Record, StoredRecords

__all__ = [
    "OrderBy", "parse_order_by", "sort_records", "Select", "parse_select", "selection",
    "apply_select", "compose_select",
    "QueryResult", "DeleteResult", "PublishResult", "page", "order_key",
]

_ITEM = re.compile(r"\s*(\[/[^\]]+\]|/\S*?)((?:\s+(?:asc|desc|text))*)\s*\Z", re.IGNORECASE)


@dataclass(frozen=True)
class OrderBy:
    keys: tuple[tuple[tuple[str | int, ...], bool], ...]  # (path, descending)
    text: str = ""
    #: per key: sort by the value's text (the ``TEXT`` hint)
    as_text: tuple[bool, ...] = ()

    @property
    def paths(self) -> list[tuple[str | int, ...]]:
        return [p for p, _ in self.keys]


def parse_order_by(text: str | None) -> OrderBy | None:
    """Parse the ``orderby`` header; ``None``/blank -> ``None``."""
    if text is None or not text.strip():
        return None
    keys = []
    as_text = []
    for item in text.split(","):
        m = _ITEM.match(item)
        words = m.group(2).lower().split() if m is not None else []
        directions = [w for w in words if w != "text"]
        if m is None or len(directions) > 1 or words.count("text") > 1:
            raise CommandError(INVALID_ORDER_BY, f"cannot order by {item.strip()!r}")
        try:
            path = parse_path(m.group(1))
        except PathError as e:
            raise CommandError(INVALID_ORDER_BY, str(e)) from None
        if not path:
            raise CommandError(INVALID_ORDER_BY, "cannot order by the whole message")
        keys.append((path, directions == ["desc"]))
        as_text.append("text" in words)
    return OrderBy(tuple(keys), text, tuple(as_text))


_NULL_RANK = 2


def sort_value(v: Any) -> tuple:
    """Total-order key of a field value (see the module docstring)."""
    if type(v) is list:
        v = first(v)
    t = type(v)
    if t is int or t is float:
        if v != v:
            return (_NULL_RANK, 0)
        return (0, v)
    if t is bool:
        return (0, int(v))
    if t is str and v:
        return (1, v)
    return (_NULL_RANK, 0)


def text_sort_value(v: Any) -> tuple:
    """Total-order key of a field value sorted by its text (the ``TEXT`` hint)."""
    if type(v) is list:
        v = first(v)
    t = type(v)
    if t is str:
        return (1, v) if v else (_NULL_RANK, "")
    if t is bool:
        return (1, "true" if v else "false")
    if t is int or (t is float and v == v):
        return (1, msgspec.json.encode(v).decode())
    return (_NULL_RANK, "")


def sort_records(records: list[Record], order: OrderBy,
                 doc_of: Callable[[Record], Any] = lambda r: r.doc) -> list[Record]:
    """Stable multi-key sort (``records`` in natural order on entry)."""
    if not records:
        return records
    keyed = [(r, doc_of(r)) for r in records]
    hints = order.as_text or (False,) * len(order.keys)
    for (path, desc), as_text in reversed(list(zip(order.keys, hints, strict=False))):
        value = text_sort_value if as_text else sort_value
        if len(path) == 1 and type(path[0]) is str:
            name = path[0]
            keyed.sort(key=lambda rd: value(rd[1].get(name) if type(rd[1]) is dict
                                            else resolve(rd[1], path)), reverse=desc)
        else:
            keyed.sort(key=lambda rd: value(resolve(rd[1], path)), reverse=desc)
    return [r for r, _ in keyed]


class _Desc:
    """A string that sorts backwards (a ``DESC`` text key in :func:`order_key`)."""

    __slots__ = ("s",)

    def __init__(self, s: str) -> None:
        self.s = s

    def __lt__(self, other: _Desc) -> bool:
        return other.s < self.s

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Desc) and self.s == other.s


def order_key(order: OrderBy) -> Callable[[Any], tuple]:
    """One key for the whole ``orderby`` (document -> tuple), ordering as
    :func:`sort_records` does (add the natural position as the last item for its stability),
    so sorted parts can be merged (:func:`heapq.merge`)."""
    hints = order.as_text or (False,) * len(order.keys)
    parts = []
    for (path, desc), as_text in zip(order.keys, hints, strict=False):
        value = text_sort_value if as_text else sort_value
        parts.append((path, desc, value))

    def key(doc: Any) -> tuple:
        out = []
        for path, desc, value in parts:
            rank, v = value(resolve(doc, path))
            if desc:
                rank = -rank
                v = _Desc(v) if type(v) is str else -v
            out.append(rank)
            out.append(v)
        return tuple(out)
    return key


_Paged = TypeVar("_Paged", list[Any], StoredRecords)


def page(records: _Paged, top_n: int | None, skip_n: int | None) -> _Paged:
    """The ``skip_n``/``top_n`` page of ``records`` (a list, or stored records)."""
    s = skip_n or 0
    if s < 0:
        s = 0
    if top_n is None or top_n < 0:
        return records[s:] if s else records
    return records[s:s + top_n]


# ---- select -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Select:
    ops: tuple[tuple[bool, tuple[str, ...]], ...]  # (include, path); () = root
    text: str = ""
    #: path -> include, the first directive for each path
    rules: dict = field(default_factory=dict, compare=False, hash=False)
    #: every strict ancestor of a directive's path (where a subtree needs a closer look)
    parents: frozenset = field(default_factory=frozenset, compare=False, hash=False)

    def __post_init__(self) -> None:
        rules: dict = {}
        for include, path in self.ops:
            rules.setdefault(path, include)
        object.__setattr__(self, "rules", rules)
        object.__setattr__(self, "parents", frozenset(
            path[:i] for path in rules for i in range(len(path))))

    @property
    def identity(self) -> bool:
        return all(inc for inc, _ in self.ops)


def parse_select(text: str | Sequence[str] | None) -> Select | None:
    if text is None:
        return None
    if isinstance(text, str):
        t = text.strip()
        if t.startswith("[") and t.endswith("]") and (t == "[]" or t[1] in "+- "):
            t = t[1:-1]
        items = [i.strip() for i in t.split(",") if i.strip()]
        src = text
    else:
        items = [i.strip() for i in text]
        src = ",".join(items)
    ops: list[tuple[bool, tuple[str, ...]]] = []
    for it in items:
        if len(it) < 2 or it[0] not in "+-":
            raise CommandError(INVALID_OPTIONS, f"bad select specifier {it!r}")
        try:
            path = parse_path(it[1:])
        except PathError as e:
            raise CommandError(INVALID_OPTIONS, f"bad select specifier {it!r}: {e}") from None
        names = tuple(s for s in path if isinstance(s, str))
        if len(names) != len(path):
            raise CommandError(INVALID_OPTIONS, f"select does not support array indexes: {it!r}")
        ops.append((it[0] == "+", names))
    if not ops:
        return None
    return Select(tuple(ops), src)


def selection(value: Any) -> Select | None:
    """The ``select`` option's list if it changes anything (``None``: absent, a bare flag,
    or inclusions only); a bad list raises ``CommandError(invalid options)``."""
    sel = parse_select(value) if isinstance(value, str) else None
    return None if sel is None or sel.identity else sel


def _effective(rules: dict[tuple[str, ...], bool], path: tuple[str, ...]) -> bool:
    """Whether a select list includes ``path``: its most specific directive on the way."""
    for i in range(len(path), -1, -1):
        rule = rules.get(path[:i])
        if rule is not None:
            return rule
    return True


def compose_select(first: Select, then: Select | None) -> Select:
    """One select list doing ``first``, then ``then``: a field is kept when both keep it.
    Exact: every field's most specific directive in the result sits at a path of one of the
    two lists, where each list's own decision is the one it makes for that field."""
    if then is None:
        return first
    paths = sorted({(), *first.rules, *then.rules}, key=len)
    ops = tuple((_effective(first.rules, p) and _effective(then.rules, p), p) for p in paths)
    return Select(ops, ",".join(("+" if inc else "-") + "/" + "/".join(p) for inc, p in ops))


def apply_select(doc: Any, sel: Select) -> Any:
    """The projected document (``doc`` itself is never modified): each field follows the
    most specific directive on its path (``-/`` and ``+/`` are the root), included when none
    applies; an excluded object keeps the fields a deeper directive includes; nothing is
    created that the message does not have."""
    if type(doc) is not dict or sel.identity:
        return doc
    return _project(doc, (), sel.rules.get((), True), sel.rules, sel.parents)


def _project(d: dict, path: tuple, inherited: bool, rules: dict, parents: frozenset) -> dict:
    out = {}
    for k, v in d.items():
        p = path + (k,)
        include = rules.get(p, inherited)
        if p in parents and type(v) is dict:
            sub = _project(v, p, include, rules, parents)
            if include or sub:
                out[k] = sub
        elif include:
            out[k] = v
    return out


def project(rec: Record, sel: Select,
            encode: Callable[[Any], bytes] = msgspec.json.encode) -> Record:
    """``rec`` with only the fields ``sel`` keeps, written by ``encode`` (the codec of the
    topic's type; JSON). A body that is not an object, or that the type cannot write with
    fewer fields (``CodecError``), is returned whole."""
    doc = rec.doc
    if type(doc) is not dict:
        return rec
    new = apply_select(doc, sel)
    if new is doc:
        return rec
    try:
        data = encode(new)
    except CodecError:
        return rec
    return rec.with_data(data, new)


# ---- results ------------------------------------------------------------------------------

@dataclass
class QueryResult:
    """Result of a ``sow`` query.

    ``records``: the records to send, in order, already paged and projected (kept as stored,
    :class:`sow.record.StoredRecords`, when the query was run with ``stored``).
    ``matches``: records matching the query (before top_n / skip_n).
    ``topic_matches``: records in the topic (unexpired).  ``plan``: what the planner did.
    """
    records: list[Record] | StoredRecords
    matches: int
    topic_matches: int
    plan: str = "scan"

    @property
    def records_returned(self) -> int:
        return len(self.records)


@dataclass
class DeleteResult:
    """Result of a ``sow_delete``: the deleted records (for OOF / actions) and the counts of
    the stats ack (``topic_matches`` = records in the topic before the delete)."""
    records: list[Record]
    matches: int
    topic_matches: int
    plan: str = ""
    #: the count, when ``records`` does not hold them (a delete in steps yielded them)
    deleted: int | None = None

    @property
    def records_deleted(self) -> int:
        return len(self.records) if self.deleted is None else self.deleted


@dataclass
class PublishResult:
    """Result of ``publish`` / ``delta_publish``.

    ``record``: the stored record (for delta_publish: the merged one).  ``previous``: the record
    it replaced (``None`` if new -- also when the old one had expired; that one is reported by
    the next ``sweep_expired``).  ``delta``: for delta_publish, the decoded delta as received.
    """
    record: Record
    previous: Record | None
    delta: Any = None

    @property
    def inserted(self) -> bool:
        return self.previous is None

    @property
    def sow_key(self) -> str:
        return self.record.sow_key
