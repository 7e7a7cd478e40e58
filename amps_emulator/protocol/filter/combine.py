"""Two filters that must both hold, joined as expressions, never as text.

An entitlement's read or write filter narrows what a client's own filter selects. Pasting
the two texts side by side (``(ent) AND (client)``) lets a client filter such as
``1=1) OR (1=1`` close the entitlement's parenthesis and OR its way out of it. Here each
text is parsed on its own (a client filter that does not parse alone is a
:class:`~.errors.FilterError`: ``bad filter``), the two trees become one
:class:`~.ast.And`, and the filter compiled is that tree. Its ``text`` is printed from the
tree (:func:`~.ast.to_text`, which parses back to an equal tree), so the transaction log,
the replication link and the Admin statistics, which keep a filter as text, keep one whose
first conjunct is the entitlement's whatever the client wrote.

The result is cached by the pair of texts, and the compiled filter by its text (as every
filter is): a subscription pays for the join once, never per message.
"""

from __future__ import annotations

from functools import lru_cache

from . import ast as A
from .compiler import CACHE_SIZE, compile_filter
from .errors import FilterError
from .modules import active_modules
from .runtime import CompiledFilter

__all__ = ["conjoin", "conjoin_ast"]


def conjoin_ast(first: A.Expr, second: A.Expr) -> A.And:
    """``first AND second`` as one tree, flattened as the parser builds an ``AND`` (no
    ``And`` directly inside another), so that printing and parsing it gives it back."""
    terms: list[A.Expr] = []
    for node in (first, second):
        if isinstance(node, A.And):
            terms.extend(node.terms)
        else:
            terms.append(node)
    return A.And(tuple(terms))


def conjoin(first: str, second: str) -> CompiledFilter:
    """The compiled filter that is TRUE only where both ``first`` and ``second`` are, each
    parsed on its own; :class:`FilterError` when either does not parse (or the two together
    are longer than a filter may be). ``second`` empty or blank: ``first`` alone."""
    if not second or not second.strip():
        return compile_filter(first)
    return _conjoined(first, second, active_modules())


@lru_cache(maxsize=CACHE_SIZE)
def _conjoined(first: str, second: str, _modules: frozenset[str]) -> CompiledFilter:
    # (``_modules``: the function libraries loaded, a part of what a text means)
    # (a FilterError is not cached here: compile_filter caches it by text already)
    a = compile_filter(first).ast
    b = compile_filter(second).ast
    try:
        text = A.to_text(conjoin_ast(a, b))
    except ValueError as exc:  # an identifier no expression text spells (none parses so)
        raise FilterError(f"the filters cannot be joined: {exc}") from None
    return compile_filter(text)
