"""A memo index a query's plan asks for is built in steps when the query runs in steps
(``Topic.memo_build_steps``): the query yields ``BUILDING`` between the steps, so the server
serves everyone else meanwhile instead of holding the loop for the whole build. Writes made
between the steps (updates of records indexed already and of records not yet reached,
inserts, deletes) must leave exactly the index a build of the final records gives; a build
cut short leaves nothing; a query meanwhile scans. Both stores.
"""

from __future__ import annotations

import random

import pytest

from amps_emulator.sow.paths import parse_path
from amps_emulator.sow.scan import BUILDING
from amps_emulator.sow.testing import docs, js

N = 300
V = parse_path("/v")


def topic(sf):
    t = sf.topic("orders", keys=("/id",))
    for i in range(N):
        t.publish(js({"id": i, "v": (i * 37) % N, "g": i % 3}))
    return t


def expected_rows(t) -> list[bytes]:
    """The memo index on /v of the records the topic holds now, as a fresh build makes it."""
    mx = t.memo_indexes[V]
    return sorted(e + r.sow_key.encode() for r in t.records()
                  for e in mx.entries(t.decode_body(r.data)))


def index_rows(t) -> list[bytes]:
    return sorted(t.memo_indexes[V].table.range(None, None))


def test_writes_between_the_steps_leave_the_index_a_fresh_build_gives(sf) -> None:
    t = topic(sf)
    rnd = random.Random(7)
    steps = t.query_steps(filter="/v >= 100", chunk=16)  # steps of 2 records
    building = 0
    next_id = N
    while (y := next(steps)) is BUILDING:
        building += 1
        assert V in t.memo_indexes and V in t._building  # kept by writes, read by no plan
        for _ in range(3):
            op = rnd.random()
            if op < 0.5:  # an update, of a record indexed already or not yet
                i = rnd.randrange(next_id)
                t.publish(js({"id": i, "v": rnd.randrange(-50, 2 * N), "g": 9}))
            elif op < 0.8:
                t.publish(js({"id": next_id, "v": rnd.randrange(N)}))
                next_id += 1
            else:
                t.delete_by_keys([t.key_for({"id": rnd.randrange(next_id)})])
        if building % 20 == 0 and sf.store is not None:
            sf.store.commit()
    assert y is None and building >= 100  # the snapshot step: the build is over
    assert V not in t._building
    result = None
    while result is None:
        try:
            next(steps)
        except StopIteration as stop:
            result = stop.value
    assert "memo[/v] (created)" in result.plan
    assert index_rows(t) == expected_rows(t)
    want = t.query(filter="/v >= 100", plan="scan")
    assert sorted(r.sow_key for r in result.records) == sorted(r.sow_key for r in want.records)
    assert {tuple(d) for d in t._b.meta_get("indexes", [])} >= {("memo", "/v")}
    t.publish(js({"id": 1, "v": 1234}))  # kept afterwards as any index is
    assert index_rows(t) == expected_rows(t)
    assert docs(t.query(filter="/v = 1234")) == [{"id": 1, "v": 1234}]


def test_a_build_cut_short_leaves_no_index(sf) -> None:
    t = topic(sf)
    steps = t.query_steps(filter="/v >= 100", chunk=16)
    assert next(steps) is BUILDING and next(steps) is BUILDING
    t.publish(js({"id": 5, "v": 7}))
    steps.close()  # the client went away
    assert V not in t.memo_indexes and not t._building
    assert len(t.memo_indexes) == 0 and ["memo", "/v"] not in t._b.meta_get("indexes", [])
    t.publish(js({"id": 6, "v": 8}))  # no index to keep
    again = t.query_steps(filter="/v >= 100", chunk=16)
    n = 0
    while next(again) is BUILDING:
        n += 1
    assert n >= N // 2
    assert index_rows(t) == expected_rows(t)


def test_a_query_while_the_index_is_built_scans(sf) -> None:
    t = topic(sf)
    first = t.query_steps(filter="/v >= 100", chunk=16)
    assert next(first) is BUILDING
    other = t.query(filter="/v < 10")  # at once: no plan reads the half-built index
    assert other.plan.startswith("scan")
    assert sorted(d["v"] for d in docs(other)) == list(range(10))
    while next(first) is BUILDING:
        pass
    assert t.query(filter="/v < 10").plan.startswith("memo[/v]")


def test_a_small_topic_builds_at_once_and_a_delete_never_in_steps(sf) -> None:
    t = sf.topic("orders", keys=("/id",))
    t.publish(js({"id": 1, "v": 1}))
    steps = t.query_steps(filter="/v >= 0", chunk=16)
    with pytest.raises(StopIteration):  # one record: indexed and answered in the first step
        next(steps)
    u = sf.topic("other", keys=("/id",))
    for i in range(N):
        u.publish(js({"id": i, "g": i % 3}))
    deleting = u.delete_steps("/g = 1", chunk=16, position=0)
    assert next(deleting) is not BUILDING  # what it matches is the state when it was logged
    assert parse_path("/g") in u.memo_indexes and not u._building


def test_an_index_built_in_steps_is_there_after_a_restart(sf) -> None:
    if not sf.persistent:
        pytest.skip("a transient topic keeps nothing across a restart")
    t = topic(sf)
    steps = t.query_steps(filter="/v >= 100", chunk=16)
    while next(steps, None) is BUILDING:
        pass
    steps.close()
    sf.reopen()
    t = sf.topic("orders", keys=("/id",))
    assert V in t.memo_indexes
    assert index_rows(t) == expected_rows(t)
    assert t.query(filter="/v >= 100").plan.startswith("memo[/v]")


def test_an_index_asked_for_at_once_during_its_build_is_finished_then(sf) -> None:
    t = topic(sf)
    steps = t.query_steps(filter="/v >= 100", chunk=16)
    assert next(steps) is BUILDING
    t.publish(js({"id": 3, "v": 5}))
    mx = t.add_memo_index("/v")  # e.g. a delete's plan, or an operator
    assert not t._building and index_rows(t) == expected_rows(t)
    steps.close()  # the query that began the build goes away: the index stays
    assert t.memo_indexes.get(V) is mx and index_rows(t) == expected_rows(t)
    assert ["memo", "/v"] in t._b.meta_get("indexes", [])
