"""Public API of protocol.filter: caching, attributes, AST shape, context, helpers."""

from __future__ import annotations

import math

import pytest

import amps_emulator.protocol.filter as pf
from amps_emulator.protocol.filter import (
    FilterError,
    MessageContext,
    compile_expression,
    compile_filter,
    evaluate_expression,
    parse,
    to_text,
)
from amps_emulator.protocol.filter import ast as A
from amps_emulator.protocol.filter.compiler import CACHE_SIZE, _compile_cached


def test_compile_is_cached_by_text_and_bounded():
    f1 = compile_filter("/cache_me = 1")
    assert compile_filter("/cache_me = 1") is f1
    assert compile_filter("/cache_me =  1") is not f1  # different text, same meaning
    info = _compile_cached.cache_info()
    assert info.maxsize == CACHE_SIZE > 0


def test_callable_attributes():
    text = "/a = 1 AND /b/c LIKE 'x'"
    f = compile_filter(text)
    assert f.text == text
    assert f.ast == A.And((A.Compare("=", A.Identifier(("a",)), A.Literal(1)),
                           A.Like(A.Identifier(("b", "c")), "x")))
    assert "def _compiled" in f.source
    assert f.deterministic is True and f.uses_context is False
    g = compile_filter("UNIX_TIMESTAMP() > 0 AND TOPIC_NAME() = 't'")
    assert g.deterministic is False and g.uses_context is True


def test_result_is_a_real_bool():
    f = compile_filter("/a = 1 OR /b > 2")
    for doc in ({"a": 1}, {"b": 3}, {}, {"a": None}, None, [], "x", 3):
        assert f(doc) in (True, False) and type(f(doc)) is bool
        assert type(f(doc, None)) is bool


def test_ast_is_planner_friendly():
    root = parse("/sym = 'IBM' AND /qty > 10 AND /side IN ('B', 'S') AND /px BETWEEN 1 AND 2"
                 " AND (/x = 1 OR /y = 2)")
    assert isinstance(root, A.And) and len(root.terms) == 5
    eq, gt, in_, btw, or_ = root.terms
    assert eq == A.Compare("=", A.Identifier(("sym",)), A.Literal("IBM"))
    assert gt.op == ">" and gt.right == A.Literal(10)
    assert in_ == A.In(A.Identifier(("side",)), (A.Literal("B"), A.Literal("S")))
    assert btw == A.Between(A.Identifier(("px",)), A.Literal(1), A.Literal(2))
    assert isinstance(or_, A.Or) and len(or_.terms) == 2
    assert parse("/a == 1").op == "=" and parse("/a <> 1").op == "!="
    assert parse("/a > -5").right == A.Literal(-5)  # negative literals are folded
    assert parse("/l[2]/x = 1").left == A.Identifier(("l", 2, "x"))
    assert parse("/a MOD 2 = 0").left.ops == ("%",)
    assert parse("IF(/a, 1, 2) = 1").left == A.If(A.Identifier(("a",)), A.Literal(1),
                                                  A.Literal(2))
    assert parse("upper(/a) = 'X'").left.name == "UPPER"
    nodes = list(A.walk(root))
    assert nodes[0] is root and sum(isinstance(n, A.Identifier) for n in nodes) == 6


def test_ast_nodes_are_hashable_and_nan_literals_equal():
    assert A.Literal(math.nan) == A.Literal(math.nan)
    assert hash(A.Literal(math.nan)) == hash(A.Literal(math.nan))
    assert A.Literal(1) != A.Literal(True) and A.Literal(1) != A.Literal(1.0)
    assert len({parse("/a = 1"), parse("/a == 1")}) == 1


@pytest.mark.parametrize("text", [
    "/a = 1 AND NOT (/b > 2 OR /c IS NULL)", "-/a * (2 + /b) MOD 3 = -1",
    "/s NOT LIKE '(?i)^x''y\\d' AND /t BEGINS WITH ('a', \"b\")",
    "[/odd name] IN (1, 'two', NULL, NaN, TRUE)", "IF(/a, CONCAT(/b, 'x'), NULL) IS NOT NULL",
    "/a NOT BETWEEN 1.5 AND 2e10", "'tab\\there' = /a", "/a IS NOT NAN",
])
def test_to_text_round_trips(text):
    root = parse(text)
    assert parse(to_text(root)) == root


def test_message_context():
    ctx = MessageContext(topic="t", bookmark="b", sow_key="k", correlation_id="c",
                         client_name="n")
    assert not hasattr(ctx, "__dict__")
    assert ctx.sub_id is None and ctx.lease_period is None and ctx.user is None
    with pytest.raises(AttributeError):
        ctx.unknown = 1
    f = compile_filter("TOPIC_NAME() = 't' AND BOOKMARK() = 'b' AND SOW_KEY() = 'k' AND "
                       "CORRELATION_ID() = 'c' AND CLIENT_NAME() = 'n'")
    assert f({}, ctx) is True
    assert f({}) is False
    assert f({}, MessageContext()) is False
    assert "topic='t'" in repr(ctx)
    ctx2 = MessageContext(timestamp=5.0)
    assert evaluate_expression("LAST_UPDATED()", {}, ctx2) == 5.0  # falls back to timestamp


def test_evaluate_expression():
    doc = {"qty": 3, "px": 2.5, "name": "x"}
    assert evaluate_expression("/qty * /px", doc) == 7.5
    assert evaluate_expression("/missing * 2", doc) is None
    assert evaluate_expression("/qty > 1", doc) is True
    assert evaluate_expression("/missing > 1", doc) is None
    assert evaluate_expression("CONCAT(/name, '-', /qty)", doc) == "x-3"
    assert evaluate_expression(compile_expression("/qty + 1"), doc) == 4
    assert compile_expression("/qty") is compile_expression("/qty")
    with pytest.raises(FilterError):
        evaluate_expression("/qty +", doc)


def test_decode_body_and_matching_decode_once(monkeypatch):
    assert pf.decode_body(b'{"a": 1}') == {"a": 1}
    assert pf.decode_body(b"not json") is None
    assert pf.decode_body(b"") is None
    assert pf.decode_body(b"[1, 2]") == [1, 2]
    calls = []
    real = pf._json_decode

    def counting(payload):
        calls.append(payload)
        return real(payload)

    monkeypatch.setattr(pf, "_json_decode", counting)
    subs = [compile_filter(f"/n > {i}") for i in range(50)] + [None]
    hits = pf.matching(subs, b'{"n": 10}')
    assert len(calls) == 1
    assert hits == subs[:10] + [None]
    calls.clear()
    assert pf.matching([None, None], b'{"n": 10}') == [None, None]
    assert calls == []  # no filter: never decoded


def test_non_object_bodies():
    assert compile_filter("/a IS NULL")(None) is True
    assert compile_filter("/a IS NULL")("text") is True
    assert compile_filter("/a = 1")([{"a": 1}]) is True
    assert compile_filter("1 = 1")(None) is True
    assert compile_filter("TOPIC_NAME() = 't'")(None, MessageContext(topic="t")) is True


def test_interpreter_fallback_when_python_cannot_compile(monkeypatch):
    from amps_emulator.protocol.filter import compiler

    def refuse(root, value_mode):
        raise SyntaxError("too many nested parentheses")

    monkeypatch.setattr(compiler, "_build", refuse)
    root = parse("/a > 1 AND /b IS NULL")
    f = compiler.compile_ast(root)
    assert f.source is None and f.text == "/a > 1 AND /b IS NULL"
    assert f({"a": 2}) is True and f({"a": 1}) is False and f(None) is False
    e = compiler.compile_ast(parse("/a * 2"), value_mode=True)
    assert e({"a": 4}) == 8 and e({}) is None


def test_safety_net_never_raises(monkeypatch):
    from amps_emulator.protocol.filter import compiler

    def broken_resolve(doc, path):
        raise KeyError("boom")

    before = compiler.recoveries
    g = compile_filter("/zz/yy = 1 OR /zz = 2")
    g.__globals__["_resolve"] = broken_resolve  # simulate a bug in a helper
    monkeypatch.setattr(compiler.V, "resolve", broken_resolve)
    assert g([1]) is False  # raises -> interpreter -> raises too -> False, never an error
    assert compiler.recoveries == before + 1
    compiler._compile_cached.cache_clear()  # do not leave the sabotaged function cached
