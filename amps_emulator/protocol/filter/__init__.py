"""AMPS content filters and expressions for JSON messages.

Public API::

    from amps_emulator.protocol.filter import compile_filter, FilterError, MessageContext
    f = compile_filter("/a = 1 AND /b/c LIKE 'x'")  # cached by text; FilterError if bad
    f(doc)          # doc: decoded JSON body (dict usually; list/scalar/None otherwise) -> bool
    f(doc, ctx)     # ctx: MessageContext for TOPIC_NAME(), BOOKMARK(), ... (NULL if absent)
    f.text, f.ast   # original text, parsed AST (see protocol.filter.ast)

    from amps_emulator.protocol.filter import conjoin
    g = conjoin(entitlement_text, client_text)  # each parsed alone, the trees ANDed

    from amps_emulator.protocol.filter import evaluate_expression, compile_expression
    evaluate_expression("/qty * /px", doc)   # -> value, None = NULL

Modules: ``grammar.lark`` (syntax), ``parser`` (text -> AST), ``ast`` (node classes),
``values`` (typing / comparison / NULL rules), ``functions`` (built-in functions),
``interpreter`` (reference tree walker), ``compiler`` (AST -> generated Python),
``construct`` (``<expression> AS /field`` of projections, Preprocessing and Enrichment),
``combine`` (two filters ANDed as trees, never as text).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from .ast import to_text
from .combine import conjoin, conjoin_ast
from .compiler import compile_ast, compile_expression, compile_filter
from .context import MessageContext
from .errors import FilterError
from .interpreter import evaluate as interpret
from .interpreter import matches as interpret_filter
from .parser import parse
from .runtime import CompiledFilter

__all__ = [
    "compile_filter", "compile_expression", "evaluate_expression", "FilterError",
    "MessageContext", "parse", "to_text", "compile_ast", "interpret", "interpret_filter",
    "decode_body", "matching", "conjoin", "conjoin_ast",
]

_json_decode = msgspec.json.decode


def evaluate_expression(expr: str | Any, doc: Any, ctx: MessageContext | None = None) -> Any:
    """Value of a (non-boolean or boolean) expression for ``doc``; ``None`` is NULL.

    ``expr`` is expression text (compiled once and cached) or a callable from
    :func:`compile_expression`.  Predicates yield ``True`` / ``False`` / ``None``.
    """
    fn = compile_expression(expr) if isinstance(expr, str) else expr
    return fn(doc, ctx)


def decode_body(payload: bytes | bytearray | memoryview | str) -> Any:
    """Decode a message body for filtering: the JSON value, or ``None`` if not JSON."""
    try:
        return _json_decode(payload)
    except (msgspec.DecodeError, UnicodeDecodeError, TypeError, RecursionError):
        return None


def matching(filters: Iterable[CompiledFilter | None], payload: bytes | bytearray | memoryview | str,
             ctx: MessageContext | None = None) -> list[CompiledFilter | None]:
    """The filters (compiled callables, ``None`` = match all) that ``payload`` satisfies.

    The body is decoded at most once, and only if some filter needs it.
    """
    out: list[CompiledFilter | None] = []
    doc: Any = matching  # sentinel: not decoded yet
    for f in filters:
        if f is None:
            out.append(f)
            continue
        if doc is matching:
            doc = decode_body(payload)
        if f(doc, ctx):
            out.append(f)
    return out
