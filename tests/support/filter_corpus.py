"""A shared corpus for the filter tests (``tests/unit/protocol/filter/``) and the SOW scan's
(``tests/unit/sow/test_sow_scan.py``): hypothesis strategies for JSON-like ``documents`` and
random filter ``expressions`` (ASTs), ``EDGE_VALUES`` for exhaustive checks, tricky
``BODIES`` with the ``SCAN_FILTERS`` to run on them, ``reference_doc`` (the document a scan
evaluated before the fields mode) and ``same_value`` (equality with NaN equal to itself).
``client_filters`` is the text a hostile client may send as its filter, for the tests of
entitlement filters joined with it (``tests/unit/protocol/filter/test_filter_combine.py``,
``tests/unit/auth/test_entitlement_fuzz.py``)."""

from __future__ import annotations

import math
from typing import Any, TypedDict

import msgspec
from hypothesis import strategies as st

from amps_emulator.protocol.filter import MessageContext, to_text
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


def _chain(pairs):
    """An arithmetic chain as the parser builds it, left to right."""
    node = pairs[0][1]
    for op, t in pairs[1:]:
        node = A.Arith.binary(op, node, t)
    return node


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
        st.builds(A.Arith.binary, st.sampled_from(A.ARITH_OPS), children, children),
        st.lists(st.tuples(st.sampled_from(A.ARITH_OPS), children), min_size=2, max_size=6)
        .map(_chain),
        st.builds(A.Negate, children),
        st.builds(A.If, children, children, children),
        _calls(children),
    )


expressions = st.recursive(st.one_of(literals, identifiers), _extend, max_leaves=10)

# ---- a client's filter text, as an attacker writes it ------------------------------------------

#: pieces of it: parentheses, quotes, comment-like text, operators, injections
TOKENS = ["(", ")", "((", "))", "OR", "AND", "NOT", "1=1", "1=0", "TRUE", "FALSE", "NULL", "/a",
          "/b", "/n", "=", "<>", ">", "1", "2", "'x'", "'", '"', "''", "--", "/*", "*/", "#", ";",
          ",", "IN", "LIKE", "IS", "BETWEEN", "r'", "\\", "[/a]", "\n", "/a = 1", "/b = 1",
          "1=1) OR (1=1", ") OR (", "') OR ('1'='1"]

token_soup = st.lists(st.sampled_from(TOKENS), min_size=1, max_size=12).map(" ".join)
valid_filters = expressions.map(to_text)
#: a valid filter with an escape attempt around it: ``x) OR (y``
injections = st.builds(lambda x, op, y: f"{x}) {op} ({y}", valid_filters,
                       st.sampled_from(["OR", "AND", "OR NOT", "))OR((", ") OR ("]), valid_filters)
client_filters = st.one_of(token_soup, valid_filters, injections, st.text(max_size=40))


def same_value(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


EDGE_VALUES = [
    None, True, False, 0, 1, 5, -2, 2 ** 64, 0.0, 1.0, 2.5, -0.5, math.nan, math.inf, "", "a",
    "abc", "B", "1", "5", "2.0", "1e0", "true", "false", "NaN", "abc\n", "x$", "\n", [],
    [1, "a"], ["", None],
    [math.nan], [[5]], {"x": 1}, [{"x": 1}],
]

DECODE_ERRORS = (msgspec.DecodeError, UnicodeDecodeError, TypeError)


def full_doc(body: bytes) -> Any:
    try:
        return msgspec.json.decode(body)
    except DECODE_ERRORS:
        return None


def reference_doc(names, body: bytes) -> Any:
    """The document the scan evaluated before the fields mode existed."""
    td = TypedDict("Fields", {n: Any for n in names}, total=False)  # type: ignore[misc]
    try:
        return msgspec.json.Decoder(td).decode(body)
    except DECODE_ERRORS:
        return full_doc(body)


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
