"""Bad filters: every one raises FilterError (a CommandError with reason "bad filter")."""

from __future__ import annotations

import pytest

from amps_emulator.protocol.filter import FilterError, compile_expression, compile_filter
from amps_emulator.protocol.reasons import BAD_FILTER, CommandError

BAD = [
    # syntax
    ("", "end of filter"),
    ("   ", "end of filter"),
    ("/a =", "end of filter"),
    ("/a = = 1", "unexpected"),
    ("= 1", "unexpected"),
    ("/a = 1 AND", "end of filter"),
    ("/a = 1 OR OR /b = 2", "unexpected"),
    ("(/a = 1", "end of filter"),
    ("/a = 1)", "unexpected"),
    ("/a 1", "unexpected"),
    ("/a = 'unterminated", "unexpected"),
    ('/a = "unterminated', "unexpected"),
    ("/a = 1 ;", "unexpected"),
    ("/a IN ()", "unexpected"),
    ("/a IN 1, 2", "unexpected"),
    ("/a BETWEEN 1", "end of filter"),
    ("/a BETWEEN 1 OR 2", "unexpected"),
    ("/a IS", "end of filter"),
    ("/a IS 5", "unexpected"),
    ("/a LIKE /b", "unexpected"),  # the pattern must be a literal
    ("/a LIKE 5", "unexpected"),
    ("/a BEGINS 'x'", "unexpected"),
    ("/a < 1 < 2", "unexpected"),  # comparisons do not chain
    ("a = 1", "unexpected"),  # identifiers start with /
    ("/ = 1", "unexpected"),
    ("// = 1", "unexpected"),
    ("/a[x] = 1", "unexpected"),
    ("[/a//b] = 1", "empty step"),
    ("/a = 1 AND NOT", "end of filter"),
    ("/a = $", "unexpected character"),
    ("/a == 'x' 'y'", "unexpected"),
    # regular expressions
    ("/a LIKE '('", "invalid LIKE pattern"),
    ("/a LIKE '[a-'", "invalid LIKE pattern"),
    ("/a LIKE 'x{2,1}'", "invalid LIKE pattern"),
    ("REGEXP_REPLACE(/a, '(', 'x') = 'y'", "invalid REGEXP_REPLACE pattern"),
    # functions
    ("NO_SUCH_FN(/a) = 1", "unknown function"),
    ("SUM(/qty) > 1", "unknown function"),  # aggregates are not available to filters
    ("UPPER() = 'A'", "takes 1 argument"),
    ("UPPER(/a, /b) = 'A'", "takes 1 argument"),
    ("SUBSTR(/a) = 'x'", "takes 2 to 3"),
    ("SUBSTR(/a, 1, 2, 3) = 'x'", "takes 2 to 3"),
    ("CONCAT() = ''", "at least 1"),
    ("COALESCE() IS NULL", "at least 1"),
    ("TOPIC_NAME(/a) = 'x'", "takes 0"),
    ("IF(/a, 1) = 1", "IF takes 3"),
    ("IF(/a, 1, 2, 3) = 1", "IF takes 3"),
    ("TOPIC_NAME = 'x'", "unexpected"),  # a function needs its parentheses
]


@pytest.mark.parametrize("text, fragment", BAD, ids=[repr(b[0]) for b in BAD])
def test_bad_filter_raises(text, fragment):
    with pytest.raises(FilterError) as info:
        compile_filter(text)
    err = info.value
    assert isinstance(err, CommandError)
    assert err.reason == BAD_FILTER == "bad filter"
    assert fragment in err.detail, err.detail
    assert err.position is None or 0 <= err.position <= len(text)
    with pytest.raises(FilterError):  # the same for expressions
        compile_expression(text)


def test_error_position_points_at_the_problem():
    with pytest.raises(FilterError) as info:
        compile_filter("/a = 1 AND /b = = 2")
    assert info.value.position == 16
    with pytest.raises(FilterError) as info:
        compile_filter("/a = 1 AND NOPE(/b) = 2")
    assert info.value.position == 11
    assert "NOPE" in str(info.value)
    assert str(info.value).startswith("bad filter: ")


def test_non_text_filter_is_bad():
    for value in (None, 5, b"/a = 1"):
        with pytest.raises(FilterError):
            compile_filter(value)


def test_bad_filter_is_not_cached_as_good_and_later_filters_work():
    for _ in range(2):
        with pytest.raises(FilterError):
            compile_filter("/a = ")
    assert compile_filter("/a = 1")({"a": 1}) is True


def test_deep_nesting_is_handled():
    deep = "(" * 300 + "/a = 1" + ")" * 300  # parentheses alone add no depth
    assert compile_filter(deep)({"a": 1}) is True
    long_or = " OR ".join(f"/a = {i}" for i in range(2000))  # n-ary: stays flat
    assert compile_filter(long_or)({"a": 1999}) is True
    chain = " + ".join(["/a"] * 120) + " = 120"  # deep, beyond Python's parser nesting
    f = compile_filter(chain)
    assert f({"a": 1}) is True
    assert f({"a": 2}) is False
    with pytest.raises(FilterError, match="nested too deeply"):
        compile_filter("NOT " * 500 + "/a = 1")
    assert compile_filter(" + ".join(["/a"] * 500) + " = 500")({"a": 1}) is True  # n-ary
    with pytest.raises(FilterError, match="nested too deeply"):
        compile_filter("(/a + " * 500 + "/a" + ")" * 500 + " = 1")
    very_deep = "(" * 50_000 + "/a = 1" + ")" * 50_000  # bounded: answered, not crashed
    assert compile_filter(very_deep)({"a": 1}) is True


def test_filter_text_cannot_inject_code():
    hostile = [
        "/a = '\\'); import os; os._exit(1) #'",
        "/a = \"__import__('os')._exit(1)\"",
        "/a LIKE '\"\\); __import__\\(\"os\"\\)._exit\\(1\\); \\(\"'",
        "[/') or __import__('os')._exit(1) or ('] = 1",
        "/__class__ = 1",
        "/a IN ('x\\x00y', '\\n')",
    ]
    for text in hostile:
        f = compile_filter(text)
        assert f({"a": "zzz"}) is False
        assert f({"__class__": 2}) is False
    f = compile_filter("[/') or __import__('os')._exit(1) or ('] = 1")
    assert f({"') or __import__('os')._exit(1) or ('": 1}) is True


def test_keywords_are_not_function_names_and_vice_versa():
    with pytest.raises(FilterError, match="unknown function 'NOTE'"):
        compile_filter("NOTE(1) = 1")
    assert compile_filter("NAN_VALUE() IS NAN")({}) is True
    assert compile_filter("/in = 1 AND /not = 2")({"in": 1, "not": 2}) is True
