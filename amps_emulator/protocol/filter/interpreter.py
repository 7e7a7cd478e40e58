"""Reference interpreter: a plain tree walk over the AST, written for obviousness, not speed.

It defines what the compiled filters must compute; the conformance table and the
property-based tests check the compiler against it.  ``evaluate(node, doc, ctx)`` returns
the expression's value (``True`` / ``False`` / ``None`` for predicates, ``None`` = NULL).
"""

from __future__ import annotations

from . import ast as A
from . import values as V
from .functions import regex
from .modules import function

__all__ = ["evaluate", "matches"]


def matches(node: A.Expr, doc, ctx=None) -> bool:
    """Filter semantics: the message matches only if the expression is TRUE."""
    return _cond(node, doc, ctx) is True


def _cond(node: A.Expr, doc, ctx):
    """Three-valued truth of a node used as a condition."""
    v = evaluate(node, doc, ctx)
    if isinstance(node, A.PREDICATES):
        return v
    return V.truth(v)


def evaluate(node: A.Expr, doc, ctx=None):
    ev = evaluate
    n = node
    if isinstance(n, A.Literal):
        return n.value
    if isinstance(n, A.Identifier):
        return V.resolve(doc, n.path)
    if isinstance(n, A.And):
        result = True
        for t in n.terms:
            result = V.and3(result, _cond(t, doc, ctx))
        return result
    if isinstance(n, A.Or):
        result = False
        for t in n.terms:
            result = V.or3(result, _cond(t, doc, ctx))
        return result
    if isinstance(n, A.Not):
        return V.not3(_cond(n.operand, doc, ctx))
    if isinstance(n, A.Compare):
        return V.compare3(n.op, ev(n.left, doc, ctx), ev(n.right, doc, ctx))
    if isinstance(n, A.Between):
        r = V.between3(ev(n.operand, doc, ctx), ev(n.low, doc, ctx), ev(n.high, doc, ctx))
        return V.not3(r) if n.negated else r
    if isinstance(n, A.In):
        r = V.in3(ev(n.operand, doc, ctx), [ev(i, doc, ctx) for i in n.items])
        return V.not3(r) if n.negated else r
    if isinstance(n, A.Like):
        r = V.like3(ev(n.operand, doc, ctx), regex(n.pattern))
        return V.not3(r) if n.negated else r
    if isinstance(n, (A.BeginsWith, A.EndsWith)):
        test = V.begins3 if isinstance(n, A.BeginsWith) else V.ends3
        r = test(ev(n.operand, doc, ctx), [ev(i, doc, ctx) for i in n.items])
        return V.not3(r) if n.negated else r
    if isinstance(n, A.IsNull):
        r = V.is_null(ev(n.operand, doc, ctx))
        return not r if n.negated else r
    if isinstance(n, A.IsNaN):
        r = V.is_nan(ev(n.operand, doc, ctx))
        return not r if n.negated else r
    if isinstance(n, A.Arith):
        result = ev(n.terms[0], doc, ctx)
        for op, t in zip(n.ops, n.terms[1:], strict=True):  # left to right: ((a + b) - c) ...
            result = V.arith(op, result, ev(t, doc, ctx))
        return result
    if isinstance(n, A.Negate):
        return V.negate(ev(n.operand, doc, ctx))
    if isinstance(n, A.If):
        if _cond(n.cond, doc, ctx) is True:
            return ev(n.then, doc, ctx)
        return ev(n.otherwise, doc, ctx)
    if isinstance(n, A.Call):
        fn = function(n.name)
        if fn.kind == "context":
            return fn.impl(ctx, *[ev(a, doc, ctx) for a in n.args])
        return fn.impl(*[ev(a, doc, ctx) for a in n.args])
    raise TypeError(f"not an AST node: {n!r}")
