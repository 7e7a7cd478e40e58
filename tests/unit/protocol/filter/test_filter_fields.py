"""The fields mode of compiled filters (``compiler.fields_filter``), which SOW scans inline
into their loop: for every body it must answer exactly what the reference interpreter
answers on the document the scan used to evaluate (the body decoded with a ``TypedDict`` of
the fields the query reads; a body that is not a JSON object decoded whole, ``None`` if it
is not JSON).  Also the inlined shapes added for it (two computed operands compared,
``+ - *`` arithmetic, ``UPPER``/``LOWER`` equality), checked exhaustively on edge values in
both the usual compiled form and the fields mode.
"""

from __future__ import annotations

import math

import msgspec
import pytest
from hypothesis import HealthCheck, assume, given, settings
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
from amps_emulator.protocol.filter.fields import fields_filter
from tests.support.filter_corpus import (
    BODIES,
    DECODE_ERRORS,
    EDGE_VALUES,
    SCAN_FILTERS,
    documents,
    expressions,
    full_doc,
    reference_doc,
    same_value,
)

CHECK = """
def _check(_s):
    <PRE>
    return {test}
"""


def fields_eval(f, body: bytes, extra=()) -> bool:
    """What a scan loop built on the fields mode answers for ``body``."""
    ff = fields_filter(f)
    check = ff.build(CHECK)["_check"]
    try:
        s = ff.decoder_for(extra).decode(body)
    except DECODE_ERRORS:
        return f(full_doc(body))
    r = check(s)
    assert type(r) is bool
    return r


def agree(text: str, bodies, extra=()) -> None:
    root = parse(text)
    f = compile_filter(text)
    ff = fields_filter(f)
    assert ff is not None, text
    for body in bodies:
        doc = reference_doc(tuple(ff.names) + tuple(extra), body)
        want = interpret_filter(root, doc)
        assert f(doc) is want, (text, body)
        assert fields_eval(f, body, extra) is want, (text, body)


# ---- tricky bodies ------------------------------------------------------------------------

@pytest.mark.parametrize("text", SCAN_FILTERS)
def test_fields_mode_agrees_on_tricky_bodies(text):
    before = compiler.recoveries
    agree(text, BODIES)
    agree(text, BODIES, extra=("sym", "note"))  # a struct with more fields (orderby)
    assert compiler.recoveries == before


# ---- random filters and documents ---------------------------------------------------------

SETTINGS = settings(max_examples=300, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@SETTINGS
@given(expressions, st.lists(documents, min_size=1, max_size=4))
def test_fields_mode_agrees_with_interpreter(node, docs):
    text = to_text(node)
    f = compile_filter(text)
    g = compile_filter("NOT (" + text + ")")
    assume(fields_filter(f) is not None)
    before = compiler.recoveries
    bodies = [msgspec.json.encode(d) for d in docs]
    bodies += [b[:-1] for b in bodies if len(b) > 1]  # truncated: not JSON
    for h in (f, g):
        agree(h.text, bodies)
    assert compiler.recoveries == before


def test_fields_filter_availability():
    assert fields_filter(compile_filter("/a = 1 AND /b/c > 2")).names == ("a", "b")
    assert fields_filter(compile_filter("/a = /a")).names == ("a",)
    # nothing to decode, context needed, an identifier that does not start with a field
    # name (only ASTs built in code have them), expressions (not filters), other callables
    for text in ("1 = 1", "TOPIC_NAME() = 't' AND /a = 1", "/a = 1 AND BOOKMARK() = '1'"):
        assert fields_filter(compile_filter(text)) is None, text
    root = A.And((A.Compare("=", A.Identifier(("a",)), A.Literal(1)),
                  A.Compare("=", A.Identifier((0, "a")), A.Literal(1))))
    assert fields_filter(compile_ast(root)) is None
    # names msgspec cannot give a struct field: no fields mode (the scan keeps its loop)
    for text in ('[/a"b] = 1', "[/a\\b] = 1 AND /c = 2", "[/a\tb] = 1"):
        assert fields_filter(compile_filter(text)) is None, text
    assert fields_filter(compile_filter("/a = 1")).decoder_for(['a"b']) is None
    assert fields_filter(compile_expression("/a + 1")) is None
    assert fields_filter(lambda d, ctx=None: True) is None
    ff = fields_filter(compile_filter("/a = 1"))
    assert ff is fields_filter(compile_filter("/a = 1"))  # computed once
    s = ff.decoder_for(("z", "a")).decode(b'{"a":1,"z":2,"y":3}')
    assert msgspec.structs.asdict(s) == {"f0": 1, "x0": 2}
    assert ff.decoder.decode(b'{"b":1}').f0 is None


def test_odd_field_names():
    doc = {"Not Xpath Name": "x", "55": 7, "a-b": 3, "f.x": 8, "@attr": "at", "f0": 1}
    body = msgspec.json.encode(doc)
    for text in ("[/Not Xpath Name] = 'x'", "/55 = 7", "/a-b = 3", "/f.x = 8",
                 "/@attr = 'at'", "/f0 = 1 AND /a-b = 3", "/55 + /f0 = 8"):
        f = compile_filter(text)
        assert f(doc) is True, text
        assert fields_eval(f, body) is True, text


# ---- the inlined shapes, exhaustively -----------------------------------------------------

def _shape_filters():
    out = []
    for op in A.COMPARE_OPS:
        out += [f"/a {op} /b", f"/a {op} /n/a", f"/a + /b {op} 5", f"/a * 1 {op} 5",
                f"/a - 2.5 {op} /b", f"UPPER(/a) {op} 'ABC'", f"LOWER(/a) {op} 'abc'",
                f"UPPER(/a) {op} 'B'", f"LOWER(/a) {op} 'TRUE'", f"UPPER(/a) {op} 'É'"]
    for op in A.ARITH_OPS:
        out += [f"/a {op} /b", f"/a {op} 1", f"/a {op} -2", f"/a {op} 0", f"/a {op} 2.5",
                f"/a {op} 18446744073709551615", f"/a {op} 18446744073709551616",
                f"/a {op} NULL", f"/a {op} 'x'"]
    out += ["UPPER(/a)", "LOWER(/a)", "UPPER(/a) = LOWER(/b)"]
    return out


WIDE_VALUES = EDGE_VALUES + [2 ** 64 - 1, -(2 ** 64) + 1, 2 ** 63, -(2 ** 64), 2 ** 70, 1e300,
                             -math.inf, "ABC", "aBc", "Abc", "b", "B", "É", "é", "TRUE",
                             "tRUE", "1e400", [2, 3], [None, 5], ["abc"], -0.0]


def test_inlined_shapes_agree_exhaustively():
    before = compiler.recoveries
    docs = []
    for v in WIDE_VALUES:
        for w in (5, v, "abc", None, 2.5, [1, "B"]):
            docs += [{"a": v, "b": w}, {"a": w, "b": v, "n": {"a": v}}]
    for text in _shape_filters():
        root = parse(text)
        e = compile_expression(text)
        for doc in docs:
            assert same_value(e(doc), interpret(root, doc)), (text, doc)
        if not isinstance(root, A.PREDICATES):
            continue
        for t in (text, f"NOT ({text})"):
            r = parse(t)
            f = compile_filter(t)
            ff = fields_filter(f)
            check = ff.build(CHECK)["_check"]
            for doc in docs:
                want = interpret_filter(r, doc)
                assert f(doc) is want, (t, doc)
                s = ff.decoder.decode(msgspec.json.encode(doc))
                if all(same_value(msgspec.json.decode(msgspec.json.encode(doc.get(n))), doc.get(n))
                       for n in ff.names):  # NaN / infinity do not survive JSON
                    assert check(s) is want, (t, doc)
    assert compiler.recoveries == before
