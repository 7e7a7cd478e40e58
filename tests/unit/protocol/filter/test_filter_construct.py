"""Field construction (``protocol.filter.construct``): the ``<expression> AS /field`` form of
Preprocessing and Enrichment, its ``OF CURRENT`` / ``OF PREVIOUS`` modifiers and its hints,
evaluated by the filter language's own compiled expressions."""

from __future__ import annotations

import math

import pytest

from amps_emulator.protocol.filter import FilterError, compile_expression
from amps_emulator.protocol.filter.construct import (
    FieldSet,
    output_value,
    parse_field,
    previous_mark,
    remove_field,
    set_field,
)


def test_a_field_is_an_expression_compiled_by_the_filter_compiler():
    f = parse_field("CONCAT(/first, ' ', /last) as /person/fullName")
    assert f.target == ("person", "fullName")
    assert f.expr is compile_expression("CONCAT(/first, ' ', /last)")  # one evaluator, one cache
    assert (f.optional, f.set_current, f.reads_previous) == (False, False, False)


@pytest.mark.parametrize("text, hints", [
    ("/a AS /b HINT OPTIONAL", (True, False)),
    ("/a AS /b hint set_current", (False, True)),
    ("/a AS /b HINT SET_CURRENT, OPTIONAL", (True, True)),
    ("IF(/source IN ('a','e','f'), /source, NULL)\n       AS /source HINT OPTIONAL", (True, False)),
])
def test_hints(text, hints):
    f = parse_field(text)
    assert (f.optional, f.set_current) == hints


def test_keywords_inside_strings_and_field_names_are_not_taken():
    f = parse_field("CONCAT('x AS y', /AS, ' HINT ') AS /as")
    assert f.target == ("as",) and not f.optional
    assert f.expr({"AS": "!"}) == "x AS y! HINT "


def test_of_current_reads_the_message_and_of_previous_the_stored_record():
    mark = previous_mark(["x"])
    f = parse_field("COALESCE(/tier OF CURRENT, /tier of previous, 'basic') AS /tier", previous=mark)
    assert f.reads_previous and f.source == f"COALESCE(/tier, /{mark}/tier, 'basic')"
    g = parse_field("[/odd name] OF PREVIOUS + /n[0] OF PREVIOUS AS /s", previous=mark)
    assert g.source == f"[/{mark}/odd name] + /{mark}/n[0]"


def test_the_previous_mark_is_a_name_no_field_text_uses():
    mark = previous_mark(["/amps_previous_state/x AS /y"])
    assert mark not in "/amps_previous_state/x AS /y"
    fs = FieldSet(["/amps_previous_state OF PREVIOUS AS /was", "/amps_previous_state AS /is"],
                  previous=True)
    assert fs.evaluate({"amps_previous_state": 1}, {"amps_previous_state": 2}) == [
        (("was",), 2, False), (("is",), 1, False)]


@pytest.mark.parametrize("text, why", [
    ("/a", "needs AS"),
    ("AS /b", "no expression"),
    ("/a AS /b AS /c", "more than one AS"),
    ("/a AS /b[1]", "array index"),
    ("/a AS /", "not a field identifier"),
    ("/a AS /b + 1", "not a field identifier"),
    ("/a AS /b HINT FAST", "unknown HINT"),
    ("/a AS /b HINT", "unknown HINT"),
    ("/a AS /b HINT OPTIONAL HINT SET_CURRENT", "more than one HINT"),
    ("/a + AS /b", "the expression of"),
    ("NO_SUCH(/a) AS /b", "unknown function"),
    ("[json].[orders]./a AS /b", "topic or message type"),
    ("[orders]./a AS /b", "topic or message type"),
    ("UPPER(/a) OF PREVIOUS AS /b", "does not follow a field identifier"),
    ("'x AS /b", "unterminated string"),
])
def test_what_is_refused(text, why):
    with pytest.raises(FilterError) as info:
        parse_field(text, previous="p")
    assert why in info.value.detail


def test_of_previous_is_refused_where_no_previous_state_exists():
    with pytest.raises(FilterError, match="OF PREVIOUS"):
        parse_field("COALESCE(/a OF PREVIOUS, 1) AS /a")
    assert parse_field("/a OF CURRENT AS /b").source == "/a"  # reading the message is fine


def test_fields_read_the_message_as_it_came_unless_set_current():
    fs = FieldSet(["/qty * /px AS /value", "IF(/value > 100, 'big', 'small') AS /size"],
                  previous=False)
    assert [v for _, v, _ in fs.evaluate({"qty": 10, "px": 20})] == [200, "small"]
    fs = FieldSet(["/qty * /px AS /value HINT SET_CURRENT",
                   "IF(/value > 100, 'big', 'small') AS /size"], previous=False)
    doc = {"qty": 10, "px": 20}
    assert [v for _, v, _ in fs.evaluate(doc)] == [200, "big"]
    assert doc == {"qty": 10, "px": 20}  # the caller's document is not written


def test_a_set_current_optional_null_removes_the_field_for_the_next_ones():
    fs = FieldSet(["IF(/a > 0, /a, NULL) AS /a HINT SET_CURRENT,OPTIONAL",
                   "COALESCE(/a, 'gone') AS /b"], previous=True)
    assert fs.evaluate({"a": -1}, {"a": 5}) == [(("a",), None, True), (("b",), "gone", False)]


def test_of_previous_is_null_without_a_previous_record():
    fs = FieldSet(["COALESCE(/n OF PREVIOUS, 0) + 1 AS /n", "/n OF CURRENT AS /sent"], previous=True)
    assert fs.evaluate({"n": 9}, None) == [(("n",), 1, False), (("sent",), 9, False)]
    assert fs.evaluate({"n": 9}, {"n": 41}) == [(("n",), 42, False), (("sent",), 9, False)]
    assert fs.reads_previous and not fs.uses_context


@pytest.mark.parametrize("value, written", [
    ([3, 4], 3), ([], None), ({"a": 1}, None), (math.nan, None), (math.inf, None), (2.5, 2.5),
    ("", ""), (True, True), (None, None),
])
def test_values_are_written_as_a_view_writes_them(value, written):
    assert output_value(value) == written


def test_writing_copies_the_objects_on_the_way():
    inner = {"x": 1}
    doc = {"a": inner, "s": "text"}
    out = dict(doc)
    set_field(out, ("a", "y"), 2)
    set_field(out, ("s", "t"), 3)
    remove_field(out, ("a", "x"))
    remove_field(out, ("nope", "x"))
    assert out == {"a": {"y": 2}, "s": {"t": 3}}
    assert inner == {"x": 1} and doc["s"] == "text"
