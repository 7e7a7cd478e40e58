"""AMPS value model: typing, conversion and comparison rules, NULL/NaN, three-valued logic.

Values are plain Python objects taken straight from ``msgspec.json.decode``:

* ``None``                  NULL (a missing field or JSON ``null``)
* ``bool``                  Boolean; counts as 1 / 0 where a number is wanted and as the
                            text ``true`` / ``false`` against a non-numeric string
* ``int`` / ``float``       Integer / floating point (``float('nan')`` is NaN)
* ``str``                   String.  The operators treat ``''`` as NULL.
* ``list``                  an array (possibly nested; always used flattened).  Predicates
                            (comparisons, LIKE, IN, BEGINS/ENDS WITH, BETWEEN) are true if
                            *any* element satisfies them; arithmetic and functions use the
                            first element; an empty array is NULL.
* ``dict``                  a nested object: not NULL, but compares / computes as NULL.

Rules (from the AMPS expression documentation):

* String vs string compares as strings (``'2.000' <> '2.0'``).  When one side is a number,
  the string is converted; if it does not look like a number (same forms as numeric
  literals), the string is greater than any number.
* Comparisons with NULL (or ``''``) are NULL; so are comparisons with NaN.
* Arithmetic: NULL in -> NULL out; NaN in -> NaN out; any float -> float; int op int ->
  int, with ``/`` truncating toward zero and ``%`` keeping the sign of the dividend.
  A string that is not a number converts to NaN.
* AND/OR/NOT use SQL three-valued logic (``None`` is NULL/unknown).

Both the compiled filters and the reference interpreter call these functions; the
compiler only inlines special cases that give the same answers.
"""

from __future__ import annotations

import math
import re

__all__ = [
    "NAN", "parse_number", "to_num", "to_str", "first", "flatten", "elements", "truth",
    "order", "compare", "compare3", "any3", "and3", "or3", "not3", "in3", "between3",
    "like3", "begins3", "ends3", "is_null", "is_nan", "arith", "negate", "resolve",
    "fmt_float", "ACCEPT",
]

NAN = float("nan")

# Same forms as numeric literals in expressions, optionally signed: 42, -3.5, 3., .5, 6e23
_NUMBER_RE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_number_match = _NUMBER_RE.fullmatch


def parse_number(s: str) -> int | float | None:
    """The number a string spells, or ``None`` if it is not in a recognised numeric form."""
    if _number_match(s) is None:
        return None
    if "." in s or "e" in s or "E" in s or len(s) > 20:
        return float(s)  # beyond 64 bits an integer is carried as a double
    return int(s)


def fmt_float(v: float) -> str:
    if v != v:
        return "NaN"
    return repr(v)


_INT_LIMIT = 1 << 64


def _int_result(r: int):
    """Integers are 64-bit in AMPS; a result beyond that range is carried as a double."""
    if -_INT_LIMIT < r < _INT_LIMIT:
        return r
    return float(r)


def flatten(v: list) -> list:
    """Elements of a (possibly nested) array, nested arrays expanded in place."""
    for x in v:
        if type(x) is list:
            break
    else:
        return v
    out: list = []
    for x in v:
        if type(x) is list:
            out.extend(flatten(x))
        else:
            out.append(x)
    return out


def elements(v) -> list:
    """The values a predicate looks at: every element of an array, else the value itself."""
    return flatten(v) if type(v) is list else [v]


def first(v):
    """Scalar view of a value: the first element of an array (NULL if empty)."""
    while type(v) is list:
        if not v:
            return None
        if type(v[0]) is not list:
            return v[0]
        f = flatten(v)
        return f[0] if f else None
    return v


def to_num(v):
    """Numeric view for arithmetic and numeric functions: NULL -> None; bad string -> NaN."""
    t = type(v)
    if t is int or t is float:
        return v
    if t is str:
        if not v:
            return None
        n = parse_number(v)
        return NAN if n is None else n
    if t is bool:
        return int(v)
    if t is list:
        return to_num(first(v))
    return None


def to_str(v):
    """String view for string functions and LIKE: NULL -> None (``''`` stays ``''``)."""
    t = type(v)
    if t is str:
        return v
    if t is bool:
        return "true" if v else "false"
    if t is int:
        if -_INT_LIMIT < v < _INT_LIMIT:
            return str(v)
        return fmt_float(_float(v))
    if t is float:
        return fmt_float(v)
    if t is list:
        return to_str(first(v))
    return None


def truth(v):
    """Truth value of a non-predicate used where a condition is wanted (TRUE/FALSE/NULL)."""
    t = type(v)
    if t is bool:
        return v
    if v is None:
        return None
    if t is int:
        return v != 0
    if t is float:
        return None if v != v else v != 0.0
    if t is str:
        if not v:
            return None
        n = parse_number(v)
        if n is None:
            low = v.lower()
            return True if low == "true" else False if low == "false" else None
        return None if n != n else n != 0
    if t is list:
        return truth(first(v))
    return None


# ---- comparison ---------------------------------------------------------------------------

def _ncmp(x, y):
    if x != x or y != y:
        return None
    return (x > y) - (x < y)


def order(a, b):
    """Scalar ordering under AMPS rules: -1, 0, 1, or ``None`` when unknown (NULL/NaN)."""
    ta = type(a)
    tb = type(b)
    if ta is str and tb is str:
        if not a or not b:
            return None
        return (a > b) - (a < b)
    if a is None or b is None:
        return None
    if ta is bool:
        if tb is str:
            if not b:
                return None
            nb = parse_number(b)
            if nb is None:
                sa = "true" if a else "false"
                return (sa > b) - (sa < b)
            return _ncmp(int(a), nb)
        a = int(a)
        ta = int
    if tb is bool:
        if ta is str:
            if not a:
                return None
            na = parse_number(a)
            if na is None:
                sb = "true" if b else "false"
                return (a > sb) - (a < sb)
            return _ncmp(na, int(b))
        b = int(b)
        tb = int
    if ta is int or ta is float:
        if tb is int or tb is float:
            return _ncmp(a, b)
        if tb is str:
            if not b or a != a:
                return None
            nb = parse_number(b)
            return -1 if nb is None else _ncmp(a, nb)
        return None
    if ta is str and (tb is int or tb is float):
        if not a or b != b:
            return None
        na = parse_number(a)
        return 1 if na is None else _ncmp(na, b)
    return None


#: orderings that make each comparison operator true
ACCEPT = {
    "=": frozenset((0,)), "!=": frozenset((-1, 1)), "<": frozenset((-1,)),
    "<=": frozenset((-1, 0)), ">": frozenset((1,)), ">=": frozenset((0, 1)),
}


def compare(op: str, a, b):
    """Scalar comparison, three-valued."""
    o = order(a, b)
    if o is None:
        return None
    return o in ACCEPT[op]


def any3(results) -> bool | None:
    """SQL ANY: TRUE if any is TRUE, FALSE if all are FALSE, else NULL (none at all: NULL)."""
    seen_false = False
    seen_null = False
    for r in results:
        if r is True:
            return True
        if r is False:
            seen_false = True
        else:
            seen_null = True
    if seen_false and not seen_null:
        return False
    return None


def compare3(op: str, a, b):
    """Array-aware comparison: any element of ``a`` against any element of ``b``."""
    if type(a) is list or type(b) is list:
        acc = ACCEPT[op]
        ea = elements(a)
        eb = elements(b)
        return any3((None if (o := order(x, y)) is None else o in acc) for x in ea for y in eb)
    o = order(a, b)
    if o is None:
        return None
    return o in ACCEPT[op]


def and3(a, b):
    if a is False or b is False:
        return False
    if a is True and b is True:
        return True
    return None


def or3(a, b):
    if a is True or b is True:
        return True
    if a is False and b is False:
        return False
    return None


def not3(a):
    return None if a is None else not a


def in3(v, items: list | tuple):
    """``v IN (items)``: OR of array-aware equalities."""
    r: bool | None = False
    for item in items:
        c = compare3("=", v, item)
        if c is True:
            return True
        if c is None:
            r = None
    return r


def between3(v, lo, hi):
    lo = first(lo)
    hi = first(hi)
    return any3(and3(compare(">=", x, lo), compare("<=", x, hi)) for x in elements(v))


def like3(v, rx):
    """``v LIKE pattern`` with ``rx`` a compiled regex (unanchored search)."""
    def one(x):
        s = to_str(x)
        if not s:
            return None
        return rx.search(s) is not None
    return any3(one(x) for x in elements(v))


def _affix3(v, items, test):
    def one(x, p):
        s = to_str(x)
        ps = to_str(p)
        if not s or not ps:
            return None
        return test(s, ps)
    return any3(one(x, p) for x in elements(v) for item in items for p in elements(item))


def begins3(v, items):
    return _affix3(v, items, str.startswith)


def ends3(v, items):
    return _affix3(v, items, str.endswith)


def is_null(v) -> bool:
    """IS NULL: missing, JSON null, empty string, or an empty array."""
    if v is None or v == "":
        return True
    if type(v) is list:
        return not flatten(v)
    return False


def is_nan(v) -> bool:
    """IS NAN: the value, converted to a number, is NaN (NULL is not NaN)."""
    n = to_num(v)
    return n is not None and n != n


# ---- arithmetic ---------------------------------------------------------------------------

def _idiv(x: int, y: int):
    if y == 0:
        return NAN
    q = abs(x) // abs(y)
    return q if (x < 0) == (y < 0) else -q


def _imod(x: int, y: int):
    if y == 0:
        return NAN
    r = abs(x) % abs(y)
    return -r if x < 0 else r


def _fdiv(x: float, y: float) -> float:
    try:
        return x / y
    except ZeroDivisionError:
        if x != x or x == 0:
            return NAN
        return math.copysign(math.inf, x) * math.copysign(1.0, y)


def _fmod(x: float, y: float) -> float:
    try:
        return math.fmod(x, y)
    except ValueError:
        return NAN


def _float(x) -> float:
    try:
        return float(x)
    except OverflowError:
        return math.inf if x > 0 else -math.inf


def arith(op: str, a, b):
    """Binary arithmetic under the AMPS type promotion rules."""
    x = to_num(a)
    y = to_num(b)
    if x is None or y is None:
        return None
    if x != x or y != y:
        return NAN
    if type(x) is int and type(y) is int and -_INT_LIMIT < x < _INT_LIMIT and \
            -_INT_LIMIT < y < _INT_LIMIT:
        if op == "+":
            return _int_result(x + y)
        if op == "-":
            return _int_result(x - y)
        if op == "*":
            return _int_result(x * y)
        if op == "/":
            return _idiv(x, y)
        return _imod(x, y)
    x = _float(x)
    y = _float(y)
    if op == "+":
        return x + y
    if op == "-":
        return x - y
    if op == "*":
        return x * y
    if op == "/":
        return _fdiv(x, y)
    return _fmod(x, y)


def negate(a):
    x = to_num(a)
    if x is None:
        return None
    return _int_result(-x) if type(x) is int else -x


# ---- identifiers --------------------------------------------------------------------------

def _key_step(x, key: str, out: list) -> bool:
    """Append the values of field ``key`` of ``x``; True if an array was traversed."""
    if type(x) is dict:
        if key in x:
            out.append(x[key])
        return False
    if type(x) is list:
        for e in x:
            _key_step(e, key, out)
        return True
    return False


def resolve(doc, path: tuple):
    """Value of an XPath-style identifier in a decoded JSON document.

    A ``str`` step selects an object field; on an array it selects that field of every
    element (so ``/items/price`` yields all prices).  An ``int`` step selects an array
    element (0-based).  A path that went through an array yields a flat list of every
    value found; otherwise the single value (a list if the field is an array).  Nothing
    found is ``None``.
    """
    vals = [doc]
    multi = False
    for step in path:
        nxt: list = []
        if type(step) is str:
            for x in vals:
                if _key_step(x, step, nxt):
                    multi = True
        else:
            for x in vals:
                if type(x) is list and step < len(x):
                    nxt.append(x[step])
        vals = nxt
        if not vals:
            return None
    if multi:
        return flatten(vals)
    return vals[0]
