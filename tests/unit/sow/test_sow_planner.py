"""Planner and indexes: every path (hash index, memo index, scan) returns exactly what a plain
evaluation of the filter over all records returns, on data that mixes every JSON type."""

from __future__ import annotations

import tempfile

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amps_emulator.protocol.filter import compile_filter
from amps_emulator.sow import SowStore, TopicSpec, TransientStore
from amps_emulator.sow.index import like_prefix
from amps_emulator.sow.testing import FakeClock

MIXED = [5, 5.0, "5", "5.0", "05", -3, 2.5, 10, 1e300, 2 ** 70, "abc", "abd", "ab", "b", "",
         "zz", "1e2", "true", True, False, None, [1, "x"], [[2, 3], "ab"], [], {"k": 1},
         "a\x00b", "é", "x" * 300, "x" * 300 + "y", 0, -0.0, "-0", " 5"]


def dataset() -> list[dict]:
    out = []
    for i, v in enumerate(MIXED):
        d = {"id": i, "b": ["x", "y", "z"][i % 3], "n": {"x": i % 4}}
        if v is not None or i % 2:
            d["a"] = v
        out.append(d)
    out.append({"id": 1000, "lst": [1, 2, 3], "b": "x"})
    out.append({"id": 1001, "lst": [{"a": 1}, {"a": 5}], "b": "y"})
    return out


FILTERS = [
    "/a = 5", "/a = '5'", "/a = 5.0", "/a = '5.0'", "/a = 'abc'", "/a = true", "/a = 'true'",
    "/a = 0", "/a = -0.0", "/a = 1e300", "/a = 1180591620717411303424", "/a = 100",
    "/a IN (1, 'x', 2.5)", "/a IN ('ab', 10, false)", "/a NOT IN (5)", "/a > 3",
    "/a >= '3'", "/a < 'm'", "/a <= 2", "/a > 'ab'", "/a < -1", "/a >= 10", "/a > true",
    "/a BETWEEN 2 AND 10", "/a BETWEEN 'a' AND 'b'", "/a BETWEEN 10 AND 2", "/a BETWEEN '1' AND 6",
    "/a BETWEEN 'a' AND 0", "/a BETWEEN '10' AND 10", "/a BETWEEN true AND 'zz'",
    "/a LIKE '^ab'", "/a LIKE 'b'", "/a LIKE '^x+y'", "/a LIKE '(?i)^AB'", "/a LIKE 'é'",
    "/a LIKE '^5'", "/a BEGINS WITH ('ab', 1)", "/a BEGINS WITH ('x')", "/a ENDS WITH ('c')",
    "/b = 'x' AND /a > 1", "/a = 1 OR /b = 'y'", "/a > 2 OR /a = 'zz'", "/n/x = 1",
    "/n/x = 1 AND /b = 'y'", "/a = NULL", "/a = ''", "5 < /a", "'abc' = /a", "/a != 3",
    "/a IS NULL", "NOT /a = 5", "/lst = 2", "/lst/a = 5", "/lst > 2", "/a = /id",
    "/b IN ('x', 'z') AND /n/x IN (0, 3)", "/a = 5 AND /a = '5'", "1 = 1", "/a > -1e400",
]


def build(kind: str, path: str | None = None):
    clock = FakeClock()
    store = SowStore(path, clock=clock, sync=False) if kind == "persistent" else \
        TransientStore(clock=clock)
    t = store.open_topic(TopicSpec("t", keys=("/id",), durability=kind,
                                   hash_indexes=(("/a",), ("/b", "/n/x"), ("/lst",)),
                                   indexes=("/a",)))
    return store, t


def brute(t, flt) -> list[str]:
    f = compile_filter(flt)
    allrecs = t.query(plan="scan").records
    return sorted(r.sow_key for r in allrecs if f(r.doc, t._ctx_of(r)))


def keys(q) -> list[str]:
    return [r.sow_key for r in q.records]


@pytest.fixture(params=["persistent", "transient"])
def topic(request, tmp_path):
    store, t = build(request.param, str(tmp_path / "env"))
    for d in dataset():
        t.publish(msgspec.json.encode(d))
    yield t
    store.close()


@pytest.mark.parametrize("flt", FILTERS)
def test_every_path_same_result(topic, flt):
    want = brute(topic, flt)
    results = {p: topic.query(flt, plan=p) for p in ("scan", "hash", "memo", "auto")}
    for p, q in results.items():
        assert sorted(keys(q)) == want, (p, q.plan)
        assert keys(q) == keys(results["scan"]), p  # same natural order too
        assert q.matches == len(want)


def test_paths_are_really_taken(topic):
    assert topic.query("/a = 5", plan="hash").plan.startswith("hash[/a]")
    assert topic.query("/a = 5", plan="memo").plan.startswith("memo[/a]")
    assert topic.query("/b = 'x' AND /n/x = 1").plan.startswith("hash[/b,/n/x]")
    assert topic.query("/a > 3").plan.startswith("memo[/a]")
    assert topic.query("/a = 1 OR /b = 'y'").plan.startswith("union(")
    assert topic.query("/a != 3").plan == "scan"
    assert topic.query("/a = 5", plan="scan").plan == "scan"


def test_orderby_and_paging_identical_across_paths(topic):
    for flt in ("/a >= 0", "/a < 'zzz'", "/b IN ('x','y')"):
        base = topic.query(flt, order_by="/a DESC, /id", top_n=7, skip_n=2, plan="scan")
        for p in ("hash", "memo", "auto"):
            q = topic.query(flt, order_by="/a DESC, /id", top_n=7, skip_n=2, plan=p)
            assert keys(q) == keys(base) and q.matches == base.matches


def test_delete_by_filter_same_through_index(topic):
    want = brute(topic, "/a > 3")
    d = topic.delete_by_filter("/a > 3")
    assert sorted(r.sow_key for r in d.records) == want
    assert topic.query("/a > 3", plan="scan").matches == 0
    assert topic.query("/a > 3").matches == 0


def test_scan_fallback_when_index_too_broad(topic):
    for i in range(2000, 2100):
        topic.publish(msgspec.json.encode({"id": i}))
    q = topic.query("/id >= 0")
    assert "-> scan" in q.plan and q.matches == len(dataset()) + 100
    q = topic.query("/id >= 2090")
    assert "-> scan" not in q.plan and q.matches == 10


@pytest.mark.parametrize("pattern,prefix", [
    ("^abc", "abc"), ("^ab?", "a"), ("^ab*c", "a"), ("abc", None), ("^(a|b)", None),
    ("^a|b", None), ("(?i)^ab", None), ("^ab(?i)", None), ("^\\.", None), ("^a.b", "a"),
])
def test_like_prefix(pattern, prefix):
    assert like_prefix(pattern) == prefix


# ---- property: planner == plain evaluation ---------------------------------------------------

_alpha = st.text(alphabet="ab5.e-1 ", min_size=0, max_size=4)
scalars = st.one_of(st.integers(-10, 10), st.floats(-10, 10, allow_nan=False, allow_infinity=False),
                    _alpha, st.booleans(), st.none(), st.sampled_from([2 ** 64, "1e2", "05"]))
values = st.one_of(scalars, st.lists(scalars, max_size=3), st.just({"k": 1}))
docs_st = st.lists(st.fixed_dictionaries({}, optional={"a": values, "b": values}), max_size=25)


def _lit(v) -> str:
    if v is None:
        return "NULL"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, str):
        return "'" + v + "'"
    return repr(v)


lits = st.one_of(st.integers(-10, 10), st.floats(-10, 10, allow_nan=False), _alpha,
                 st.booleans(), st.none())
fields = st.sampled_from(["/a", "/b"])


@st.composite
def predicates(draw):
    f = draw(fields)
    kind = draw(st.sampled_from(["cmp", "in", "between", "like", "begins", "rev"]))
    if kind == "cmp":
        return f"{f} {draw(st.sampled_from(['=', '<', '<=', '>', '>=', '!=']))} {_lit(draw(lits))}"
    if kind == "rev":
        return f"{_lit(draw(lits))} {draw(st.sampled_from(['=', '<', '>=']))} {f}"
    if kind == "in":
        return f"{f} IN ({', '.join(_lit(x) for x in draw(st.lists(lits, min_size=1, max_size=3)))})"
    if kind == "between":
        return f"{f} BETWEEN {_lit(draw(lits))} AND {_lit(draw(lits))}"
    if kind == "like":
        return f"{f} LIKE '{draw(st.sampled_from(['^a', '^5', 'b', '^ab', '5$', '^-']))}'"
    return f"{f} BEGINS WITH ({_lit(draw(lits))})"


@st.composite
def filters(draw):
    p = draw(predicates())
    join = draw(st.sampled_from([None, "AND", "OR"]))
    return p if join is None else f"{p} {join} {draw(predicates())}"


def _check(t, rows, flt):
    want = brute(t, flt)
    base = None
    for p in ("scan", "hash", "memo", "auto"):
        got = keys(t.query(flt, plan=p))
        assert sorted(got) == want, (p, flt, rows)
        if base is None:
            base = got
        assert got == base


@settings(max_examples=60, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(rows=docs_st, flts=st.lists(filters(), min_size=1, max_size=4))
def test_property_transient(rows, flts):
    store, t = build("transient")
    for i, d in enumerate(rows):
        t.publish(msgspec.json.encode({"id": i, **d}))
    for flt in flts:
        _check(t, rows, flt)


def test_property_persistent():
    path = tempfile.mkdtemp(prefix="sowprop")
    store, t = build("persistent", path)

    @settings(max_examples=25, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(rows=docs_st, flts=st.lists(filters(), min_size=1, max_size=4))
    def run(rows, flts):
        t.clear()
        for i, d in enumerate(rows):
            t.publish(msgspec.json.encode({"id": i, **d}))
        store.commit()
        for flt in flts:
            _check(t, rows, flt)

    try:
        run()
    finally:
        store.close()
        import shutil
        shutil.rmtree(path, ignore_errors=True)
