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
from typing import Any, TypedDict

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
from tests.unit.test_filter_property import EDGE_VALUES, _same, documents, expressions

_ERRORS = (msgspec.DecodeError, UnicodeDecodeError, TypeError)

CHECK = """
def _check(_s):
    <PRE>
    return {test}
"""


def _full(body: bytes) -> Any:
    try:
        return msgspec.json.decode(body)
    except _ERRORS:
        return None


def reference_doc(names, body: bytes) -> Any:
    """The document the scan evaluated before the fields mode existed."""
    td = TypedDict("Fields", {n: Any for n in names}, total=False)  # type: ignore[misc]
    try:
        return msgspec.json.Decoder(td).decode(body)
    except _ERRORS:
        return _full(body)


def fields_eval(f, body: bytes, extra=()) -> bool:
    """What a scan loop built on the fields mode answers for ``body``."""
    ff = fields_filter(f)
    check = ff.build(CHECK)["_check"]
    try:
        s = ff.decoder_for(extra).decode(body)
    except _ERRORS:
        return f(_full(body))
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

BODIES = [
    b'{"id":5,"sym":"S005","px":12.34,"qty":5,"region":"eu","note":"xxxx"}',
    b'{"id":5,"qty":5,"region":"EU"}',
    b'{"id":5,"qty":5,"region":"Eu"}',
    b'{"id":5,"qty":5.0,"region":"eU"}',
    b'{"id":5,"qty":"5","region":"eu"}',
    b'{"id":5,"qty":"5.0","region":["x","eu"]}',
    b'{"id":5,"qty":5e0,"region":["EU"]}',
    b'{"id":5,"qty":[5],"region":"\\u0065u"}',  # escapes in a value
    b'{"i\\u0064":5,"q\\u0074y":5,"region":"e\\u0075"}',  # ... and in keys
    b'{"id":5,"region":"eu"}',  # missing field
    b'{"id":5,"qty":null,"region":"eu"}',  # null
    b'{"id":null,"qty":null}',
    b'{"id":5,"qty":true,"region":"eu"}',
    b'{"id":1,"qty":true}',
    b'{"id":0,"qty":false}',
    b'{"id":5,"qty":{"a":5},"region":{"x":"eu"}}',  # nested objects
    b'{"id":5,"qty":[],"region":[]}',
    b'{"id":5,"qty":[[5]],"region":[["eu"]]}',
    b'{"id":5,"qty":"","region":""}',
    b'{"id":18446744073709551616,"qty":18446744073709551616}',  # beyond 64 bits
    b'{"id":18446744073709551615,"qty":18446744073709551615}',
    b'{"id":-18446744073709551615,"qty":-18446744073709551616}',
    b'{"id":1180591620717411303424,"qty":1180591620717411303424.0}',
    b'{"id":-0.0,"qty":0}',
    b'{"id":5,"qty":5,"qty":6,"region":"eu"}',  # duplicate keys: the last one wins
    b'{"id":5,"qty":6,"qty":5,"region":"us","region":"eu"}',
    b'{"id":5,"qty":5,"region":"\xc3\xa9u"}',  # UTF-8
    b'{"id":5,"qty":5,"region":"eu","other":"\xff"}',  # bad UTF-8 in a field not read
    b'{"id":5,"qty":5,"region":"\xff"}',  # ... in a field read
    b'{"id":5,"qty":5,"region":"eu","big":1e400}',  # out of range, not read
    b'{"id":5,"qty":1e400}',  # ... read
    b'{"id":5,"qty":5,"region":"eu","note":1e400,"sym":"\xff"}',  # ... read only to sort
    b'{"id":5,"qty":5,"region":"eu"} x',  # trailing garbage
    b'{"id":5,"qty":5,"region":"eu"',  # truncated
    b' \n{"id":5,"qty":5,"region":"eu"}\n ',  # whitespace around
    b'[{"id":5,"qty":5,"region":"eu"}]',  # not an object: array
    b'[{"qty":5},{"id":5,"region":"EU"}]',
    b'5', b'"eu"', b'null', b'true', b'[]', b'{}', b'', b'not json', b'\xff\xfe',
    b'{"id":"abc","qty":"abc","region":"abc"}',
    b'{"id":"NaN","qty":"NaN","region":"NaN"}',
    b'{"id":2.5,"qty":2.5,"region":"a\\"b"}',
    b'{"id":3,"qty":-2,"region":"\\\\"}',
]

SCAN_FILTERS = [
    "/qty = /id",
    "/qty * 1 = 5 AND UPPER(/region) = 'EU'",
    "/qty = 5 AND /region = 'eu'",
    "/qty != /id", "NOT /qty = /id", "/qty < /id", "/qty >= /id", "NOT /qty > /id",
    "/qty + /id = 10", "/qty - /id < 0", "/qty * /id > 20", "/qty * 2.5 > 10", "/qty + 0 = 5",
    "/qty * -1 = -5", "/qty - 1 = 4", "/qty * 1 = 18446744073709551615",
    "/qty * 1 = 18446744073709551616", "/qty + 1 > 18446744073709551615",
    "/qty * 1.5 = 7.5", "/qty / 2 = 2", "/qty % 2 = 1",
    "UPPER(/region) = 'EU'", "UPPER(/region) != 'EU'", "NOT UPPER(/region) = 'EU'",
    "LOWER(/region) = 'eu'", "LOWER(/region) = 'EU'", "UPPER(/region) = 'eu'",
    "UPPER(/region) = 'ÉU'", "UPPER(/region) = 'TRUE'", "UPPER(/qty) = '5'",
    "UPPER(/region) IN ('EU', 'US')", "LOWER(/region) LIKE '^e'",
    "/region IN ('eu', 'us')", "/region LIKE 'u$'", "/region BEGINS WITH ('e')",
    "/qty BETWEEN 1 AND 5", "/qty NOT BETWEEN 1 AND 5", "/qty IN (5, 6)", "/qty NOT IN (5)",
    "/qty IS NULL", "/region IS NOT NULL", "/qty IS NAN", "/qty",
    "/region/x = 'eu'", "/qty/a = 5", "/region[0] = 'eu'", "/region[1] = 'eu'",
    "/qty = 5 OR /region = 'eu'", "(/qty = 5 OR /id = 1) AND NOT /region = 'us'",
    "IF(/qty > 1, /id, /qty) = 5", "COALESCE(/qty, /id) = 5", "LENGTH(/region) = 2",
    "/qty = /qty", "/qty * /qty = 25 AND /qty = 5",
]


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
            assert _same(e(doc), interpret(root, doc)), (text, doc)
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
                if all(_same(msgspec.json.decode(msgspec.json.encode(doc.get(n))), doc.get(n))
                       for n in ff.names):  # NaN / infinity do not survive JSON
                    assert check(s) is want, (t, doc)
    assert compiler.recoveries == before
