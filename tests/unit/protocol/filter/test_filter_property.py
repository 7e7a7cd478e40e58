"""Property: the compiled form and the reference interpreter always agree.

Random expression ASTs are printed to text, parsed, compiled, and evaluated on random
JSON-like documents, both as filters (bool) and as values (three-valued / any value).
Printing the parsed AST again must give text that parses to the same AST.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amps_emulator.protocol.filter import ast as A
from amps_emulator.protocol.filter import (
    compile_ast,
    compile_expression,
    compile_filter,
    compiler,
    interpret,
    interpret_filter,
    parse,
    to_text,
)
from tests.support.filter_corpus import EDGE_VALUES, contexts, documents, expressions, same_value

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
        assert same_value(got, want), (text, doc, got, want)
    assert compiler.recoveries == before


@settings(max_examples=100, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(expressions, documents)
def test_compile_ast_without_text(node, doc):
    # ASTs built in code (not parsed) compile too, e.g. for the SOW planner's rewrites
    root = parse(to_text(node))
    assert compile_ast(root)(doc) is interpret_filter(root, doc)


# ---- exhaustive differential check of the specialised (inlined) shapes ----------------------

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
            assert same_value(e(doc), interpret(root, doc)), (text, doc)
    assert compiler.recoveries == before
