"""Queries in steps (Topic.query_steps): the same answer as a one-step query, read from a
snapshot that writes made between steps do not change; persistent and transient stores."""

from __future__ import annotations

import lmdb
import pytest

from amps_emulator.sow.scan import BUILDING
from amps_emulator.sow.testing import docs, js

N = 100


def topic(sf, **kw):
    t = sf.topic("orders", keys=("/id",), hash_indexes=(("/g",),), **kw)
    for i in range(N):
        t.publish(js({"id": i, "g": i % 2, "v": (i * 37) % N}))
    return t


def run_with_writes(steps, write):
    """Run the (planned) query ``steps`` to the end, ``write(n)`` before each step (n = 0,
    1, ...): (its result, the number of writes)."""
    n = 0
    while True:
        write(n)
        n += 1
        try:
            next(steps)
        except StopIteration as stop:
            return stop.value, n


def run(steps):
    """(result, number of steps after the first)."""
    n = 0
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            return stop.value, n
        n += 1


QUERIES = [
    dict(),
    dict(filter="/v >= 10"),
    dict(filter="/g = 1"),  # hash index: 50 candidates, read in steps
    dict(filter="/v >= 10", order_by="/v DESC", top_n=17, skip_n=3),
    dict(filter="/g = 0 AND /v < 90", order_by="/id"),
    dict(sow_keys=None, filter="/id IN (1, 5, 99)"),
]


@pytest.mark.parametrize("q", QUERIES)
def test_steps_give_the_one_step_answer(sf, q):
    t = topic(sf)
    want = t.query(**q)
    got, steps = run(t.query_steps(**q, chunk=7))
    assert docs(got) == docs(want)
    assert [r.sow_key for r in got.records] == [r.sow_key for r in want.records]
    assert (got.matches, got.topic_matches) == (want.matches, want.topic_matches)
    if "IN" not in q.get("filter", ""):
        assert steps >= 2  # it really ran in steps
        assert ("in steps of 1" if "hash" in got.plan else "in steps of 7") in got.plan


def test_small_queries_finish_in_the_first_step(sf):
    t = topic(sf)
    steps = t.query_steps(filter="/id = 3", chunk=7)
    with pytest.raises(StopIteration) as stop:
        next(steps)
    assert docs(stop.value.value) == [{"id": 3, "g": 1, "v": 11}]
    _, n = run(t.query_steps(filter="/v >= 0", chunk=1000))  # the topic is smaller
    assert n == 0


@pytest.mark.parametrize("flt", [None, "/v >= 0", "/g = 1"])
def test_writes_between_steps_do_not_change_the_answer(sf, flt):
    t = topic(sf)
    want = t.query(filter=flt)
    steps = t.query_steps(filter=flt, chunk=9)
    next(steps)  # planned, snapshot taken

    def write(n: int) -> None:
        # updates, deletes and inserts between every two steps, committed as the server does
        t.publish(js({"id": n, "g": 1, "v": -1}))
        t.publish(js({"id": 1000 + n, "g": 1, "v": 5}))
        t.delete_by_data(js({"id": N - 1 - n}))
        sf.store.commit()

    got, n = run_with_writes(steps, write)
    assert n >= 3
    assert docs(got) == docs(want)
    assert len(t.query(filter="/v = -1").records) == n  # the writes did happen
    assert t.count() == N + n - n


def test_an_abandoned_query_releases_its_snapshot(sf, tmp_path):
    t = topic(sf)
    steps = t.query_steps(filter="/v >= 0", chunk=5)
    next(steps)
    next(steps)
    steps.close()
    if sf.persistent:
        assert t._b.env.snapshots == 0
    t.publish(js({"id": 1, "g": 0, "v": 0}))
    sf.store.commit()
    assert docs(t.query(filter="/id = 1")) == [{"id": 1, "g": 0, "v": 0}]


def test_map_growth_during_a_query_fails_it_cleanly(tmp_path):
    from amps_emulator.sow import SowStore, TopicSpec

    store = SowStore(str(tmp_path / "env"), sync=False, map_size=1 << 20)
    t = store.open_topic(TopicSpec("orders", keys=("/id",)))
    for i in range(200):
        t.publish(js({"id": i, "pad": "x" * 100}))
    store.commit()
    steps = t.query_steps(filter="/id >= 0", chunk=10)
    while next(steps) is BUILDING:  # the memo index on /id first, then the snapshot
        pass
    grows = t._b.env.grows
    i = 0
    while t._b.env.grows == grows:  # write until the map grows under the open snapshot
        t.publish(js({"id": 1000 + i, "pad": "y" * 500}))
        i += 1
        if i % 100 == 0:
            store.commit()
    with pytest.raises(lmdb.Error):
        for _ in steps:
            pass
    assert t._b.env.snapshots == 0
    store.commit()
    assert t.count() == 200 + i  # nothing written was lost
    store.close()


@pytest.mark.parametrize("order", ["/v", "/v DESC", "/s DESC, /v", "/s TEXT DESC, /v DESC",
                                   "/v TEXT, /s"])
@pytest.mark.parametrize("top_n,skip_n", [(None, None), (7, None), (5, 11), (None, 30),
                                          (1000, 0)])
def test_a_long_ordered_result_is_sorted_in_steps_exactly_as_at_once(order, top_n, skip_n):
    import random

    from amps_emulator.sow import TopicSpec
    from amps_emulator.sow.store import TransientStore
    from amps_emulator.sow.testing import js

    rng = random.Random(5)
    topic = TransientStore().open_topic(TopicSpec("t", keys=("/id",), durability="transient"))
    values = [1, 2, 2.5, 10, -3, True, False, "a", "B", "10", "", None, [4, 1], {"x": 1}]
    for i in range(300):
        doc = {"id": i, "v": rng.choice(values), "s": rng.choice(values)}
        if rng.random() < 0.1:
            del doc["v"]
        topic.publish(js(doc))
    at_once = topic.query(order_by=order, top_n=top_n, skip_n=skip_n)
    steps = topic.query_steps(order_by=order, top_n=top_n, skip_n=skip_n, chunk=16)
    n = 0
    while True:
        try:
            next(steps)
            n += 1
        except StopIteration as stop:
            stepped = stop.value
            break
    assert n > 10
    assert [r.sow_key for r in stepped.records] == [r.sow_key for r in at_once.records]


def test_a_big_delete_runs_in_steps_and_keeps_what_changed_after_it(sf):
    t = topic(sf)
    t.query_chunk = 8
    steps = t.delete_steps("/v < 60", position=0)
    parts = [next(steps)]  # plans and takes the snapshot
    sf.clock.advance(1)
    t.publish(js({"id": 1, "g": 1, "v": 1}))  # matched, changed after the delete: kept
    t.publish(js({"id": 500, "g": 0, "v": 5}))  # new after the delete: kept
    removed_later = t.delete_by_keys([t.key_for({"id": 3})]).records  # gone meanwhile
    while True:
        try:
            parts.append(next(steps))
        except StopIteration as stop:
            result = stop.value
            break
    matched = [i for i in range(N) if (i * 37) % N < 60]
    assert len(parts) > 5
    assert result.matches == len(matched)
    gone = {r.doc["id"] for part in parts for r in part}
    assert gone == set(matched) - {1, 3} and result.records_deleted == len(gone)
    assert len(removed_later) == 1
    left = sorted(d["id"] for d in docs(t.query()))
    assert left == sorted(set(range(N)) - set(matched) | {1, 500})


def test_a_big_delete_holds_the_applied_position_until_it_is_done(tmp_path):
    from amps_emulator.sow.testing import FakeClock, StoreFactory

    f = StoreFactory("persistent", tmp_path, FakeClock())
    t = f.topic("orders", keys=("/id",))
    for i in range(40):
        t.publish(js({"id": i}), position=100 + i)
    f.store.commit()
    t.query_chunk = 8
    steps = t.delete_steps("/id >= 0", position=200)
    next(steps)
    next(steps)  # part of the delete is done
    t.publish(js({"id": 1000}), position=201)  # a publish logged after the delete
    f.store.commit()
    assert t._b.meta_get("applied") == 199  # recovery would replay the delete, then 201
    for _ in steps:
        pass
    f.store.commit()
    assert t._b.meta_get("applied") == 201
    assert [d["id"] for d in docs(t.query())] == [1000]
    f.close()
