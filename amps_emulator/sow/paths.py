"""XPath-style field paths as the SOW uses them (``Key``, ``HashIndex``, ``Index``, ``orderby``,
``select``).

A path is a tuple of steps, each a ``str`` (object field) or an ``int`` (0-based array index),
exactly like :class:`protocol.filter.ast.Identifier` paths, so that a path from the
configuration and an identifier in a filter compare equal when they name the same field.
Values are read with :func:`protocol.filter.values.resolve`, the function the filters use, so the
SOW and the filters always agree on what a field's value is (arrays are "any element").
"""

from __future__ import annotations

import re
from typing import TypeAlias

from amps_emulator.protocol.filter.values import resolve

__all__ = ["Path", "parse_path", "path_text", "resolve", "top_level_names", "PathError"]

#: a parsed path: object field names and array indexes
Path: TypeAlias = tuple[str | int, ...]

# One step: a name of word characters, '.', '-' (not last) and an optional leading '@',
# followed by optional [n] array indexes -- the PATH terminal of the filter grammar.
_STEP = re.compile(r"/(@?\w(?:[\w.\-]*[\w.])?)((?:\[\d+\])*)")
_BRACKET = re.compile(r"\[(/[^\]]+)\]\Z")  # [/any text] : one field named by the text


class PathError(ValueError):
    """A path that is not an XPath-style field reference."""


def parse_path(text: str) -> tuple[str | int, ...]:
    """``"/a/b[1]"`` -> ``("a", "b", 1)``.  ``"/"`` alone is the empty path (the root).

    Raises :class:`PathError` for anything else.
    """
    t = text.strip()
    if t == "/":
        return ()
    m = _BRACKET.match(t)
    if m is not None:
        steps = [s for s in m.group(1).split("/") if s]
        if not steps:
            raise PathError(f"empty field path {text!r}")
        return tuple(steps)
    pos = 0
    out: list[str | int] = []
    while pos < len(t):
        m = _STEP.match(t, pos)
        if m is None:
            raise PathError(f"not a field path: {text!r}")
        out.append(m.group(1))
        if m.group(2):
            out.extend(int(i) for i in re.findall(r"\d+", m.group(2)))
        pos = m.end()
    if not out:
        raise PathError(f"empty field path {text!r}")
    return tuple(out)


def path_text(path: tuple[str | int, ...]) -> str:
    """Inverse of :func:`parse_path` for paths made of plain steps."""
    if not path:
        return "/"
    return "".join(f"[{s}]" if isinstance(s, int) else "/" + s for s in path)


def top_level_names(paths) -> set[str] | None:
    """Names of the top-level fields that ``paths`` read, or ``None`` if some path does not
    start with a field name (the whole document is then needed)."""
    out: set[str] = set()
    for p in paths:
        if not p or type(p[0]) is not str:
            return None
        out.add(p[0])
    return out
