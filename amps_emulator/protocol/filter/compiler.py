"""AST -> one generated Python function per filter (compiled once, cached by text).

The whole expression becomes a single ``def`` whose body is one Python expression, so the
hot path costs no per-node calls.  Every predicate is emitted in one of three modes:

* ``T`` - a Python ``bool`` expression, true iff the predicate is TRUE;
* ``F`` - true iff the predicate is FALSE (``NOT x`` in T mode is ``x`` in F mode; AND and
  OR swap under De Morgan), which keeps SQL three-valued logic exact without ever
  materialising NULL on the hot path;
* ``V`` - the three-valued value itself (for predicates used as values, and for
  :func:`compile_expression`).

Common shapes are inlined with a type test and a fallback to the general helper in
:mod:`~protocol.filter.values` (which defines the semantics), e.g. ``/f = 'IBM'`` becomes
``(v == 'IBM' or (type(v) is list and <any element helper>))`` and ``/q > 100`` becomes
``(v > 100 if type(v) is int or type(v) is float else <helper>)``.  ``IN`` over literals
uses frozensets, ``LIKE`` a precompiled regex, ``BEGINS WITH`` ``str.startswith(tuple)``; two
computed operands compare natively when both are numbers; ``+ - *`` run natively on two
ints inside the 64-bit range or two floats; ``UPPER(x) = 'LIT'`` / ``LOWER(...)`` is a set
lookup among the strings that case-map to the literal.  Subtrees without identifiers or
context functions are folded at compile time.

Safety: nothing from the filter text is pasted into the source except through ``repr()`` of
a ``str``/``int``/finite ``float``; everything else (sets, regexes, paths, NaN) is a named
constant in the function's globals.  Names in the source are generated, never taken from the
filter.  Two functions are built: a fast one for the usual ``dict`` body (fields read with
``dict.get``, nested paths through small generated step functions) and a generic one (every
identifier through :func:`~protocol.filter.values.resolve`) that the fast one delegates to
when the body is not an object.

Fields mode (:func:`~protocol.filter.fields.fields_filter`), the same filter generated for
scans over many stored bodies, lives in :mod:`.fields`, which uses :class:`Gen` and
:func:`recovery` from here (hence their public names).  What the generated code calls at run
time, and :class:`~protocol.filter.runtime.CompiledFilter`, are in :mod:`.runtime`.

The generated function never raises into the server: a zero-cost ``try`` hands any
unexpected exception to the reference interpreter (counted in ``recoveries``, which the
tests require to stay 0).  An expression too deep for Python's own compiler runs on the
interpreter instead (``source`` is then ``None``).
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from functools import lru_cache
from typing import Any

from . import ast as A
from . import pieces
from . import values as V
from .context import MessageContext
from .errors import FilterError
from .functions import regex
from .inline import is_num as _is_num
from .inline import literal_values as _literal_values
from .inline import plain_like as _plain_like
from .interpreter import evaluate as _interpret
from .interpreter import matches as _interpret_matches
from .modules import active_modules, function
from .parser import MAX_DEPTH, parse
from .pieces import exec_pieces, runs, weight
from .runtime import HELPERS, NOT_COMPUTED, CompiledFilter, InSpec, Interpreted, Runner

__all__ = ["compile_filter", "compile_expression", "compile_ast", "CACHE_SIZE",
           "CompiledFilter", "MAX_TEXT"]

CACHE_SIZE = 4096
#: an arithmetic chain of more terms is evaluated by one ``_chain`` call, not inline steps
INLINE_CHAIN = 8

_FLIP = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_NEGATE = {"=": "!=", "!=": "=", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}
_PYOP = {"=": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
_SIMPLE = re.compile(r"[A-Za-z_]\w*|-?\d+|'[^'\\]*'")


def _const_node(node: A.Expr, memo: dict[int, bool]) -> bool:
    """True if the node's value depends on neither the message nor the context. ``memo``: by
    ``id(node)``, so every node asked about must live as long as the memo (see
    :meth:`Gen.part`, which makes nodes of its own)."""
    key = id(node)
    r = memo.get(key)
    if r is not None:
        return r
    if isinstance(node, A.Identifier):
        r = False
    elif isinstance(node, A.Call):
        fn = function(node.name)
        r = fn.kind != "context" and fn.deterministic and all(_const_node(a, memo)
                                                              for a in node.args)
    else:
        r = all(_const_node(c, memo) for c in A.children(node))
    memo[key] = r
    return r


class Gen:
    """Source generator for one function (fast/dict variant or generic variant)."""

    def __init__(self, ns: dict, root_is_dict: bool, prefix: str,
                 fields: dict[str, str] | None = None):
        self.ns = ns
        self.dict_root = root_is_dict
        self.prefix = prefix
        #: fields mode: top-level field name -> attribute of the decoded struct ``_s``
        self.fields = fields
        self.tmp_n = 0
        self.pre: list[str] = []  # statements before the return (hoisted identifiers)
        self.defs: list[str] = []  # module-level helper defs (path step functions)
        self.hoisted: dict[tuple, str] = {}
        self.const_memo: dict[int, bool] = {}
        self.path_fns: dict[tuple, str] = {}
        self.weights: dict[int, int] = {}  # see .pieces
        #: the nodes made here (runs of a heavy AND/OR's terms): kept while the memos
        #: are, which go by id() (a node freed, another could be made at its address)
        self.made: list[A.Expr] = []

    # ---- names and constants
    def tmp(self) -> str:
        self.tmp_n += 1
        return f"_t{self.tmp_n}"

    def const(self, value, hint: str = "c") -> str:
        for k, v in self.ns.items():  # reuse identical constants (small tables)
            if k.startswith("_k") and type(v) is type(value) and v is value:
                return k
        name = f"_k{hint}{len(self.ns)}"
        self.ns[name] = value
        return name

    def lit(self, value) -> str:
        """Source for a literal value: repr() for str/int/finite float, else a constant."""
        t = type(value)
        if value is None or t is bool:
            return repr(value)
        if t is str:
            return repr(value)
        if t is int:
            return f"({value!r})" if value < 0 else repr(value)
        if t is float and math.isfinite(value):
            return f"({value!r})" if value < 0 or repr(value).startswith("-") else repr(value)
        return self.const(value)

    def bind(self, code: str) -> tuple[str, str]:
        """(first use, later uses) for a value used more than once in one expression."""
        if _SIMPLE.fullmatch(code):
            return code, code
        name = self.tmp()
        return f"({name} := {code})", name

    # ---- identifiers
    def prepare(self, *roots: A.Expr) -> None:
        counts = Counter(n.path for root in roots for n in A.walk(root)
                         if isinstance(n, A.Identifier))
        for path, k in counts.items():
            if k > 1:
                name = f"_v{len(self.hoisted)}"
                self.pre.append(f"{name} = {self.lookup(path)}")
                self.hoisted[path] = name

    def lookup(self, path: tuple) -> str:
        if self.fields is not None:
            attr = f"_s.{self.fields[path[0]]}"
            if len(path) == 1:
                return attr
            start = 1
        elif not self.dict_root:
            return f"_resolve(d, {self.const(path, 'p')})"
        elif len(path) == 1 and type(path[0]) is str:
            return f"d.get({path[0]!r})"
        else:
            start = 0
        fn = self.path_fns.get(path)
        if fn is None:
            fn = f"_path{self.prefix}{len(self.path_fns)}"
            self.path_fns[path] = fn
            lines = [f"def {fn}(x):"]
            for i, step in enumerate(path):
                if i < start:
                    continue
                if type(step) is str:
                    if i:
                        rest = self.const(path[i:], "p")
                        lines.append("    if type(x) is not dict:")
                        lines.append(f"        return None if x is None else _resolve(x, {rest})")
                    lines.append(f"    x = x.get({step!r})")
                else:
                    lines.append(f"    if type(x) is not list or len(x) <= {step}:")
                    lines.append("        return None")
                    lines.append(f"    x = x[{step}]")
            lines.append("    return x")
            self.defs.append("\n".join(lines))
        return f"{fn}({attr})" if start else f"{fn}(d)"

    # ---- value mode
    def val(self, n: A.Expr) -> str:
        if not isinstance(n, A.Literal) and _const_node(n, self.const_memo):
            try:
                return self.lit(_interpret(n, None, None))
            except Exception:  # pragma: no cover - fold only what evaluates cleanly
                pass
        if isinstance(n, A.Literal):
            return self.lit(n.value)
        if isinstance(n, A.Identifier):
            return self.hoisted.get(n.path) or self.lookup(n.path)
        if isinstance(n, A.And):
            return f"_all3(({', '.join(self.cond3(t) for t in n.terms)},))"
        if isinstance(n, A.Or):
            return f"_any3(({', '.join(self.cond3(t) for t in n.terms)},))"
        if isinstance(n, A.Not):
            return f"_not3({self.cond3(n.operand)})"
        if isinstance(n, A.Compare):
            return f"_cmp3({n.op!r}, {self.val(n.left)}, {self.val(n.right)})"
        if isinstance(n, (A.Between, A.In, A.Like, A.BeginsWith, A.EndsWith)):
            code = self.pred3(n)
            return f"_not3({code})" if n.negated else code
        if isinstance(n, A.IsNull):
            return f"{'not ' if n.negated else ''}_is_null({self.val(n.operand)})"
        if isinstance(n, A.IsNaN):
            return f"{'not ' if n.negated else ''}_is_nan({self.val(n.operand)})"
        if isinstance(n, A.Arith):
            return self.arith(n)
        if isinstance(n, A.Negate):
            return f"_negate({self.val(n.operand)})"
        if isinstance(n, A.If):
            return f"({self.val(n.then)} if {self.T(n.cond)} else {self.val(n.otherwise)})"
        if isinstance(n, A.Call):
            fn = function(n.name)
            name = self.const(fn.impl, "f")
            if fn.kind == "context":
                return f"{name}({', '.join(['ctx', *(self.val(a) for a in n.args)])})"
            if n.name in ("UPPER", "LOWER") and len(n.args) == 1:
                # AMPS case mapping is ASCII-only: str.upper/lower agree on ASCII text
                first, rest = self.bind(self.val(n.args[0]))
                method = n.name.lower()
                return (f"({rest}.{method}() if type({first}) is str and {rest}.isascii() "
                        f"else {name}({rest}))")
            return f"{name}({', '.join(self.val(a) for a in n.args)})"
        raise TypeError(f"not an AST node: {n!r}")

    def cond3(self, n: A.Expr) -> str:
        """Three-valued truth of a node used as a condition."""
        if isinstance(n, A.PREDICATES):
            return self.val(n)
        return f"_truth({self.val(n)})"

    def pred3(self, n: A.Between | A.In | A.Like | A.BeginsWith | A.EndsWith) -> str:
        """Three-valued value of BETWEEN / IN / LIKE / BEGINS / ENDS, ignoring ``negated``."""
        v = self.val(n.operand)
        if isinstance(n, A.Between):
            return f"_between3({v}, {self.val(n.low)}, {self.val(n.high)})"
        if isinstance(n, A.In):
            spec = self.in_spec(n)
            if spec is not None:
                return f"_in_lit3({v}, {self.const(spec, 's')})"
            return f"_in3({v}, ({', '.join(self.val(i) for i in n.items)},))"
        if isinstance(n, A.Like):
            return f"_like3({v}, {self.const(regex(n.pattern), 'r')})"
        helper = "_begins3" if isinstance(n, A.BeginsWith) else "_ends3"
        return f"{helper}({v}, ({', '.join(self.val(i) for i in n.items)},))"

    # ---- truth modes
    def T(self, n: A.Expr) -> str:
        return self.mode(n, True)

    def F(self, n: A.Expr) -> str:
        return self.mode(n, False)

    def mode(self, n: A.Expr, want: bool) -> str:
        """Python bool expression: the node is TRUE (``want``) / FALSE (``not want``)."""
        if _const_node(n, self.const_memo):
            try:
                value = _interpret(n, None, None)
            except Exception:  # pragma: no cover
                value = None
            else:
                r = value if isinstance(n, A.PREDICATES) else V.truth(value)
                return "True" if r is want else "False"
        if isinstance(n, A.And) or isinstance(n, A.Or):
            joiner = " and " if isinstance(n, A.And) == want else " or "
            if self.fields is None and weight(n, self.weights) > pieces.SPLIT_WEIGHT:
                parts = (self.part(run, n, want) for run in runs(n.terms, self.weights))
                return "(" + joiner.join(parts) + ")"
            return "(" + joiner.join(self.mode(t, want) for t in n.terms) + ")"
        if isinstance(n, A.Not):
            return self.mode(n.operand, not want)
        if isinstance(n, A.Compare):
            return self.compare(n, want)
        if isinstance(n, A.IsNull):
            first, rest = self.bind(self.val(n.operand))
            code = (f"({first} is None or {rest} == '' or "
                    f"(type({rest}) is list and _is_null({rest})))")
            return code if want != n.negated else f"(not {code})"
        if isinstance(n, A.IsNaN):
            positive = want != n.negated
            return f"{'' if positive else 'not '}_is_nan({self.val(n.operand)})"
        if isinstance(n, (A.Between, A.In, A.Like, A.BeginsWith, A.EndsWith)):
            return self.special(n, want != n.negated)
        if isinstance(n, A.PREDICATES):  # pragma: no cover - all predicates handled above
            return f"({self.val(n)} is {want})"
        return f"(_truth({self.val(n)}) is {want})"

    def part(self, terms: tuple[A.Expr, ...], node: A.And | A.Or, want: bool) -> str:
        """A run of the terms of a heavy AND/OR as the call of a function of its own (see
        :mod:`.pieces`), which reads the fields it uses itself."""
        sub = terms[0] if len(terms) == 1 else type(node)(terms)
        self.made.append(sub)
        saved = self.pre, self.hoisted
        self.pre, self.hoisted = [], {}
        try:
            self.prepare(sub)
            body = self.mode(sub, want)
            name = f"_part{self.prefix}{len(self.defs)}"  # (after the parts inside this one)
            self.defs.append("\n".join([f"def {name}(d, ctx=None):",
                                        *("    " + p for p in self.pre), f"    return {body}"]))
        finally:
            self.pre, self.hoisted = saved
        return f"{name}(d, ctx)"

    def values_part(self, terms: tuple[A.Expr, ...]) -> str:
        """A run of the operands of a long arithmetic chain as the call of a function of its
        own returning their values (a tuple), as :meth:`part` does for AND / OR."""
        saved = self.pre, self.hoisted
        self.pre, self.hoisted = [], {}
        try:
            self.prepare(*terms)
            body = ", ".join(self.val(t) for t in terms)
            name = f"_part{self.prefix}{len(self.defs)}"
            self.defs.append("\n".join([f"def {name}(d, ctx=None):",
                                        *("    " + p for p in self.pre), f"    return ({body},)"]))
        finally:
            self.pre, self.hoisted = saved
        return f"{name}(d, ctx)"

    # ---- comparisons
    def compare(self, n: A.Compare, want: bool) -> str:
        op, left, right = n.op, n.left, n.right
        memo = self.const_memo
        if _const_node(left, memo) and not _const_node(right, memo):
            op, left, right = _FLIP[op], right, left
        if not _const_node(right, memo):
            helper = "_cmp_t" if want else "_cmp_f"
            if _const_node(left, memo):
                return f"{helper}({op!r}, {self.val(left)}, {self.val(right)})"
            # two computed operands: numbers compare natively (NaN: see below)
            a1, a = self.bind(self.val(left))
            b1, b = self.bind(self.val(right))
            fast_op = op if want else _NEGATE[op]
            if fast_op == "!=":  # NaN != x is True in Python but NULL here
                fast = f"({a} != {b} and {a} == {a} and {b} == {b})"
            else:
                fast = f"{a} {_PYOP[fast_op]} {b}"
            return (f"({fast} if {_is_num(a1, a)} & {_is_num(b1, b)} "
                    f"else {helper}({op!r}, {a}, {b}))")
        lit = _interpret(right, None, None)
        fast_op = op if want else _NEGATE[op]
        slow = "_cmp_t" if want else "_cmp_f"
        t = type(lit)
        if lit is None or lit == "" or (t is float and lit != lit):
            return "False"  # a comparison with NULL / '' / NaN is never TRUE or FALSE
        L = self.lit(lit)
        if t is bool or (t is str and lit.lower() in ("true", "false")) or t not in (
                str, int, float):
            return f"{slow}({op!r}, {self.val(left)}, {L})"
        if t is str and op in ("=", "!=") and V.parse_number(lit) is None:
            code = self.case_compare(left, lit, fast_op == "=", f"{slow}({op!r}, {{}}, {L})")
            if code is not None:
                return code
        first, rest = self.bind(self.val(left))
        general = f"{slow}({op!r}, {rest}, {L})"
        if t is str:
            if op == "=" and want and V.parse_number(lit) is None:
                # only an equal string can be equal to a non-numeric string literal
                return f"({first} == {L} or (type({rest}) is list and {general}))"
            return (f"({rest} {_PYOP[fast_op]} {L} if type({first}) is str and {rest} "
                    f"else {general})")
        if fast_op == "!=":  # NaN != x is True in Python but NULL here
            fast = f"({rest} != {L} and {rest} == {rest})"
        else:
            fast = f"{rest} {_PYOP[fast_op]} {L}"
        return f"({fast} if {_is_num(first, rest)} else {general})"

    def case_compare(self, left: A.Expr, lit: str, equal: bool, general: str) -> str | None:
        """``UPPER(x) = 'LIT'`` / ``LOWER(x) = 'lit'`` (or ``!=``) with a non-numeric string
        literal: for a string ``x`` a set lookup among the strings that map to the literal
        (ASCII case mapping; at most 256 of them).  ``equal``: code for "the case-mapped
        value equals the literal" (else: "is a non-empty string other than it");
        ``general``: the full comparison with ``{}`` for the mapped value."""
        if not (isinstance(left, A.Call) and left.name in ("UPPER", "LOWER")
                and len(left.args) == 1) or _const_node(left.args[0], self.const_memo):
            return None
        upper = left.name == "UPPER"
        bad, twin = (str.islower, str.lower) if upper else (str.isupper, str.upper)
        options: list[tuple[str, ...]] = []
        mappable = True
        for c in lit:
            if c.isascii() and c.isalpha():
                if bad(c):
                    mappable = False  # no string maps to this literal
                    break
                options.append((c, twin(c)))
            else:
                options.append((c,))
        if mappable and sum(len(o) > 1 for o in options) > 8:
            return None
        pre = frozenset("".join(p) for p in itertools.product(*options)) if mappable and options \
            else frozenset()
        first, rest = self.bind(self.val(left.args[0]))
        P = self.const(pre, "set")
        fast = f"{rest} in {P}" if equal else f"({rest} not in {P} and {rest} != '')"
        impl = self.const(function(left.name).impl, "f")
        return f"({fast} if type({first}) is str else {general.format(f'{impl}({rest})')})"

    # ---- arithmetic
    def arith(self, n: A.Arith) -> str:
        """A chain: nested inline steps (see :meth:`step`) up to :data:`INLINE_CHAIN` terms,
        a longer one a single ``_chain`` call over its operands (flat code: Python's own
        parser refuses deep nesting, and compiling a step per term would cost seconds)."""
        memo = self.const_memo
        if len(n.terms) > INLINE_CHAIN:
            ops = self.const(n.ops, "o")
            if self.fields is None and weight(n, self.weights) > pieces.SPLIT_WEIGHT:
                parts = (self.values_part(run) for run in runs(n.terms, self.weights))
                return f"_chain({ops}, ({', '.join('*' + p for p in parts)},))"
            return f"_chain({ops}, ({', '.join(self.val(t) for t in n.terms)},))"
        first = n.terms[0]
        const = _const_node(first, memo)
        value = _interpret(first, None, None) if const else None  # (val folds it too)
        code = self.val(first)
        for op, right in zip(n.ops, n.terms[1:], strict=True):
            if const and _const_node(right, memo):  # a constant prefix is folded
                try:
                    value = V.arith(op, value, _interpret(right, None, None))
                except Exception:  # pragma: no cover - fold only what evaluates cleanly
                    pass
                else:
                    code = self.lit(value)
                    continue
            code = self.step(op, code, const, right)
            const = False
        return code

    def step(self, op: str, left: str, left_const: bool, right: A.Expr) -> str:
        """``left op right`` (``left``: code, ``left_const``: whether it is a constant):
        ``+ - *`` inline on two ints inside the 64-bit range (the result too, else a
        double, as :func:`values.arith` gives) or on two floats; anything else the helper."""
        memo = self.const_memo
        general = f"_arith({op!r}, {{a}}, {{b}})"
        int_lit: int | None = None  # an int literal inside the 64-bit range
        float_lit: float | None = None  # a finite float literal
        if isinstance(right, A.Literal):
            value = right.value
            if type(value) is int and -(1 << 64) < value < (1 << 64):
                int_lit = value
            elif type(value) is float and math.isfinite(value):
                float_lit = value
        if op not in ("+", "-", "*") or left_const or (
                _const_node(right, memo) and int_lit is None and float_lit is None):
            return general.format(a=left, b=self.val(right))
        a1, a = self.bind(left)
        r = self.tmp()
        ints = f"({r} if _NL < ({r} := {a} {op} {{b}}) < _L else _float({r}))"
        if int_lit is not None:
            L, FL = self.lit(int_lit), self.lit(float(int_lit))
            if int_lit == 0 and op != "*" or op == "*" and int_lit in (1, -1):
                ints = f"{a} {op} {{b}}"  # stays inside the (symmetric) range
            return (f"({ints.format(b=L)} if type({a1}) is int and _NL < {a} < _L else "
                    f"{a} {op} {FL} if type({a}) is float else {general.format(a=a, b=L)})")
        if float_lit is not None:
            L = self.lit(float_lit)
            return (f"({a} {op} {L} if type({a1}) is float else "
                    f"{general.format(a=a, b=L)})")
        b1, b = self.bind(self.val(right))
        return (f"(({ints.format(b=b)} if _NL < {a} < _L and _NL < {b} < _L else "
                f"{general.format(a=a, b=b)}) if (type({a1}) is int) & (type({b1}) is int) "
                f"else {a} {op} {b} if type({a}) is float and type({b}) is float else "
                f"{general.format(a=a, b=b)})")

    # ---- BETWEEN / IN / LIKE / BEGINS WITH / ENDS WITH
    def in_spec(self, n: A.In) -> InSpec | None:
        vals = _literal_values(n.items)
        if vals is None:
            return None
        if any(type(v) is bool for v in vals):
            return None
        strs = frozenset(v for v in vals if type(v) is str and v)
        nums = frozenset(v for v in vals if (type(v) is int or type(v) is float) and v == v)
        numstrs = frozenset(x for x in (V.parse_number(s) for s in strs) if x is not None)
        has_null = any(v is None or v == "" or (type(v) is float and v != v) for v in vals)
        # a boolean's answer is computed here once: testing it against every literal per
        # message cost milliseconds for an IN list of thousands
        bools = {True: V.in3(True, vals), False: V.in3(False, vals)}
        return (strs, nums, numstrs, has_null, bool(nums), bools)

    def special(self, n: A.Between | A.In | A.Like | A.BeginsWith | A.EndsWith, want: bool) -> str:
        """T/F code for BETWEEN, IN, LIKE, BEGINS/ENDS WITH; ``want`` already accounts for
        ``negated`` (True: code for 'the un-negated predicate is TRUE')."""
        is_ = "True" if want else "False"
        op_const = _const_node(n.operand, self.const_memo)
        if isinstance(n, A.In):
            spec = self.in_spec(n)
            if spec is None or op_const:
                return f"({self.pred3(n)} is {is_})"
            strs, nums, numstrs, has_null, _, _ = spec
            first, rest = self.bind(self.val(n.operand))
            general = f"(_in_lit3({rest}, {self.const(spec, 's')}) is {is_})"
            S = self.const(strs, "set")
            N = self.const(nums | numstrs, "set")
            if want:
                # a string matches only an equal string unless numbers are listed; a
                # number matches an equal number or numeric string literal
                str_code = f"{rest} in {S}" if not nums else general
                num_code = f"{rest} in {N}"
            elif not has_null:
                str_code = f"({rest} not in {S} and {rest} != '')" if not nums else general
                num_code = f"({rest} not in {N} and {rest} == {rest})"
            else:
                return f"(_in_lit3({first}, {self.const(spec, 's')}) is {is_})"
            return (f"({str_code} if type({first}) is str else "
                    f"{num_code} if {_is_num(rest, rest)} else {general})")
        if isinstance(n, A.Like) and not op_const:
            rx = regex(n.pattern)
            first, rest = self.bind(self.val(n.operand))
            plain = _plain_like(n.pattern)
            if plain is not None:
                kind, text = plain
                L = self.lit(text)
                if kind == "in":
                    fast = f"{L} in {rest}"
                elif kind == "begins":
                    fast = f"{rest}.startswith({L})"
                else:
                    NL = self.lit(text + "\n")
                    fast = f"({rest}.endswith({L}) or {rest}.endswith({NL}))"
                if not want:
                    fast = f"not {fast}"
            else:
                search = self.const(rx.search, "rs")
                fast = f"{search}({rest}) {'is not None' if want else 'is None'}"
            return (f"({fast} if type({first}) is str and {rest} "
                    f"else _like3({rest}, {self.const(rx, 'r')}) is {is_})")
        lits = _literal_values(n.items) if isinstance(n, (A.BeginsWith, A.EndsWith)) else None
        if isinstance(n, (A.BeginsWith, A.EndsWith)) and not op_const and lits is not None \
                and all(V.to_str(v) for v in lits):
            affixes = tuple(V.to_str(v) for v in lits)
            method = "startswith" if isinstance(n, A.BeginsWith) else "endswith"
            first, rest = self.bind(self.val(n.operand))
            fast = f"{rest}.{method}({self.const(affixes, 'a')})"
            if not want:
                fast = "not " + fast
            helper = "_begins3" if isinstance(n, A.BeginsWith) else "_ends3"
            items = self.const(tuple(lits), "a")
            return (f"({fast} if type({first}) is str and {rest} "
                    f"else {helper}({rest}, {items}) is {is_})")
        if isinstance(n, A.Between) and not op_const:
            memo = self.const_memo
            if _const_node(n.low, memo) and _const_node(n.high, memo):
                lo = V.first(_interpret(n.low, None, None))
                hi = V.first(_interpret(n.high, None, None))
                if all(type(b) in (int, float) and b == b for b in (lo, hi)):
                    first, rest = self.bind(self.val(n.operand))
                    LO, HI = self.lit(lo), self.lit(hi)
                    fast = (f"{LO} <= {rest} <= {HI}" if want else
                            f"({rest} < {LO} or {rest} > {HI})")
                    return (f"({fast} if {_is_num(first, rest)} else "
                            f"_between3({rest}, {LO}, {HI}) is {is_})")
        return f"({self.pred3(n)} is {is_})"


def _build(root: A.Expr, value_mode: bool) -> tuple[CompiledFilter, str]:
    ns: dict[str, Any] = dict(HELPERS)
    fast = Gen(ns, True, "f")
    generic = Gen(ns, False, "g")
    for g in (fast, generic):
        g.prepare(root)
    body_fast = fast.val(root) if value_mode else fast.T(root)
    body_generic = generic.val(root) if value_mode else generic.T(root)
    src = ["\n".join(["def _generic(d, ctx=None):", *("    " + s for s in generic.pre),
                      f"    return {body_generic}"]),
           "\n".join(["def _compiled(d, ctx=None):",
                      "    try:",
                      "        if type(d) is not dict:",
                      "            return _generic(d, ctx)",
                      *("        " + s for s in fast.pre),
                      f"        return {body_fast}",
                      "    except Exception:",  # zero cost until raised (CPython 3.11+)
                      "        return _recover(d, ctx)"])]
    ns["_recover"] = recovery(root, value_mode)
    pieces = fast.defs + generic.defs + src
    exec_pieces(pieces, ns, "<amps-filter>")  # source built only from generated names, repr()s
    source = "\n".join(pieces) + "\n"
    fn: CompiledFilter = ns["_compiled"]  # a plain function: compile_ast sets its attributes
    return fn, source


#: times a compiled filter raised and was answered by the interpreter (tests assert 0)
recoveries = 0


def recovery(root: A.Expr, value_mode: bool) -> Runner:
    """Safety net: answer with the reference interpreter, never raise into the server."""
    def recover(d: Any, ctx: MessageContext | None = None) -> Any:
        global recoveries
        recoveries += 1
        try:
            return _interpret(root, d, ctx) if value_mode else _interpret_matches(root, d, ctx)
        except Exception:
            return None if value_mode else False
    return recover


def compile_ast(root: A.Expr, text: str | None = None, value_mode: bool = False
                ) -> CompiledFilter:
    """Compile an AST.  Filter mode returns ``f(doc, ctx=None) -> bool``; value mode returns
    ``f(doc, ctx=None) -> value``.  The callable carries ``text``, ``ast``, ``source``
    (generated Python, ``None`` when interpreted), ``deterministic``, ``uses_context`` and
    ``paths`` (found once here, so that a query over a long filter does not walk it again)."""
    if A.depth(root) > MAX_DEPTH:
        raise FilterError(f"expression nested too deeply (more than {MAX_DEPTH} levels)")
    fn: CompiledFilter
    source: str | None
    try:
        fn, source = _build(root, value_mode)
    except (RecursionError, SyntaxError, MemoryError, ValueError, OverflowError):
        fn, source = Interpreted(root, value_mode), None
    calls: list[A.Call] = []
    paths: dict[tuple, None] = {}  # (what a query reads of each record: known here, once)
    for n in A.walk(root):
        if isinstance(n, A.Call):
            calls.append(n)
        elif isinstance(n, A.Identifier):
            paths[n.path] = None
    if text is None:
        try:
            text = A.to_text(root)
        except ValueError:  # an identifier no expression text can spell
            text = repr(root)
    fn.text = text
    fn.ast = root
    fn.source = source
    fn.value_mode = value_mode
    fn.deterministic = all(function(c.name).deterministic for c in calls)
    fn.uses_context = any(function(c.name).kind == "context" for c in calls)
    fn.paths = tuple(paths)
    fn.fields_cache = NOT_COMPUTED
    return fn


#: the longest filter or expression text accepted (parsing costs about 20 us a character:
#: this bounds one compile to seconds, done off the event loop by the server for long texts)
MAX_TEXT = 256 * 1024


@lru_cache(maxsize=CACHE_SIZE)
def _compile_cached(text: str, value_mode: bool, modules: frozenset[str]
                    ) -> CompiledFilter | FilterError:
    """The compiled callable, or the :class:`FilterError` (cached too: refusing the same long
    bad filter again must not cost a second parse). ``modules``: the function libraries
    loaded (:func:`~.modules.active_modules`), which parsing reads: a text may be valid
    under one set and not another."""
    try:
        try:
            root = parse(text)
        except RecursionError:
            raise FilterError("filter nested too deeply", None, text) from None
        return compile_ast(root, text, value_mode)
    except FilterError as exc:
        return exc
    except Exception as exc:  # anything the compiler did not foresee is still a bad filter
        return FilterError(f"{type(exc).__name__}: {exc}", None, text)


def _compiled(text: Any, value_mode: bool) -> CompiledFilter:
    what = "expression" if value_mode else "filter"
    if not isinstance(text, str):
        raise FilterError(f"{what} must be text, not {type(text).__name__}")
    if len(text) > MAX_TEXT:
        raise FilterError(f"{what} is {len(text)} characters long, more than {MAX_TEXT}")
    fn = _compile_cached(text, value_mode, active_modules())
    if isinstance(fn, FilterError):
        raise FilterError(fn.detail, fn.position, fn.text)
    return fn


def compile_filter(text: str) -> CompiledFilter:
    """Compile filter text (cached by text) into ``f(doc, ctx=None) -> bool``.

    ``f(doc)`` is True only if the expression is TRUE for the decoded JSON body ``doc``
    (NULL / unknown counts as no match).  Raises :class:`FilterError` for a bad filter
    (one longer than :data:`MAX_TEXT` included).
    """
    return _compiled(text, False)


def compile_expression(text: str) -> CompiledFilter:
    """Compile expression text (cached) into ``f(doc, ctx=None) -> value`` (None = NULL)."""
    return _compiled(text, True)
