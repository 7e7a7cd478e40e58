"""Property: the compiled form and the reference interpreter always agree.

Random expression ASTs are printed to text, parsed, compiled, and evaluated on random
JSON-like documents, both as filters (bool) and as values (three-valued / any value).
Printing the parsed AST again must give text that parses to the same AST.
"""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amps_emulator.protocol.filter import (
    MessageContext,
    compile_ast,
    compile_expression,
    compile_filter,
    compiler,
    interpret,
    interpret_filter,
    parse,
    to_text,
)
from amps_emulator.protocol.filter import ast as A

# ---- documents ------------------------------------------------------------------------------

KEYS = ["a", "b", "c", "n", "l"]
scalars = st.one_of(
    st.none(), st.booleans(),
    st.integers(-5, 5), st.sampled_from([0, 1, 2, 10, -1, 2 ** 63, -(2 ** 70)]),
    st.sampled_from([0.0, -0.0, 1.0, 2.5, -3.5, 1e300, math.nan, math.inf]),
    st.sampled_from(["", "a", "b", "abc", "ABC", "1", "2.0", "10", "-3", "1e2", "true",
                     "false", "NaN", " 1", "x y", "a'b", "é"]),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.sampled_from(KEYS), inner, max_size=3)),
    max_leaves=8,
)
documents = st.one_of(
    st.dictionaries(st.sampled_from(KEYS), json_values, max_size=5),
    json_values,  # bodies that are not objects: arrays, scalars, None
)
contexts = st.one_of(st.none(), st.builds(
    MessageContext, topic=st.sampled_from([None, "orders", ""]),
    bookmark=st.sampled_from([None, "1|2|"]), client_name=st.sampled_from([None, "c1"]),
    message_size=st.sampled_from([None, 0, 100])))

# ---- expressions ----------------------------------------------------------------------------

paths = st.sampled_from([
    ("a",), ("b",), ("c",), ("n",), ("l",), ("n", "a"), ("n", "b"), ("l", 0), ("l", 1),
    ("l", "a"), ("n", "l", 0), ("l", 0, "b"), ("n", "n", "c"),
])
literal_values = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 12), st.sampled_from([0.5, 2.0, -1.5, 1e20]),
    st.just(math.nan),
    st.sampled_from(["", "a", "b", "abc", "1", "2.0", "10", "true", "x'y", "A\\b", "\t"]),
)
literals = literal_values.map(A.Literal)
identifiers = paths.map(A.Identifier)
PATTERNS = ["a", "^a", "b$", "^$", "(?i)ABC", "[0-9]", "1|2", "(.)\\1", "^-?\\d+(\\.\\d+)?$", "e"]

VALUE_FUNCS = {  # name: arity choices
    "UPPER": [1], "LOWER": [1], "LENGTH": [1], "REVERSE": [1], "ABS": [1], "SIGN": [1],
    "FLOOR": [1], "CEILING": [1], "COALESCE": [1, 2, 3], "CONCAT": [1, 2, 3],
    "SUBSTR": [2, 3], "INSTR": [2], "STREQUAL_I": [2], "LEFT": [2], "ROUND": [1, 2],
    "GREATEST": [1, 2], "LEAST": [2], "ARRAY_COUNT": [1], "ARRAY_MAX": [1],
    "ARRAY_MIN": [1], "ARRAY_SUM": [1], "TRIM": [1, 2], "REPLACE": [3], "TOPIC_NAME": [0],
    "BOOKMARK": [0], "CLIENT_NAME": [0], "MESSAGE_SIZE": [0], "CHAR_VALUE": [1],
    "TRUE_VALUE": [0], "NAN_VALUE": [0], "ARRAY_TO_STRING": [3],
}


def _calls(children):
    @st.composite
    def make(draw):
        name = draw(st.sampled_from(sorted(VALUE_FUNCS)))
        arity = draw(st.sampled_from(VALUE_FUNCS[name]))
        return A.Call(name, tuple(draw(children) for _ in range(arity)))
    return make()


def _extend(children):
    items = st.lists(children, min_size=1, max_size=4).map(tuple)
    neg = st.booleans()
    cmp_ops = st.sampled_from(A.COMPARE_OPS)
    return st.one_of(
        st.builds(A.Compare, cmp_ops, children, children),
        st.builds(A.Compare, cmp_ops, identifiers, literals),  # the specialised shapes
        st.builds(A.Compare, cmp_ops, literals, identifiers),
        st.builds(A.And, st.lists(children, min_size=2, max_size=3).map(tuple)),
        st.builds(A.Or, st.lists(children, min_size=2, max_size=3).map(tuple)),
        st.builds(A.Not, children),
        st.builds(A.Between, children, children, children, neg),
        st.builds(A.Between, identifiers, literals, literals, neg),
        st.builds(A.In, children, items, neg),
        st.builds(A.In, identifiers, st.lists(literals, min_size=1, max_size=4).map(tuple),
                  neg),
        st.builds(A.Like, children, st.sampled_from(PATTERNS), neg),
        st.builds(A.BeginsWith, children, items, neg),
        st.builds(A.EndsWith, identifiers, st.lists(literals, min_size=1, max_size=3)
                  .map(tuple), neg),
        st.builds(A.IsNull, children, neg),
        st.builds(A.IsNaN, children, neg),
        st.builds(A.Arith, st.sampled_from(A.ARITH_OPS), children, children),
        st.builds(A.Negate, children),
        st.builds(A.If, children, children, children),
        _calls(children),
    )


expressions = st.recursive(st.one_of(literals, identifiers), _extend, max_leaves=10)


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


SETTINGS = settings(max_examples=300, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@SETTINGS
@given(expressions, st.lists(documents, min_size=1, max_size=4), contexts)
def test_compiled_filter_agrees_with_interpreter(node, docs, ctx):
    text = to_text(node)
    root = parse(text)
    assert parse(to_text(root)) == root  # printing is faithful
    before = compiler.recoveries
    f = compile_filter(text)
    g = compile_filter("NOT (" + text + ")")  # exercises the FALSE mode
    for doc in docs:
        assert f(doc, ctx) is interpret_filter(root, doc, ctx), (text, doc)
        assert g(doc, ctx) is interpret_filter(A.Not(root), doc, ctx), (text, doc)
    assert compiler.recoveries == before, "compiled code raised; interpreter answered"


@SETTINGS
@given(expressions, st.lists(documents, min_size=1, max_size=4), contexts)
def test_compiled_value_agrees_with_interpreter(node, docs, ctx):
    text = to_text(node)
    root = parse(text)
    before = compiler.recoveries
    f = compile_expression(text)
    for doc in docs:
        got = f(doc, ctx)
        want = interpret(root, doc, ctx)
        assert _same(got, want), (text, doc, got, want)
    assert compiler.recoveries == before


@settings(max_examples=100, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(expressions, documents)
def test_compile_ast_without_text(node, doc):
    # ASTs built in code (not parsed) compile too, e.g. for the SOW planner's rewrites
    root = parse(to_text(node))
    assert compile_ast(root)(doc) is interpret_filter(root, doc)


# ---- exhaustive differential check of the specialised (inlined) shapes ----------------------

EDGE_VALUES = [
    None, True, False, 0, 1, 5, -2, 2 ** 64, 0.0, 1.0, 2.5, -0.5, math.nan, math.inf, "", "a",
    "abc", "B", "1", "5", "2.0", "1e0", "true", "false", "NaN", "abc\n", "x$", "\n", [],
    [1, "a"], ["", None],
    [math.nan], [[5]], {"x": 1}, [{"x": 1}],
]
EDGE_LITERALS = ["NULL", "NaN", "''", "1", "5", "-2", "2.5", "'a'", "'abc'", "'1'", "'2.0'",
                 "'true'", "TRUE", "FALSE"]
SET_LISTS = ["('a', 'abc')", "(1, 5)", "('1', 'a')", "(1, 'a')", "(2.5, NULL)", "('a', '')",
             "('5', 2.0)", "(NaN, 'abc')", "(TRUE, 0)", "(/b, 1)"]


def _edge_filters():
    out = []
    for op in A.COMPARE_OPS:
        for lit in EDGE_LITERALS:
            out.append(f"/a {op} {lit}")
            out.append(f"{lit} {op} /n/a")
    for items in SET_LISTS:
        out.append(f"/a IN {items}")
        out.append(f"/a NOT IN {items}")
    for pat in ["'a'", "'^$'", "'1'", "r'.'", "'(?i)TRUE'", "'^a'", "'c$'", "'ab'", "'\\$'"]:
        out.append(f"/a LIKE {pat}")
        out.append(f"/a NOT LIKE {pat}")
    for items in ["('a')", "('1', 'ab')", "(1)", "('')", "(/b)"]:
        out.append(f"/a BEGINS WITH {items}")
        out.append(f"/a NOT ENDS WITH {items}")
    for lo, hi in [("1", "5"), ("0.5", "2.5"), ("'a'", "'b'"), ("NULL", "5"), ("5", "1")]:
        out.append(f"/a BETWEEN {lo} AND {hi}")
        out.append(f"/a NOT BETWEEN {lo} AND {hi}")
    out += ["/a IS NULL", "/a IS NOT NULL", "/a IS NAN", "/a IS NOT NAN", "/a", "/n/a",
            "/a = 1 OR /a = 'abc'", "/n/a > 1 AND /n/a < 5", "/l[0] = 1", "/l/x = 1"]
    return out


def test_specialised_shapes_agree_exhaustively():
    before = compiler.recoveries
    filters = _edge_filters()
    docs = []
    for v in EDGE_VALUES:
        docs += [{"a": v, "b": v}, {"n": {"a": v}, "l": [v]}, {"l": v}]
    for text in filters:
        root = parse(text)
        f = compile_filter(text)
        g = compile_filter(f"NOT ({text})")
        e = compile_expression(text)
        for doc in docs:
            assert f(doc) is interpret_filter(root, doc), (text, doc)
            assert g(doc) is interpret_filter(A.Not(root), doc), (text, doc)
            assert _same(e(doc), interpret(root, doc)), (text, doc)
    assert compiler.recoveries == before
