"""Small pure helpers of the code generator (:mod:`.compiler`): type tests as code, LIKE
patterns that need no regex, literal lists."""

from __future__ import annotations

from . import ast as A
from .runtime import LiteralValue

__all__ = ["is_num", "plain_like", "literal_values"]


def is_num(first: str, rest: str) -> str:
    """Code testing that a value is an ``int`` or a ``float`` (not a ``bool``); ``first`` is
    the code evaluating it (maybe binding it to ``rest``), ``rest`` its later uses.  Cheaper
    than ``type(x) in {int, float}`` for the common int."""
    return f"(type({first}) is int or type({rest}) is float)"


_REGEX_META = frozenset(".^$*+?{}[]()|\\#")


def plain_like(pattern: str):
    """A LIKE pattern that is a literal, optionally anchored at one end, as
    ``("in" | "begins" | "ends", text)``; ``None`` when it needs the regex engine.
    (``$`` also matches before a final newline, which the "ends" test honours.)"""
    kind = "in"
    body = pattern
    if body.startswith("^"):
        kind, body = "begins", body[1:]
    elif body.endswith("$") and not body.endswith("\\$"):
        kind, body = "ends", body[:-1]
    if not body or any(c in _REGEX_META for c in body) or body.isspace():
        return None
    return kind, body


def literal_values(items: tuple[A.Expr, ...]) -> list[LiteralValue] | None:
    """The values of ``items`` if all are literals, else ``None``."""
    values: list[LiteralValue] = []
    for i in items:
        if not isinstance(i, A.Literal):
            return None
        values.append(i.value)
    return values
