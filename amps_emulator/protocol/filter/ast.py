"""Plain AST node classes for AMPS expressions.

Every node is a frozen, slotted dataclass: hashable, comparable with ``==`` and cheap to
inspect.  The parser builds these; the compiler, the reference interpreter and (later) the
SOW query planner consume them.  ``to_text(node)`` prints a node back as expression text
that parses to an equal node.

Node summary (``Expr`` is any node):

=================  ===============================================================
``Literal``        a constant: ``None`` (NULL), ``bool``, ``int``, ``float`` (NaN
                   included) or ``str``.  String literals keep ``source`` (the text
                   between the quotes, escapes not processed: what LIKE hands to the
                   regex engine) and ``raw`` (written ``r'...'``).
``Identifier``     an XPath-style field reference; ``path`` is a tuple of steps, each
                   a ``str`` (object key) or an ``int`` (0-based array index).
``And`` / ``Or``   n-ary logical connectives, ``terms`` flattened (no And directly
                   inside And).
``Not``            logical negation.
``Compare``        ``op`` is one of ``= != < <= > >=`` (``==`` and ``<>`` normalised).
``Between``        ``operand BETWEEN low AND high`` (inclusive), ``negated`` for NOT.
``In``             ``operand IN (items...)``, ``negated`` for NOT IN.
``Like``           ``operand LIKE pattern`` ; ``pattern`` is the regex text actually
                   compiled (a raw string is already escaped), ``negated`` for NOT LIKE.
``BeginsWith``     ``operand BEGINS WITH (items...)``.
``EndsWith``       ``operand ENDS WITH (items...)``.
``IsNull``         ``operand IS NULL`` (``negated``: IS NOT NULL / NOT NULL).
``IsNaN``          ``operand IS NAN`` (``negated``: IS NOT NAN).
``Arith``          a left-to-right arithmetic chain of one precedence level:
                   ``terms[0] ops[0] terms[1] ops[1] ...``, ``ops`` all in ``+ -``
                   or all in ``* / %`` (MOD is ``%``); n-ary so that a long sum
                   is one level of nesting, not one per operator.
``Negate``         unary minus on a non-literal (``-5`` is folded to ``Literal(-5)``).
``If``             ``IF(cond, then, otherwise)``.
``Call``           any other function; ``name`` upper-case, ``args`` a tuple.
=================  ===============================================================

Query-planner hints: a top-level ``And`` lists independent conjuncts; ``Compare`` with an
``Identifier`` on one side and a ``Literal`` on the other is an index candidate (``op``
``=`` for hash lookups, the others for ranges); so are ``In`` whose items are all
``Literal`` and ``Between`` with literal bounds.  Remember that identifiers are
array-aware ("any element") and that string/number comparisons follow the AMPS typing
rules in :mod:`protocol.filter.values`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

__all__ = [
    "Expr", "Literal", "Identifier", "And", "Or", "Not", "Compare", "Between", "In", "Like",
    "BeginsWith", "EndsWith", "IsNull", "IsNaN", "Arith", "Negate", "If", "Call",
    "COMPARE_OPS", "ARITH_OPS", "same_level", "NODES", "PREDICATES", "to_text", "walk", "children", "depth",
]

COMPARE_OPS = ("=", "!=", "<", "<=", ">", ">=")
ARITH_OPS = ("+", "-", "*", "/", "%")


@dataclass(frozen=True, slots=True)
class Literal:
    value: None | bool | int | float | str
    source: str | None = field(default=None, compare=False)  # strings: text between quotes
    raw: bool = field(default=False, compare=False)  # strings: written r'...'

    def __eq__(self, other: object) -> bool:  # NaN literals are equal to each other
        if not isinstance(other, Literal):
            return NotImplemented
        a, b = self.value, other.value
        if type(a) is not type(b):
            return False
        if type(a) is float and math.isnan(a):
            return math.isnan(b)  # type: ignore[arg-type]
        return a == b

    def __hash__(self) -> int:
        v = self.value
        if type(v) is float and math.isnan(v):
            return hash(("nan",))
        return hash((type(v), v))


@dataclass(frozen=True, slots=True)
class Identifier:
    path: tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class And:
    terms: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class Or:
    terms: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class Not:
    operand: Expr


@dataclass(frozen=True, slots=True)
class Compare:
    op: str
    left: Expr
    right: Expr


@dataclass(frozen=True, slots=True)
class Between:
    operand: Expr
    low: Expr
    high: Expr
    negated: bool = False


@dataclass(frozen=True, slots=True)
class In:
    operand: Expr
    items: tuple[Expr, ...]
    negated: bool = False


@dataclass(frozen=True, slots=True)
class Like:
    operand: Expr
    pattern: str
    negated: bool = False


@dataclass(frozen=True, slots=True)
class BeginsWith:
    operand: Expr
    items: tuple[Expr, ...]
    negated: bool = False


@dataclass(frozen=True, slots=True)
class EndsWith:
    operand: Expr
    items: tuple[Expr, ...]
    negated: bool = False


@dataclass(frozen=True, slots=True)
class IsNull:
    operand: Expr
    negated: bool = False


@dataclass(frozen=True, slots=True)
class IsNaN:
    operand: Expr
    negated: bool = False


@dataclass(frozen=True, slots=True)
class Arith:
    ops: tuple[str, ...]  # len(ops) == len(terms) - 1 >= 1
    terms: tuple[Expr, ...]

    @staticmethod
    def binary(op: str, left: Expr, right: Expr) -> Arith:
        """``left op right``; a left operand that is a chain of the same precedence level is
        extended (the parser's shape: ``a + b - c`` is one node)."""
        if isinstance(left, Arith) and same_level(left.ops[0], op):
            return Arith(left.ops + (op,), left.terms + (right,))
        return Arith((op,), (left, right))


def same_level(a: str, b: str) -> bool:
    """Whether two arithmetic operators have the same precedence (``+ -`` / ``* / %``)."""
    return (a in "+-") == (b in "+-")


@dataclass(frozen=True, slots=True)
class Negate:
    operand: Expr


@dataclass(frozen=True, slots=True)
class If:
    cond: Expr
    then: Expr
    otherwise: Expr


@dataclass(frozen=True, slots=True)
class Call:
    name: str
    args: tuple[Expr, ...] = ()


Expr = (Literal | Identifier | And | Or | Not | Compare | Between | In | Like | BeginsWith
        | EndsWith | IsNull | IsNaN | Arith | Negate | If | Call)

#: Every node class (``Expr`` as a tuple, for ``isinstance``).
NODES = (Literal, Identifier, And, Or, Not, Compare, Between, In, Like, BeginsWith, EndsWith,
         IsNull, IsNaN, Arith, Negate, If, Call)

#: Nodes whose value is a truth value (TRUE / FALSE / NULL).
PREDICATES = (And, Or, Not, Compare, Between, In, Like, BeginsWith, EndsWith, IsNull, IsNaN)


def walk(node: Expr):
    """Yield ``node`` and all nodes below it, parents first, in source order."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(children(n)))


def depth(node: Expr) -> int:
    """Nesting depth of the tree (a lone leaf is 1); computed without recursion."""
    best = 0
    stack = [(node, 1)]
    while stack:
        n, d = stack.pop()
        best = max(best, d)
        stack.extend((c, d + 1) for c in children(n))
    return best


def children(n: Expr) -> tuple:
    """Direct sub-expressions of a node, in source order."""
    if isinstance(n, (And, Or, Arith)):
        return n.terms
    if isinstance(n, (Not, Negate, IsNull, IsNaN, Like)):
        return (n.operand,)
    if isinstance(n, Compare):
        return (n.left, n.right)
    if isinstance(n, Between):
        return (n.operand, n.low, n.high)
    if isinstance(n, (In, BeginsWith, EndsWith)):
        return (n.operand,) + tuple(n.items)
    if isinstance(n, If):
        return (n.cond, n.then, n.otherwise)
    if isinstance(n, Call):
        return n.args
    return ()


# ---- printing ------------------------------------------------------------------------------

_STEP_RE = re.compile(r"@?\w(?:[\w.\-]*[\w.])?\Z")
_ESCAPES = {"\a": "\\a", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r",
            "\\": "\\\\", "'": "\\'"}


def _quote(s: str) -> str:
    out = []
    for ch in s:
        e = _ESCAPES.get(ch)
        if e is not None:
            out.append(e)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "'" + "".join(out) + "'"


def _number(v: int | float) -> str:
    if type(v) is int:
        return str(v)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "(1.0 / 0)" if v > 0 else "(-1.0 / 0)"
    r = repr(v)
    if "." not in r and "e" not in r and "n" not in r:
        r += ".0"
    if "e" in r and "." not in r.split("e")[0]:
        m, e = r.split("e")
        r = m + ".0e" + e
    return r


def _path_text(path: tuple[str | int, ...]) -> str:
    plain = all(isinstance(s, int) or _STEP_RE.match(s) for s in path)
    if plain and path and type(path[0]) is str:
        return "".join(f"[{s}]" if isinstance(s, int) else "/" + s for s in path)
    if all(type(s) is str and "]" not in s and "/" not in s and s for s in path) and path:
        return "[" + "".join("/" + s for s in path) + "]"  # type: ignore[operator]
    raise ValueError(f"identifier {path!r} cannot be written as expression text")


_PREC = {Or: 1, And: 2, Not: 3}


def _prec(n: Expr) -> int:
    if isinstance(n, Or):
        return 1
    if isinstance(n, And):
        return 2
    if isinstance(n, Not):
        return 3
    if isinstance(n, PREDICATES):
        return 4
    if isinstance(n, Arith):
        return 5 if n.ops[0] in "+-" else 6
    if isinstance(n, Negate):
        return 7
    if isinstance(n, Literal) and isinstance(n.value, (int, float)) and not isinstance(
            n.value, bool) and (n.value < 0 or math.isinf(n.value)):
        return 7
    return 8


def to_text(node: Expr) -> str:
    """Expression text for ``node``; parsing it yields an equal AST."""

    def sub(n: Expr, min_prec: int) -> str:
        t = to_text(n)
        return f"({t})" if _prec(n) < min_prec else t

    n = node
    if isinstance(n, Literal):
        v = n.value
        if v is None:
            return "NULL"
        if v is True:
            return "TRUE"
        if v is False:
            return "FALSE"
        if isinstance(v, str):
            return _quote(v)
        return _number(v)
    if isinstance(n, Identifier):
        return _path_text(n.path)
    if isinstance(n, (And, Or)):
        word = " AND " if isinstance(n, And) else " OR "
        p = _prec(n)
        return word.join(sub(t, p + 1) for t in n.terms)
    if isinstance(n, Not):
        return "NOT " + sub(n.operand, 3)
    if isinstance(n, Compare):
        return f"{sub(n.left, 5)} {n.op} {sub(n.right, 5)}"
    neg = " NOT" if getattr(n, "negated", False) else ""
    if isinstance(n, Between):
        return f"{sub(n.operand, 5)}{neg} BETWEEN {sub(n.low, 5)} AND {sub(n.high, 5)}"
    if isinstance(n, In):
        return f"{sub(n.operand, 5)}{neg} IN ({', '.join(to_text(i) for i in n.items)})"
    if isinstance(n, Like):
        return f"{sub(n.operand, 5)}{neg} LIKE {_pattern(n.pattern)}"
    if isinstance(n, (BeginsWith, EndsWith)):
        word = "BEGINS" if isinstance(n, BeginsWith) else "ENDS"
        return f"{sub(n.operand, 5)}{neg} {word} WITH ({', '.join(to_text(i) for i in n.items)})"
    if isinstance(n, IsNull):
        return f"{sub(n.operand, 5)} IS{neg} NULL"
    if isinstance(n, IsNaN):
        return f"{sub(n.operand, 5)} IS{neg} NAN"
    if isinstance(n, Arith):
        p = _prec(n)
        out = [sub(n.terms[0], p)]  # (a same-level chain there re-parses merged: same value)
        for op, t in zip(n.ops, n.terms[1:], strict=True):
            out.append(f" {'MOD' if op == '%' else op} {sub(t, p + 1)}")
        return "".join(out)
    if isinstance(n, Negate):
        return "-" + sub(n.operand, 7)
    if isinstance(n, If):
        return f"IF({to_text(n.cond)}, {to_text(n.then)}, {to_text(n.otherwise)})"
    if isinstance(n, Call):
        return f"{n.name}({', '.join(to_text(a) for a in n.args)})"
    raise TypeError(f"not an AST node: {n!r}")


def _pattern(p: str) -> str:
    """Quote a LIKE pattern: the text reaches the regex engine unchanged, so only lone
    quotes are doubled (a backslash pair is copied as it is)."""
    out = []
    i = 0
    while i < len(p):
        ch = p[i]
        if ch == "\\" and i + 1 < len(p):
            out.append(p[i:i + 2])
            i += 2
            continue
        out.append("''" if ch == "'" else ch)
        i += 1
    return "'" + "".join(out) + "'"
