"""Field construction: ``<source expression> AS <destination> [HINT <hint>,...]``.

The form AMPS uses wherever it builds a field from an expression: a view's ``Projection``,
an aggregated query's ``projection``, and a SOW topic's ``Preprocessing`` and ``Enrichment``
(User Guide, "Constructing Fields"). The source is an ordinary expression of this package,
compiled by :func:`~protocol.filter.compiler.compile_expression` (one evaluator for filters,
views and enrichment); this module only cuts the text apart and writes the values.

What preprocessing and enrichment add to the form:

* ``/path OF CURRENT`` reads the incoming message (the same as ``/path`` alone) and
  ``/path OF PREVIOUS`` the record the message replaces (NULL when there is none). The
  identifier is rewritten before compiling: ``OF PREVIOUS`` puts it under a reserved
  top-level name (:func:`previous_mark`, a name no field text uses) and the evaluation reads a
  document holding the message's fields and, under that name, the previous record
  (:meth:`FieldSet.evaluate`). Only enrichment may read the previous state.
* ``HINT OPTIONAL``: a NULL result removes the field instead of writing a NULL;
  ``HINT SET_CURRENT``: the value is visible to the fields after this one (otherwise every
  field reads the message as it came in). Hints combine with a comma.
* An identifier cannot name a topic or a message type (``[json].[orders]./id``): these fields
  read one message.

Values are written as a view writes them (:func:`output_value`): an array gives its first
element, an object and a non-finite number give NULL.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from . import ast as A
from .compiler import compile_expression
from .context import MessageContext
from .errors import FilterError
from .parser import parse
from .values import first

__all__ = [
    "AS_WORD", "ConstructedField", "FieldSet", "mask", "paren_depths", "output_value",
    "parse_field", "parse_target", "previous_mark", "set_field", "remove_field", "write_field",
]

#: the ``AS`` between a source and its destination (not part of a field name such as ``/AS``)
AS_WORD = re.compile(r"(?<![\w/@.\-\[#])AS(?!\w)", re.IGNORECASE)
_HINT_WORD = re.compile(r"(?<![\w/@.\-\[#])HINT(?!\w)", re.IGNORECASE)
# an identifier (a path, its [n] and [/bracket] parts masked to '#') followed by OF CURRENT or
# OF PREVIOUS, in masked text
_OF = re.compile(r"(?P<id>(?:/@?\w(?:[\w.\-]*[\w.])?(?:\[#+\])*)+|\[#+\])"
                 r"\s+OF\s+(?P<which>CURRENT|PREVIOUS)(?!\w)", re.IGNORECASE)
_ANY_OF = re.compile(r"(?<![\w/@.\-#])OF\s+(?:CURRENT|PREVIOUS)(?!\w)", re.IGNORECASE)
# [type].[topic]./path or [topic]./path, in masked text
_QUALIFIED = re.compile(r"\]\s*\.\s*[\[/]")
_HINTS = frozenset({"OPTIONAL", "SET_CURRENT"})
_PREVIOUS_BASE = "amps_previous_state"


def mask(text: str) -> str:
    """``text`` with the inside of string literals and ``[...]`` parts blanked to ``#`` (same
    length), so that commas, parentheses and keywords can be found with plain searches.
    :class:`FilterError` for an unterminated string or an unclosed ``[``."""
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch in "'\"":
            raw = i > 0 and text[i - 1] in "rR" and (i < 2 or not (text[i - 2].isalnum()
                                                                   or text[i - 2] in "_/"))
            j = i + 1
            while j < n:
                c = text[j]
                if c == "\\" and not raw:
                    j += 2
                    continue
                if c == ch:
                    if not raw and j + 1 < n and text[j + 1] == ch:
                        j += 2  # a doubled quote stands for the quote
                        continue
                    break
                j += 1
            if j >= n:
                raise FilterError(f"unterminated string in {text!r}")
            for k in range(i + 1, j):
                out[k] = "#"
            i = j + 1
        elif ch == "[":
            j = text.find("]", i + 1)
            if j < 0:
                raise FilterError(f"unbalanced [ in {text!r}")
            for k in range(i + 1, j):
                out[k] = "#"
            i = j + 1
        else:
            i += 1
    return "".join(out)


def paren_depths(masked: str) -> list[int]:
    """Parenthesis depth at each character of a masked text."""
    out, d = [], 0
    for ch in masked:
        if ch == ")":
            d -= 1
        out.append(d)
        if ch == "(":
            d += 1
    return out


def parse_target(text: str, entry: str) -> tuple[str, ...]:
    """The destination path of a field, read as the grammar reads an identifier: object
    steps only (no array index, not the whole message)."""
    t = text.strip()
    try:
        node = parse(t) if t else None
    except FilterError:
        node = None
    if not isinstance(node, A.Identifier):
        raise FilterError(f"destination {t!r} in {entry!r} is not a field identifier")
    path = node.path
    if any(type(s) is int for s in path):
        raise FilterError(f"destination {t!r} in {entry!r} has an array index")
    return path  # type: ignore[return-value]


def previous_mark(texts: Sequence[str]) -> str:
    """A top-level field name that none of ``texts`` contains: where ``OF PREVIOUS``
    identifiers read the previous record."""
    mark = _PREVIOUS_BASE
    while any(mark in t for t in texts):
        mark += "_"
    return mark


def _rewrite_of(source: str, masked: str, previous: str | None, entry: str) -> tuple[str, bool]:
    """``source`` with its ``OF CURRENT`` / ``OF PREVIOUS`` modifiers rewritten (see the module
    docstring), and whether it reads the previous record."""
    matches = list(_OF.finditer(masked))
    spans = [(m.start("which"), m.end()) for m in matches]
    for m in _ANY_OF.finditer(masked):
        at = m.end() - 1
        if not any(s <= at < e for s, e in spans):
            raise FilterError(f"{m.group(0)!r} in {entry!r} does not follow a field identifier")
    reads = False
    out = source
    for m in reversed(matches):
        ident = source[m.start("id"):m.end("id")]
        if m.group("which").upper() == "PREVIOUS":
            if previous is None:
                raise FilterError(f"{entry!r} reads OF PREVIOUS: only the Enrichment of a SOW "
                                  "Topic reads the previous state of a record")
            reads = True
            ident = f"/{previous}{ident}" if ident.startswith("/") else f"[/{previous}{ident[1:]}"
        out = out[:m.start()] + ident + out[m.end():]
    return out, reads


@dataclass(frozen=True)
class ConstructedField:
    """One parsed field: ``expr(doc, ctx)`` gives the value written at ``target``."""

    text: str
    source: str  # the expression as compiled (OF modifiers rewritten)
    target: tuple[str, ...]
    expr: Any
    optional: bool = False
    set_current: bool = False
    reads_previous: bool = False


def parse_field(text: str, *, previous: str | None = None) -> ConstructedField:
    """Parse one ``Field`` of a ``Preprocessing`` or ``Enrichment``. ``previous``: the name
    ``OF PREVIOUS`` identifiers are read under (:func:`previous_mark`); None refuses them.
    :class:`FilterError` for anything AMPS would not accept."""
    entry = " ".join(text.split())
    masked = mask(text)
    depth_at = paren_depths(masked)
    cuts = [m for m in AS_WORD.finditer(masked) if depth_at[m.start()] == 0]
    if not cuts:
        raise FilterError(f"{entry!r} needs AS and a destination: <expression> AS /field")
    if len(cuts) > 1:
        raise FilterError(f"{entry!r} has more than one AS")
    cut = cuts[0]
    source, smask = text[:cut.start()], masked[:cut.start()]
    if not source.strip():
        raise FilterError(f"{entry!r} has no expression before AS")
    if _QUALIFIED.search(smask):
        raise FilterError(f"{entry!r} names a topic or message type: the fields of a "
                          "Preprocessing or Enrichment read the message itself")
    rest, rmask = text[cut.end():], masked[cut.end():]
    optional = set_current = False
    hint = list(_HINT_WORD.finditer(rmask))
    if len(hint) > 1:
        raise FilterError(f"{entry!r} has more than one HINT")
    if hint:
        words = [w.strip().upper() for w in rest[hint[0].end():].split(",")]
        rest = rest[:hint[0].start()]
        unknown = [w for w in words if w not in _HINTS]
        if unknown:
            raise FilterError(f"unknown HINT {unknown[0] or '(empty)'!r} in {entry!r} "
                              "(OPTIONAL, SET_CURRENT)")
        optional, set_current = "OPTIONAL" in words, "SET_CURRENT" in words
    target = parse_target(rest, entry)
    if previous is not None and target[0] == previous:  # (no field text contains the mark)
        raise FilterError(f"destination in {entry!r} is reserved")
    rewritten, reads = _rewrite_of(source, smask, previous, entry)
    rewritten = rewritten.strip()
    try:
        expr = compile_expression(rewritten)
    except FilterError as exc:
        raise FilterError(f"the expression of {entry!r}: {exc.detail}") from None
    return ConstructedField(text, rewritten, target, expr, optional, set_current, reads)


# ---- values and writing --------------------------------------------------------------------

def output_value(v: Any) -> Any:
    """What a constructed field holds for the value ``v`` of its expression."""
    t = type(v)
    if t is list:
        v = first(v)
        t = type(v)
    if t is float:
        return v if math.isfinite(v) else None
    if t is dict:
        return None
    return v


def set_field(tree: dict, path: tuple[str, ...], value: Any) -> None:
    """Write ``value`` at ``path`` in ``tree``, creating (and copying, never aliasing) the
    objects on the way; a step that holds something else than an object becomes one."""
    d = tree
    for step in path[:-1]:
        nxt = d.get(step)
        nxt = d[step] = dict(nxt) if type(nxt) is dict else {}
        d = nxt
    d[path[-1]] = value


def remove_field(tree: dict, path: tuple[str, ...]) -> None:
    """Remove the field at ``path`` (nothing when it is absent), copying the objects on the
    way as :func:`set_field` does."""
    d: Any = tree
    for step in path[:-1]:
        d = d.get(step)
        if type(d) is not dict:
            return
    if path[-1] not in d:
        return
    d = tree
    for step in path[:-1]:
        nxt = d[step] = dict(d[step])
        d = nxt
    del d[path[-1]]


def write_field(tree: dict, path: tuple[str, ...], value: Any, optional: bool) -> None:
    """A constructed field's result: a NULL of an ``OPTIONAL`` field removes the field."""
    if value is None and optional:
        remove_field(tree, path)
    else:
        set_field(tree, path, value)


class FieldSet:
    """The ``Field`` list of one ``Preprocessing`` or ``Enrichment`` (``previous``: whether
    ``OF PREVIOUS`` may be read: Enrichment of a SOW topic)."""

    __slots__ = ("fields", "mark", "reads_previous", "uses_context")

    def __init__(self, texts: Sequence[str], *, previous: bool) -> None:
        self.mark = previous_mark(texts) if previous else None
        self.fields = tuple(parse_field(t, previous=self.mark) for t in texts)
        self.reads_previous = any(f.reads_previous for f in self.fields)
        self.uses_context = any(f.expr.uses_context for f in self.fields)

    def evaluate(self, doc: Any, previous: Any = None, ctx: MessageContext | None = None
                 ) -> list[tuple[tuple[str, ...], Any, bool]]:
        """``(target, value, optional)`` of each field, in order, for the message ``doc``
        (and the ``previous`` record's document, None if none). ``doc`` is not changed."""
        env = doc
        own = False
        if self.reads_previous:
            env = dict(doc) if type(doc) is dict else {}
            env[self.mark] = previous
            own = True
        out = []
        for f in self.fields:
            v = output_value(f.expr(env, ctx))
            out.append((f.target, v, f.optional))
            if f.set_current:
                if not own:
                    env = dict(doc) if type(doc) is dict else {}
                    own = True
                write_field(env, f.target, v, f.optional)
        return out
