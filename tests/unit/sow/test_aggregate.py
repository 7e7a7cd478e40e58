"""sow.aggregate: parsing the grouping/projection options and computing the groups.

Expected values are worked out by hand in the comments next to them."""

from __future__ import annotations

import math

import msgspec
import pytest

from amps_emulator.protocol.reasons import INVALID_OPTIONS, CommandError
from amps_emulator.sow.aggregate import (
    AGGREGATE_FUNCTIONS,
    parse_aggregation,
    parse_grouping,
    parse_projection,
)
from amps_emulator.sow.record import Record


def recs(*docs, start_ts: float = 100.0) -> list[Record]:
    return [Record(f"k{i}", msgspec.json.encode(d), f"bm{i}", start_ts + i)
            for i, d in enumerate(docs)]


def agg(grouping: str, projection: str, docs, domain: str = "t") -> list[dict]:
    spec = parse_aggregation({"grouping": grouping, "projection": projection})
    assert spec is not None
    out = spec.aggregate(recs(*docs), domain)
    for r in out:  # the body sent is the body computed
        assert msgspec.json.decode(r.data) == r.doc
    return [r.doc for r in out]


def one(projection: str, docs) -> dict:
    """A projection over a single group (every doc has g = 1); the group's body without g."""
    (body,) = agg("[/g]", projection, [{"g": 1, **d} for d in docs])
    return body


def bad(**opts) -> CommandError:
    with pytest.raises(CommandError) as ei:
        parse_aggregation(opts)
    assert ei.value.reason == INVALID_OPTIONS
    return ei.value


# ---- parsing ---------------------------------------------------------------------------------

def test_no_options_is_not_an_aggregation():
    assert parse_aggregation({}) is None
    assert parse_aggregation({"select": "[-/,+/a]", "top_n": "3"}) is None


def test_grouping_lists():
    assert parse_grouping("[/a]") == (("a",),)
    assert parse_grouping("[/a, /b/c ,/d[1]]") == (("a",), ("b", "c"), ("d", 1))
    assert parse_grouping("/a,/b") == (("a",), ("b",))  # brackets optional
    assert parse_grouping("[[/odd name]]") == (("odd name",),)


@pytest.mark.parametrize("text", ["", "[]", "[ ]", "[/a,,/b]", "[/a,]", "[a]", "[/]",
                                  "[SUM(/a)]", "[/a + 1]", "[/a AS /b]"])
def test_bad_grouping(text):
    bad(grouping=text, projection="[/a]")


def test_grouping_flag_without_value_is_bad():
    bad(grouping=True, projection="[/a]")
    bad(grouping="[/a]", projection=True)


def test_one_option_without_the_other():
    assert "without grouping" in str(bad(projection="[/a]"))
    assert "without projection" in str(bad(grouping="[/a]"))


def test_projection_entries_targets_and_shared_arguments():
    fields, aggs, args = parse_projection(
        "[/sym, SUM(/qty) AS /total, avg(/qty) as /avg, COUNT(/id)AS /n, /px AS /p/x,"
        " SUM(/qty) / COUNT(/id) AS /ratio]")
    assert [f.target for f in fields] == [("sym",), ("total",), ("avg",), ("n",), ("p", "x"),
                                          ("ratio",)]
    # SUM(/qty) and COUNT(/id) are computed once even though used twice; /qty is read once
    assert aggs == [("SUM", 0), ("AVG", 0), ("COUNT", 1)]
    assert [a.text for a in args] == ["/qty", "/id"]
    assert fields[1].expr is None and fields[1].aggs == (0,)
    assert fields[0].aggs == () and fields[0].expr is not None
    assert fields[5].aggs == (0, 2) and fields[5].expr is not None


def test_commas_parentheses_and_as_inside_strings_and_bracket_paths():
    fields, aggs, args = parse_projection(
        "[IF(/a = 'x, AS (y', 1, 0) AS /flag, SUM([/odd, name]) AS /s, /class AS /c]")
    assert [f.target for f in fields] == [("flag",), ("s",), ("c",)]
    assert aggs == [("SUM", 0)]
    body = agg("[/class]", "[IF(/a = 'x, AS (y', 1, 0) AS /flag, SUM([/odd, name]) AS /s,"
               " /class AS /c]", [{"class": "A", "a": "x, AS (y", "odd, name": 2},
                                  {"class": "A", "a": "z", "odd, name": 3}])
    assert body == [{"flag": 0, "s": 5, "c": "A"}]  # flag from the last record (a = 'z')


@pytest.mark.parametrize("projection", [
    "[]",
    "[SUM(/qty)]",                       # an expression needs a target
    "[/a + 1]",
    "[/a AS]",
    "[AS /a]",
    "[/a AS /b AS /c]",
    "[/a AS b]",                         # target must be an identifier
    "[/a AS /b[0]]",                     # no array index in a target
    "[/a AS /]",
    "[SUM(SUM(/a)) AS /t]",              # nested aggregates
    "[SUM(/a + COUNT(/b)) AS /t]",
    "[SUM() AS /t]",
    "[SUM(/a, /b) AS /t]",
    "[NOSUCH(/a) AS /t]",
    "[SUM(/a AS /t]",
    "[/a = = 1 AS /t]",
    "[/a AS /x, /b AS /x]",              # duplicate target
    "[/a AS /x, /b AS /x/y]",            # one target inside another
    "[SUM(UNIX_TIMESTAMP()) AS /t]",     # non-deterministic inside an aggregate
    "[/a, 'unterminated AS /b]",
])
def test_bad_projection(projection):
    bad(grouping="[/a]", projection=projection)


def test_non_deterministic_function_outside_aggregates_is_allowed():
    assert parse_aggregation({"grouping": "[/a]",
                              "projection": "[/a, UNIX_TIMESTAMP() AS /now]"}) is not None


def test_the_function_list():
    assert set(AGGREGATE_FUNCTIONS) == {"AVG", "COUNT", "COUNT_DISTINCT", "MIN", "MAX", "SUM",
                                        "STDDEV_POP", "STDDEV_SAMP"}


# ---- aggregate functions ---------------------------------------------------------------------

NULLISH = [{}, {"v": None}, {"v": ""}, {"v": []}, {"v": {"x": 1}}]  # all NULL for aggregates


def test_sum_count_avg_skip_nulls():
    docs = [{"v": 1}, {"v": 2}, *NULLISH, {"v": [4, 100]}]  # the array counts as its 4
    assert one("[SUM(/v) AS /s, COUNT(/v) AS /n, AVG(/v) AS /a]", docs) == {
        "s": 7, "n": 3, "a": 7 / 3}


def test_only_nulls():
    assert one("[SUM(/v) AS /s, COUNT(/v) AS /n, AVG(/v) AS /a, MIN(/v) AS /lo, MAX(/v) AS /hi,"
               " COUNT_DISTINCT(/v) AS /d, STDDEV_POP(/v) AS /sp, STDDEV_SAMP(/v) AS /ss]",
               NULLISH) == {"s": None, "n": 0, "a": None, "lo": None, "hi": None, "d": 0,
                            "sp": None, "ss": None}


def test_sum_types():
    assert one("[SUM(/v) AS /s]", [{"v": 1}, {"v": 2}]) == {"s": 3}
    assert type(one("[SUM(/v) AS /s]", [{"v": 1}, {"v": 2}])["s"]) is int
    assert one("[SUM(/v) AS /s]", [{"v": 1}, {"v": 2.5}]) == {"s": 3.5}
    # numeric strings and booleans convert: 1 + 2 + 1
    assert one("[SUM(/v) AS /s]", [{"v": "1"}, {"v": "2"}, {"v": True}]) == {"s": 4}
    # beyond 64 bits an integer sum is carried as a double
    big = one("[SUM(/v) AS /s]", [{"v": 2 ** 63}, {"v": 2 ** 63}])["s"]
    assert type(big) is float and big == 2.0 ** 64


def test_non_numeric_string_makes_numeric_aggregates_nan_sent_as_null():
    docs = [{"v": 1}, {"v": "abc"}, {"v": 3}]
    assert one("[SUM(/v) AS /s, AVG(/v) AS /a, STDDEV_POP(/v) AS /sp, STDDEV_SAMP(/v) AS /ss,"
               " COUNT(/v) AS /n, MIN(/v) AS /lo, MAX(/v) AS /hi]", docs) == {
        "s": None, "a": None, "sp": None, "ss": None, "n": 3, "lo": 1, "hi": "abc"}


def test_avg_is_a_double():
    body = one("[AVG(/v) AS /a]", [{"v": 2}, {"v": 4}])
    assert body == {"a": 3.0} and type(body["a"]) is float


def test_stddev():
    vals = [2, 4, 4, 4, 5, 5, 7, 9]  # mean 5, squared deviations sum to 32
    body = one("[STDDEV_POP(/v) AS /p, STDDEV_SAMP(/v) AS /s]", [{"v": v} for v in vals])
    assert body["p"] == pytest.approx(2.0)            # sqrt(32 / 8)
    assert body["s"] == pytest.approx(math.sqrt(32 / 7))
    single = one("[STDDEV_POP(/v) AS /p, STDDEV_SAMP(/v) AS /s]", [{"v": 3}, {}])
    assert single == {"p": 0.0, "s": None}


def test_min_max_mixed_numbers_and_strings():
    # numbers by value; '7' is the number 7; 'dog' is above every number; 'ant' < 'dog'
    docs = [{"v": 30}, {"v": "7"}, {"v": "dog"}, {"v": 2.5}, {"v": "ant"}, {"v": 100}, {},
            {"v": ""}]
    assert one("[MIN(/v) AS /lo, MAX(/v) AS /hi]", docs) == {"lo": 2.5, "hi": "dog"}
    # the winning value is returned as it was: the string '1' against the number 5
    assert one("[MIN(/v) AS /lo, MAX(/v) AS /hi]", [{"v": 5}, {"v": "1"}]) == {
        "lo": "1", "hi": 5}
    assert one("[MIN(/v) AS /lo, MAX(/v) AS /hi]", [{"v": "b"}, {"v": "a"}, {"v": "c"}]) == {
        "lo": "a", "hi": "c"}
    # equal values: the first one seen wins
    assert one("[MIN(/v) AS /lo]", [{"v": "3"}, {"v": 3}]) == {"lo": "3"}


def test_min_max_numbers_and_arrays():
    assert one("[MIN(/v) AS /lo, MAX(/v) AS /hi]",
               [{"v": [9, -100]}, {"v": -1}, {"v": 4.5}, {"v": None}]) == {"lo": -1, "hi": 9}


def test_count_distinct_converts_types_and_ignores_null():
    # 75 = 75.0 = '75' = '7.5e1'; 'cat'; 3; true is 1: {75, 'cat', 3, 1}
    docs = [{"v": 75}, {"v": 75.0}, {"v": "75"}, {"v": "7.5e1"}, {"v": "cat"}, {"v": "cat"},
            {"v": 3}, {"v": True}, *NULLISH]
    assert one("[COUNT_DISTINCT(/v) AS /d, COUNT(/v) AS /n]", docs) == {"d": 4, "n": 8}


def test_count_counts_non_numeric_values():
    assert one("[COUNT(/v) AS /n]", [{"v": "x"}, {"v": False}, {"v": 0}, {"v": [None]}]) == {
        "n": 3}


def test_aggregate_of_an_expression():
    docs = [{"q": 10, "p": 2}, {"q": 5, "p": 4}, {"q": 1}]
    # SUM(q * p) = 20 + 20 (+ NULL); SUM(IF(q > 4, 1, 0)) = 2; q * p + 1 over 3 rows
    assert one("[SUM(/q * /p) AS /notional, SUM(IF(/q > 4, 1, 0)) AS /big,"
               " SUM(/q * /p) / SUM(/q) AS /avgPx, MAX(/q * /p + 1) AS /m]", docs) == {
        "notional": 40, "big": 2, "avgPx": 40 // 16, "m": 21}


def test_literal_argument_counts_records():
    assert one("[COUNT(1) AS /n, SUM(2) AS /two]", [{}, {}, {}]) == {"n": 3, "two": 6}


# ---- groups and output -----------------------------------------------------------------------

def test_groups_by_one_field_in_first_seen_order():
    docs = [{"s": "B", "q": 1}, {"s": "A", "q": 2}, {"s": "B", "q": 3}, {"q": 4},
            {"s": None, "q": 5}]
    assert agg("[/s]", "[/s, SUM(/q) AS /t]", docs) == [
        {"s": "B", "t": 4}, {"s": "A", "t": 2}, {"s": None, "t": 9}]  # missing and null: NULL


def test_groups_by_several_fields():
    docs = [{"a": 1, "b": "x", "q": 1}, {"a": 1, "b": "y", "q": 2}, {"a": 2, "b": "x", "q": 4},
            {"a": 1, "b": "x", "q": 8}, {"a": 1, "q": 16}]
    assert agg("[/a, /b]", "[/a, /b, SUM(/q) AS /t]", docs) == [
        {"a": 1, "b": "x", "t": 9}, {"a": 1, "b": "y", "t": 2}, {"a": 2, "b": "x", "t": 4},
        {"a": 1, "b": None, "t": 16}]


def test_group_value_equality():
    # 1 and 1.0 are one group; '1' and true are groups of their own; an array groups by
    # its first element
    docs = [{"g": 1, "q": 1}, {"g": 1.0, "q": 2}, {"g": "1", "q": 4}, {"g": True, "q": 8},
            {"g": [1, 2], "q": 16}]
    assert [d["t"] for d in agg("[/g]", "[SUM(/q) AS /t]", docs)] == [19, 4, 8]


def test_nested_grouping_paths_and_nested_targets():
    docs = [{"o": 42, "d": {"p": "AAPL", "q": 40}}, {"o": 42, "d": {"p": "AAPL", "q": 60}},
            {"o": 42, "d": {"p": "MSFT", "q": 1}}]
    assert agg("[/o, /d/p]", "[/o, /d/p, SUM(/d/q) AS /d/q, COUNT(/o) AS /d/n/c]", docs) == [
        {"o": 42, "d": {"p": "AAPL", "q": 100, "n": {"c": 2}}},
        {"o": 42, "d": {"p": "MSFT", "q": 1, "n": {"c": 1}}}]


def test_fields_outside_aggregates_come_from_the_last_record():
    docs = [{"g": 1, "x": "first", "n": 1}, {"g": 1, "x": "last", "n": 10}]
    # /x + ...: the last record's n (10) plus SUM(/n) (11)
    assert agg("[/g]", "[/x, UPPER(/x) AS /ux, /n + SUM(/n) AS /mix, /missing AS /m]",
               docs) == [{"x": "last", "ux": "LAST", "mix": 21, "m": None}]


def test_fields_not_projected_are_dropped_and_values_are_scalars():
    docs = [{"g": 1, "arr": [7, 8], "obj": {"a": 1}, "other": 5}]
    assert agg("[/g]", "[/g, /arr, /obj]", docs) == [{"g": 1, "arr": 7, "obj": None}]


def test_empty_input():
    spec = parse_aggregation({"grouping": "[/a]", "projection": "[/a, COUNT(/a) AS /n]"})
    assert spec.aggregate([], "t") == []
    assert spec.aggregator("t").results() == []


def test_bodies_that_are_not_objects_group_as_null():
    assert agg("[/g]", "[/g, COUNT(1) AS /n]", [{"g": 1}, [1, 2], "text"]) == [
        {"g": 1, "n": 1}, {"g": None, "n": 2}]


def test_add_in_slices_equals_all_at_once():
    docs = [{"g": i % 3, "v": i} for i in range(50)]
    spec = parse_aggregation({"grouping": "[/g]",
                              "projection": "[/g, SUM(/v) AS /s, MAX(/v) AS /m, COUNT(/v) AS /n]"})
    whole = spec.aggregate(recs(*docs), "t")
    sliced = spec.aggregator("t")
    rs = recs(*docs)
    for i in range(0, 50, 7):
        sliced.add(rs[i:i + 7])
    assert [r.doc for r in sliced.results()] == [r.doc for r in whole]
    assert [r.doc for r in whole] == [
        {"g": 0, "s": sum(range(0, 50, 3)), "m": 48, "n": 17},
        {"g": 1, "s": sum(range(1, 50, 3)), "m": 49, "n": 17},
        {"g": 2, "s": sum(range(2, 50, 3)), "m": 47, "n": 16}]


def test_sow_keys_timestamps_and_bookmarks():
    spec = parse_aggregation({"grouping": "[/g]", "projection": "[/g]"})
    docs = [{"g": "a"}, {"g": "b"}, {"g": "a"}, {"g": 1}, {"g": "1"}, {"g": 1.0}]
    out = spec.aggregate(recs(*docs, start_ts=10.0), "orders")
    keys = [r.sow_key for r in out]
    assert len(out) == 4 and len(set(keys)) == 4 and all(k.isdigit() for k in keys)
    assert [r.timestamp for r in out] == [12.0, 11.0, 15.0, 14.0]  # latest of each group
    assert all(r.bookmark == "" for r in out)
    # stable: the same groups get the same keys in another query; another topic, other keys
    again = spec.aggregate(recs({"g": 1.0}, {"g": "b"}), "orders")
    assert [r.sow_key for r in again] == [keys[2], keys[1]]
    other = spec.aggregate(recs({"g": "a"}), "positions")
    assert other[0].sow_key != keys[0]


def test_context_functions_see_the_record():
    docs = [{"g": 1}, {"g": 1}, {"g": 2}]
    assert agg("[/g]", "[/g, TOPIC_NAME() AS /topic, COUNT(SOW_KEY()) AS /keys,"
               " MAX(SOW_KEY()) AS /lastKey, SOW_KEY() AS /k]", docs, domain="orders") == [
        {"g": 1, "topic": "orders", "keys": 2, "lastKey": "k1", "k": "k1"},
        {"g": 2, "topic": "orders", "keys": 1, "lastKey": "k2", "k": "k2"}]


def test_many_records_many_groups():
    n = 30_000
    docs = [{"id": i, "g": i % 1000, "v": i % 7} for i in range(n)]
    out = agg("[/g]", "[/g, SUM(/v) AS /s, COUNT(/id) AS /n]", docs)
    assert len(out) == 1000
    assert sum(d["n"] for d in out) == n
    assert sum(d["s"] for d in out) == sum(i % 7 for i in range(n))
    g7 = out[7]
    assert g7 == {"g": 7, "s": sum(i % 7 for i in range(7, n, 1000)), "n": 30}
