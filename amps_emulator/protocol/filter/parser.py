"""Text -> AST.  One LALR parser (built once from ``grammar.lark``) with an inline
transformer, so no parse tree is materialised; every problem becomes a :class:`FilterError`.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from lark import Lark, Token, Transformer
from lark.exceptions import LarkError, UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from . import ast as A
from .errors import FilterError
from .functions import regex
from .modules import find_function

__all__ = ["parse", "unescape", "MAX_DEPTH"]

#: Deepest accepted expression tree.  AND / OR / IN lists and arithmetic chains (``/a + /b
#: - /c ...``) are n-ary, so long generated filters stay shallow; this only refuses
#: pathological nesting such as 500 nested NOTs.
MAX_DEPTH = 128

_GRAMMAR = (Path(__file__).with_name("grammar.lark")).read_text(encoding="utf-8")

_SIMPLE_ESCAPES = {"a": "\a", "b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r"}
_HEX = frozenset("0123456789abcdefABCDEF")
_OCT = frozenset("01234567")


def unescape(body: str, quote: str) -> str:
    """Process a quoted literal's body: AMPS backslash escapes and doubled quotes."""
    if "\\" not in body and quote * 2 not in body:
        return body
    out = []
    i = 0
    n = len(body)
    while i < n:
        ch = body[i]
        if ch == quote:  # only doubled quotes can occur inside the body
            out.append(quote)
            i += 2
            continue
        if ch != "\\" or i + 1 >= n:
            out.append(ch)
            i += 1
            continue
        nx = body[i + 1]
        if nx in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[nx])
            i += 2
        elif nx == "x" and i + 2 < n and body[i + 2] in _HEX:
            j = i + 2
            while j < n and j < i + 4 and body[j] in _HEX:
                j += 1
            out.append(chr(int(body[i + 2:j], 16)))
            i = j
        elif nx in _OCT:
            j = i + 1
            while j < n and j < i + 4 and body[j] in _OCT:
                j += 1
            out.append(chr(int(body[i + 1:j], 8)))
            i = j
        else:  # any other escaped character stands for itself
            out.append(nx)
            i += 2
    return "".join(out)


def _collapse_quotes(body: str, quote: str) -> str:
    """The body with doubled quotes made single but backslash pairs left alone."""
    if quote * 2 not in body:
        return body
    out = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            out.append(body[i:i + 2])
            i += 2
        elif ch == quote:
            out.append(quote)
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


_STEP_RE = re.compile(r"/(@?[^/\[]+)((?:\[\d+\])*)")
_COMPARE = {"==": "=", "=": "=", "!=": "!=", "<>": "!=", "<": "<", "<=": "<=", ">": ">",
            ">=": ">="}


def _is_tok(x, type_: str) -> bool:
    return isinstance(x, Token) and x.type == type_


def _flat(cls, a, b):
    terms = []
    for t in (a, b):
        if isinstance(t, cls):
            terms.extend(t.terms)
        else:
            terms.append(t)
    return cls(tuple(terms))


class _Chain:
    """An arithmetic chain while the parser is still adding to it (lists: appending is O(1),
    where extending a tuple at each operator would make a long sum quadratic).  A chain is
    the child of exactly one reduction, so it is extended in place; every other callback
    receives it finished (:func:`_done`)."""

    __slots__ = ("ops", "terms")

    def __init__(self, ops: list[str], terms: list) -> None:
        self.ops = ops
        self.terms = terms


def _done(x):
    return A.Arith(tuple(x.ops), tuple(x.terms)) if type(x) is _Chain else x


def _finishing(fn):
    def callback(self, c):
        return fn(self, [_done(x) for x in c])
    callback.__name__ = fn.__name__
    return callback


class _ToAst(Transformer):
    """Inline LALR callbacks: lark children (tokens and already-built nodes) -> AST nodes."""

    # -- logic
    def or_(self, c):
        return _flat(A.Or, c[0], c[2])

    def and_(self, c):
        return _flat(A.And, c[0], c[2])

    def not_(self, c):
        return A.Not(c[1])

    # -- predicates
    def compare(self, c):
        return A.Compare(_COMPARE[str(c[1])], c[0], c[2])

    def between(self, c):
        operand, neg, _kw, low, _and, high = c
        return A.Between(operand, low, high, neg is not None)

    def in_(self, c):
        operand, neg, _kw, items = c
        return A.In(operand, items, neg is not None)

    def like(self, c):
        operand, neg, _kw, lit = c
        if lit.raw:
            pattern = re.escape(lit.value)
        else:
            pattern = lit.source
        try:
            regex(pattern)
        except (re.error, OverflowError, RecursionError) as exc:
            raise FilterError(f"invalid LIKE pattern {lit.value!r}: {exc}") from None
        return A.Like(operand, pattern, neg is not None)

    def begins(self, c):
        operand, neg, _kw, _with, items = c
        return A.BeginsWith(operand, items, neg is not None)

    def ends(self, c):
        operand, neg, _kw, _with, items = c
        return A.EndsWith(operand, items, neg is not None)

    def is_null(self, c):
        operand, _is, neg, _null = c
        return A.IsNull(operand, neg is not None)

    def not_null(self, c):
        return A.IsNull(c[0], True)

    def is_nan(self, c):
        operand, _is, neg, _nan = c
        return A.IsNaN(operand, neg is not None)

    def expr_list(self, c):
        return tuple(c)

    def value_list(self, c):
        return c[0]

    def single_value(self, c):
        return (c[0],)

    def pattern(self, c):
        return c[0]

    # -- arithmetic
    def arith(self, c):
        left, tok, right = c
        op = "%" if _is_tok(tok, "MOD") else str(tok)
        right = _done(right)
        if type(left) is _Chain and A.same_level(left.ops[0], op):
            left.ops.append(op)  # (a parenthesised left operand too: same value)
            left.terms.append(right)
            return left
        return _Chain([op], [_done(left), right])

    def unary(self, c):
        op, x = c
        if str(op) == "+":
            return x
        if isinstance(x, A.Literal) and (type(x.value) is int or type(x.value) is float):
            return A.Literal(-x.value)
        return A.Negate(x)

    # -- atoms
    def number(self, c):
        text = str(c[0])
        if "." in text or "e" in text or "E" in text or len(text) > 20:
            return A.Literal(float(text))  # beyond 64 bits an integer becomes a double
        return A.Literal(int(text))

    def string(self, c):
        tok = c[0]
        text = str(tok)
        if tok.type == "RAW_STRING":
            body = text[2:-1]
            return A.Literal(body, source=body, raw=True)
        quote = text[0]
        body = text[1:-1]
        return A.Literal(unescape(body, quote), source=_collapse_quotes(body, quote))

    def null(self, c):
        return A.Literal(None)

    def nan(self, c):
        return A.Literal(math.nan)

    def true(self, c):
        return A.Literal(True)

    def false(self, c):
        return A.Literal(False)

    def path(self, c):
        steps: list[str | int] = []
        for name, idx in _STEP_RE.findall(str(c[0])):
            steps.append(name)
            if idx:
                steps.extend(int(i) for i in idx[1:-1].split("]["))
        return A.Identifier(tuple(steps))

    def bracket_path(self, c):
        inner = str(c[0])[1:-1]
        steps = inner.split("/")[1:]
        if not all(steps):
            raise FilterError(f"empty step in identifier {str(c[0])!r}",
                              c[0].start_pos)
        return A.Identifier(tuple(steps))

    def call(self, c):
        name_tok, given = c
        args: tuple[A.Expr, ...] = tuple(given or ())
        name = str(name_tok).upper()
        if name == "IF":
            if len(args) != 3:
                raise FilterError(f"IF takes 3 arguments, got {len(args)}", name_tok.start_pos)
            return A.If(*args)
        fn = find_function(name)
        if fn is None:
            raise FilterError(f"unknown function {str(name_tok)!r}", name_tok.start_pos)
        if len(args) < fn.min_args or (fn.max_args is not None and len(args) > fn.max_args):
            want = (str(fn.min_args) if fn.max_args == fn.min_args else
                    f"at least {fn.min_args}" if fn.max_args is None else
                    f"{fn.min_args} to {fn.max_args}")
            raise FilterError(f"{name} takes {want} argument(s), got {len(args)}",
                              name_tok.start_pos)
        if name == "REGEXP_REPLACE" and isinstance(args[1], A.Literal) and \
                isinstance(args[1].value, str) and args[1].value:
            try:
                regex(args[1].value)
            except (re.error, OverflowError, RecursionError) as exc:
                raise FilterError(f"invalid REGEXP_REPLACE pattern: {exc}",
                                  name_tok.start_pos) from None
        return A.Call(name, tuple(args))


for _name, _fn in list(vars(_ToAst).items()):
    if callable(_fn) and not _name.startswith("_") and _name != "arith":
        setattr(_ToAst, _name, _finishing(_fn))

_PARSER = Lark(_GRAMMAR, parser="lalr", lexer="contextual", maybe_placeholders=True,
               transformer=_ToAst(), cache=False)


def _describe(exc: UnexpectedInput, text: str) -> FilterError:
    if isinstance(exc, UnexpectedEOF):
        return FilterError("unexpected end of filter", len(text), text)
    if isinstance(exc, UnexpectedToken):
        tok = exc.token
        if tok.type == "$END":
            return FilterError("unexpected end of filter", len(text), text)
        return FilterError(f"unexpected {str(tok)!r}", tok.start_pos, text)
    if isinstance(exc, UnexpectedCharacters) and exc.pos_in_stream is not None:
        pos = exc.pos_in_stream
        return FilterError(f"unexpected character {text[pos]!r}", pos, text)
    return FilterError(str(exc), getattr(exc, "pos_in_stream", None), text)


def parse(text: str) -> A.Expr:
    """Parse expression text into an AST; raises :class:`FilterError`."""
    if not isinstance(text, str):
        raise FilterError(f"filter must be text, not {type(text).__name__}")
    try:
        root = _done(_PARSER.parse(text))
    except FilterError as exc:
        exc.text = text
        raise
    except UnexpectedInput as exc:
        raise _describe(exc, text) from None
    except LarkError as exc:  # e.g. a callback error wrapped by lark
        orig = getattr(exc, "orig_exc", None)
        if isinstance(orig, FilterError):
            orig.text = text
            raise orig from None
        raise FilterError(str(exc), None, text) from None
    except RecursionError:
        raise FilterError("filter nested too deeply", None, text) from None
    if not isinstance(root, A.NODES):  # pragma: no cover - the transformer builds nodes
        raise FilterError(f"not an expression: {type(root).__name__}", None, text)
    if A.depth(root) > MAX_DEPTH:
        raise FilterError(f"filter nested too deeply (more than {MAX_DEPTH} levels)", None,
                          text)
    return root
