"""What compiled filters are and what their generated code calls at run time.

:data:`HELPERS` is the namespace every generated function starts from (three-valued helpers
from :mod:`.values`, plus the few defined here); :class:`CompiledFilter` is the shape of what
:func:`~protocol.filter.compiler.compile_ast` returns, either the generated function itself or
an :class:`Interpreted` one.  Kept apart from :mod:`.compiler` (the code generator), which
:mod:`.fields` (fields mode) uses too: both build namespaces from :data:`HELPERS`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from . import ast as A
from . import values as V
from .context import MessageContext
from .interpreter import evaluate as _interpret
from .interpreter import matches as _interpret_matches

__all__ = ["HELPERS", "CompiledFilter", "Interpreted", "NOT_COMPUTED", "Runner", "InSpec",
           "LiteralValue"]

_NUM = frozenset((int, float))
_L = 1 << 64
_NL = -(1 << 64)

LiteralValue = bool | int | float | str | None
#: ``IN (literals)`` pre-split: non-empty strings, numbers, numbers the strings spell, whether
#: a NULL-ish item is listed, whether numbers are, and the answer for each boolean
InSpec = tuple[frozenset[str], frozenset[int | float], frozenset[int | float], bool, bool,
               dict[bool, "bool | None"]]


def _all3(results: Iterable[bool | None]) -> bool | None:
    seen_null = False
    for r in results:
        if r is False:
            return False
        if r is not True:
            seen_null = True
    return None if seen_null else True


def _cmp_t(op, a, b):
    return V.compare3(op, a, b) is True


def _cmp_f(op, a, b):
    return V.compare3(op, a, b) is False


def _in_lit3(v, spec):
    """``v IN (literals)`` three-valued, with the literal set pre-split by ``_in_spec``."""
    strs, nums, numstrs, has_null, check_num, bools = spec
    t = type(v)
    if t is str:
        if not v:
            return None
        if v in strs:
            return True
        if check_num:
            n = V.parse_number(v)
            if n is not None and n in nums:
                return True
        return None if has_null else False
    if t is int or t is float:
        if v != v:
            return None
        if v in nums or v in numstrs:
            return True
        return None if has_null else False
    if t is list:
        return V.any3(_in_lit3(x, spec) for x in V.flatten(v)) if v else None
    if t is bool:
        return bools[v]
    return None  # NULL or an object: not ordered against any literal


def _chain(ops: tuple[str, ...], values: tuple) -> Any:
    """A long arithmetic chain, left to right: what nested :func:`values.arith` calls give,
    with the generated code's fast path for ``+ - *`` on two ints inside the 64-bit range
    (the result too, else a double) or two floats."""
    r = values[0]
    i = 1
    for op in ops:
        b = values[i]
        i += 1
        if op == "%" or op == "/":
            r = V.arith(op, r, b)
        elif type(r) is int and type(b) is int and _NL < r < _L and _NL < b < _L:
            r = r + b if op == "+" else r - b if op == "-" else r * b
            if not _NL < r < _L:
                r = float(r)
        elif type(r) is float and type(b) is float:
            r = r + b if op == "+" else r - b if op == "-" else r * b
        else:
            r = V.arith(op, r, b)
    return r


HELPERS = {
    "_resolve": V.resolve, "_truth": V.truth, "_cmp3": V.compare3, "_cmp_t": _cmp_t,
    "_cmp_f": _cmp_f, "_all3": _all3, "_any3": V.any3, "_not3": V.not3, "_in3": V.in3,
    "_in_lit3": _in_lit3, "_between3": V.between3,
    "_like3": V.like3, "_begins3": V.begins3, "_ends3": V.ends3, "_is_null": V.is_null,
    "_is_nan": V.is_nan, "_arith": V.arith, "_negate": V.negate, "_NUM": _NUM,
    "_NAN": V.NAN, "_L": _L, "_NL": _NL, "_float": float, "_chain": _chain,
}


#: a compiled filter's ``fields_cache`` until :mod:`.fields` has looked at it
NOT_COMPUTED: object = object()


class CompiledFilter(Protocol):
    """What :func:`compile_ast` returns: ``f(doc, ctx=None)``, a ``bool`` in filter mode, the
    value (``None``: NULL) in value mode, with these attributes.  Usually the generated
    function itself (so that a call costs nothing more), else an :class:`Interpreted`."""

    text: str
    ast: A.Expr
    #: the generated Python, ``None`` when interpreted
    source: str | None
    value_mode: bool
    deterministic: bool
    uses_context: bool
    #: the paths of the fields it reads, each once, in the order they first appear
    paths: tuple[tuple, ...]
    #: fields mode's slot (:func:`~protocol.filter.fields.fields_filter`): NOT_COMPUTED,
    #: then its FieldsFilter or ``None``
    fields_cache: object

    def __call__(self, d: Any, ctx: MessageContext | None = None) -> Any: ...


Runner = Callable[[Any, "MessageContext | None"], Any]


class Interpreted:
    """Interpreter-backed compiled filter, for expressions too deep for Python's compiler
    (``source`` is ``None``; :func:`compile_ast` sets the other attributes)."""

    __slots__ = ("root", "text", "ast", "source", "value_mode", "deterministic",
                 "uses_context", "paths", "fields_cache")

    def __init__(self, root: A.Expr, value_mode: bool) -> None:
        self.root = root
        self.text = ""
        self.ast = root
        self.source: str | None = None
        self.value_mode = value_mode
        self.deterministic = True
        self.uses_context = False
        self.paths: tuple[tuple, ...] = ()
        self.fields_cache: object = NOT_COMPUTED

    def __call__(self, d: Any, ctx: MessageContext | None = None) -> Any:
        try:
            if self.value_mode:
                return _interpret(self.root, d, ctx)
            return _interpret_matches(self.root, d, ctx)
        except Exception:
            return None if self.value_mode else False
