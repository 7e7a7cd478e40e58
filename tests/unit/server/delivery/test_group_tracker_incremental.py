"""The running group state of views and aggregated subscriptions against recomputation:
after every publish, update or delete of any record, the groups a tracker keeps record by
record are, byte for byte, the groups recomputed from all their records (the tracker with
``incremental=False``) and a fresh aggregation of the topic -- for every aggregate function,
over integers, doubles (NaN, infinities, -0.0, subnormals, huge), NULLs, strings, booleans
and arrays."""

from __future__ import annotations

import math
from fractions import Fraction

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amps_emulator.server.delivery.aggregated import GroupTracker
from amps_emulator.sow import TopicSpec
from amps_emulator.sow.aggregate import AGGREGATE_FUNCTIONS, parse_aggregation
from amps_emulator.sow.store import TransientStore

FUNCTIONS = sorted(AGGREGATE_FUNCTIONS)

PROJECTION = "[/g, /note AS /note, " + ", ".join(
    f"{fn}(/v) AS /{fn.lower()}" for fn in FUNCTIONS) + (
    ", SUM(/v) / COUNT(/v) + /x AS /expr, MAX(/w) AS /maxw, MIN(/w) AS /minw,"
    " COUNT_DISTINCT(/w) AS /cdw, AVG(/w) AS /avgw, MIN(/u) AS /minu, MAX(/u) AS /maxu,"
    " MIN(/s) AS /mins, MAX(/s) AS /maxs]")

_floats = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.1, 0.2, -0.3, 1.0, -0.0, 0.0, 5e-324, 1e308, -1e308, 2.5, 1e16]))
_ints = st.one_of(st.integers(-5, 5), st.integers(-(2 ** 70), 2 ** 70),
                  st.sampled_from([1, 0, 10 ** 400, -(10 ** 400), 2 ** 64, 2 ** 53 + 1]))
_strings = st.sampled_from(["", "a", "b", "zz", "1", "1.0", "2.5", "-3", "nan?", "10"])
_scalars = st.one_of(st.none(), _ints, _floats, _strings, st.booleans())
_values = st.one_of(_scalars, st.lists(_scalars, max_size=2), st.just({"o": 1}))
# a group's values mostly of one kind, so MIN/MAX are answered from their heaps too
_numeric = st.one_of(st.none(), _ints, _floats)
# equal values of other types (which one MIN/MAX returns shows), and strings only
_ties = st.sampled_from([None, 1, 1.0, 0, 0.0, -0.0, 2, 2.0, -1, -1.0])
_texts = st.sampled_from([None, "a", "b", "b", "c"])

_op = st.one_of(
    st.tuples(st.just("pub"), st.integers(0, 11), st.sampled_from(["a", "b", "c", None]),
              st.one_of(_numeric, _values), st.one_of(_numeric, _strings, _values),
              st.booleans(), st.floats(0, 100), _ties, _texts),
    st.tuples(st.just("del"), st.lists(st.integers(0, 11), min_size=1, max_size=4)),
)


def _doc(k: int, g, v, w, ts: float, u=None, s=None) -> dict:
    doc = {"id": k, "note": f"n{k}-{ts}", "x": k, "u": u, "s": s}
    if g is not None:
        doc["g"] = g
    if v is not None:
        doc["v"] = v
    if w is not None:
        doc["w"] = w
    return doc


def _same(a, b) -> None:
    assert len(a) == len(b)
    for (new_a, prev_a), (new_b, prev_b) in zip(a, b, strict=True):
        for x, y in ((new_a, new_b), (prev_a, prev_b)):
            assert (x is None) == (y is None)
            if x is not None:
                assert (x.sow_key, x.data, x.timestamp) == (y.sow_key, y.data, y.timestamp)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_op, max_size=40))
def test_running_groups_equal_recomputed_groups_after_every_change(ops):
    spec = parse_aggregation({"grouping": "[/g]", "projection": PROJECTION})
    topic = TransientStore().open_topic(TopicSpec("t", keys=("/id",), durability="transient"))
    running = GroupTracker(topic, spec, "view")
    oracle = GroupTracker(topic, spec, "view", incremental=False)
    assert running.incremental and not oracle.incremental
    for op in ops:
        if op[0] == "pub":
            _, k, g, v, w, joined, ts, u, s = op
            doc = _doc(k, g, v, w, ts, u, s)
            rec = topic.publish(msgspec.json.encode({"id": k}), doc=doc, timestamp=ts).record
            changes = [(rec.sow_key, joined, doc)]  # joined: what a filter would say
        else:
            gone = topic.delete_by_keys([topic.key_for({"id": k}) for k in op[1]]).records
            changes = [(r.sow_key, False, None) for r in gone]
        _same(running.change_many(changes), oracle.change_many(changes))
        assert running.last.keys() == oracle.last.keys()
    # and both hold what aggregating the records in them from scratch gives
    members = [r for r in topic.query().records if r.sow_key in running]
    fresh = {r.sow_key: r.data for r in spec.aggregate(members, "view")}
    assert {r.sow_key: r.data for r in running.last.values()} == fresh


@pytest.mark.parametrize("fn", FUNCTIONS)
def test_each_function_follows_updates_and_deletes_of_one_group(fn):
    """Spelled out for one group: values replaced, removed, the extreme leaving."""
    spec = parse_aggregation({"grouping": "[/g]", "projection": f"[/g, {fn}(/v) AS /r]"})
    topic = TransientStore().open_topic(TopicSpec("t", keys=("/id",), durability="transient"))
    running = GroupTracker(topic, spec, "view")
    oracle = GroupTracker(topic, spec, "view", incremental=False)
    steps = [(1, 5), (2, 0.1), (3, 0.2), (4, -0.3), (5, 9), (5, 1.0), (1, None), (2, "x"),
             (3, 1), (4, 1.0), (2, None), (5, "del"), (3, "del"), (4, "del"), (1, "del"), (2, "del")]
    for k, v in steps:
        if v == "del":
            changes = [(r.sow_key, False, None) for r in topic.delete_by_keys(
                [topic.key_for({"id": k})]).records]
        else:
            doc = {"id": k, "g": "a", "v": v}
            rec = topic.publish(msgspec.json.encode(doc), doc=doc).record
            changes = [(rec.sow_key, True, doc)]
        _same(running.change_many(changes), oracle.change_many(changes))
    assert running.last == {}


def test_sums_of_doubles_do_not_depend_on_the_order_of_the_records():
    forwards, backwards = [0.1, 0.2, -0.3], [-0.3, 0.1, 0.2]
    assert AGGREGATE_FUNCTIONS["SUM"](forwards) == AGGREGATE_FUNCTIONS["SUM"](backwards) \
        == float(sum(map(Fraction, forwards)))
    assert AGGREGATE_FUNCTIONS["SUM"]([1e308, 1e308, -1e308]) == 1e308
    assert AGGREGATE_FUNCTIONS["SUM"]([1, 2]) == 3 and type(AGGREGATE_FUNCTIONS["SUM"]([1, 2])) is int


@given(st.lists(st.floats(-1e150, 1e150), min_size=2, max_size=30), st.booleans())
def test_deviations_are_the_exact_variance_rounded_once(xs, sample):
    n = len(xs)
    exact = [Fraction(x) for x in xs]
    mean = sum(exact) / n
    var = sum((x - mean) ** 2 for x in exact) / (n - 1 if sample else n)
    got = AGGREGATE_FUNCTIONS["STDDEV_SAMP" if sample else "STDDEV_POP"](xs)
    assert got == math.sqrt(float(var))
