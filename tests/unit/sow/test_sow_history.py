"""SOW History: versions kept at granularity boundaries, tombstones, the window, and the state
as of an instant, on transient and persistent topics alike."""

from __future__ import annotations

import pytest

from amps_emulator.sow.history import History, HistorySpec
from amps_emulator.sow.storage.memory_tables import MemKVTable
from amps_emulator.sow.testing import FakeClock, StoreFactory, docs, js

T0 = 1_700_000_000.0  # a multiple of 10 s


@pytest.fixture(params=["transient", "persistent"])
def factory(request, tmp_path):
    f = StoreFactory(request.param, tmp_path, FakeClock(T0))
    yield f
    f.close()


def pub(topic, clock, at, **doc):
    clock.t = T0 + at
    topic.publish(js(doc), timestamp=clock.t)
    if topic._b.persistent:
        topic._b.env.commit()


def as_of(topic, at, flt=None, **kw):
    return sorted((d["id"], d["v"]) for d in docs(
        topic.query(flt, history_cut=topic.history_cut(T0 + at), **kw)))


def test_granularity_keeps_the_version_current_at_each_boundary(factory):
    clock = factory.clock
    t = factory.topic(keys=("/id",), history=HistorySpec(window=3600, granularity=10))
    pub(t, clock, 5, id=1, v="a")
    pub(t, clock, 7, id=1, v="b")     # same interval: "a" was never current at a boundary
    pub(t, clock, 12, id=1, v="c")    # "b" was current at T0+10: saved
    pub(t, clock, 18, id=1, v="d")    # "c" replaced within its interval: not saved
    pub(t, clock, 25, id=2, v="x")
    clock.t = T0 + 30
    assert as_of(t, 4) == []                        # cut T0+0: nothing yet
    assert as_of(t, 9) == []                        # cut T0+0 still (granularity 10 s)
    assert as_of(t, 15) == [(1, "b")]               # cut T0+10
    assert as_of(t, 29) == [(1, "d")]               # cut T0+20: "x" (at 25) is after it
    assert as_of(t, 25) == [(1, "d")]
    assert as_of(t, 31) == [(1, "d"), (2, "x")]
    # the current query is unchanged
    assert sorted(d["v"] for d in docs(t.query())) == ["d", "x"]


def test_granularity_zero_keeps_every_version(factory):
    clock = factory.clock
    t = factory.topic(keys=("/id",), history=HistorySpec(window=None, granularity=0))
    for i, v in enumerate("abcde"):
        pub(t, clock, i, id=1, v=v)
    clock.t = T0 + 100
    assert [as_of(t, i) for i in range(5)] == [[(1, v)] for v in "abcde"]
    assert as_of(t, -1) == []


def test_a_delete_is_remembered_and_earlier_versions_stay(factory):
    clock = factory.clock
    t = factory.topic(keys=("/id",), history=HistorySpec(window=3600, granularity=0))
    pub(t, clock, 1, id=1, v="a")
    pub(t, clock, 2, id=2, v="b")
    clock.t = T0 + 3
    assert t.delete_by_filter("/id = 1").records_deleted == 1
    pub(t, clock, 4, id=1, v="again")
    clock.t = T0 + 10
    assert as_of(t, 2) == [(1, "a"), (2, "b")]
    assert as_of(t, 3) == [(2, "b")]
    assert as_of(t, 4) == [(1, "again"), (2, "b")]
    # filters, sow_keys, ordering and paging apply to the historical state
    assert as_of(t, 2, "/v = 'b'") == [(2, "b")]
    keys = t.key_for({"id": 1})
    assert as_of(t, 2, sow_keys=keys) == [(1, "a")]
    res = t.query(order_by="/id DESC", top_n=1, history_cut=t.history_cut(T0 + 2))
    assert [d["id"] for d in docs(res)] == [2]
    assert (res.matches, res.topic_matches) == (2, 2)


def test_expiration_ends_a_version_at_its_deadline(factory):
    clock = factory.clock
    t = factory.topic(keys=("/id",), expiration=5.0,
                      history=HistorySpec(window=3600, granularity=0))
    pub(t, clock, 1, id=1, v="a")      # expires at T0+6
    clock.t = T0 + 4
    assert as_of(t, 3) == [(1, "a")]
    assert as_of(t, 7) == []           # not swept yet: the deadline hides it anyway
    clock.t = T0 + 8
    assert [r.sow_key for r in t.sweep_expired()] == [t.key_for({"id": 1})]
    assert as_of(t, 3) == [(1, "a")]
    assert as_of(t, 7) == []


def test_the_window_drops_old_versions_but_never_the_current_record(factory):
    clock = factory.clock
    t = factory.topic(keys=("/id",), history=HistorySpec(window=100, granularity=0))
    pub(t, clock, 0, id=1, v="a")
    pub(t, clock, 10, id=1, v="b")
    pub(t, clock, 20, id=2, v="x")
    clock.t = T0 + 30
    t.delete_by_keys(t.key_for({"id": 2}))
    assert len(t.history) == 3  # a@0, x@20, tombstone@30
    clock.t = T0 + 115          # horizon T0+15: "a" is invisible, "b" still current
    assert as_of(t, 5) == []    # before the window: nothing, whatever was there
    assert as_of(t, 25) == [(1, "b"), (2, "x")]
    assert t.prune_history() == (1, None)
    assert as_of(t, 25) == [(1, "b"), (2, "x")]
    clock.t = T0 + 1000         # everything is older than the window: only the current
    assert t.prune_history() == (2, None)
    assert len(t.history) == 0
    assert as_of(t, 950) == [(1, "b")]


def test_a_write_prunes_its_own_key(factory):
    clock = factory.clock
    t = factory.topic(keys=("/id",), history=HistorySpec(window=10, granularity=0))
    for i in range(50):
        pub(t, clock, i, id=1, v=str(i))
    # only the versions a query inside the window can see are kept
    assert len(t.history) <= 11
    clock.t = T0 + 49
    assert as_of(t, 45) == [(1, "45")]


def test_history_survives_a_restart(tmp_path):
    f = StoreFactory("persistent", tmp_path, FakeClock(T0))
    spec = dict(keys=("/id",), history=HistorySpec(window=None, granularity=0))
    t = f.topic(**spec)
    pub(t, f.clock, 1, id=1, v="a")
    pub(t, f.clock, 2, id=1, v="b")
    f.reopen()
    t = f.topic(**spec)
    assert as_of(t, 1) == [(1, "a")]
    assert as_of(t, 2) == [(1, "b")]
    f.close()


def test_a_topic_without_history_refuses_a_cut(factory):
    t = factory.topic(keys=("/id",))
    with pytest.raises(ValueError):
        t.history_cut(T0)


def test_history_spec_checks_its_values():
    with pytest.raises(ValueError):
        HistorySpec(window=0, granularity=1)
    with pytest.raises(ValueError):
        HistorySpec(window=10, granularity=-1)


def test_cut_rounds_down_to_the_granularity():
    h = History(HistorySpec(window=None, granularity=10), MemKVTable())
    assert h.cut(T0 + 9.9) == T0
    assert h.cut(T0 + 10) == T0 + 10
    h0 = History(HistorySpec(window=None, granularity=0), MemKVTable())
    assert h0.cut(T0 + 1.5) == T0 + 1.5 + 1e-6


def test_a_historical_query_reads_in_steps_and_ignores_later_writes(factory):
    clock = factory.clock
    t = factory.topic(keys=("/id",), history=HistorySpec(window=None, granularity=0))
    for i in range(40):
        pub(t, clock, 1 + i, id=i, v="old")       # id i at T0+1+i
    for i in range(0, 40, 2):
        pub(t, clock, 50 + i, id=i, v="new")      # even ids replaced later
    clock.t = T0 + 100
    steps = t.query_steps("/id < 30", order_by="/id DESC",
                          history_cut=t.history_cut(T0 + 20), chunk=8)
    next(steps)  # plans and takes the snapshot
    pub(t, clock, 101, id=5, v="after")           # writes between steps change nothing
    t.delete_by_filter("/id = 3")
    if t._b.persistent:
        t._b.env.commit()
    n = 1
    while True:
        try:
            next(steps)
            n += 1
        except StopIteration as stop:
            res = stop.value
            break
    assert n > 5  # about 100 rows, 8 per step
    assert [(d["id"], d["v"]) for d in docs(res)] == [(i, "old") for i in range(19, -1, -1)]
    assert (res.matches, res.topic_matches) == (20, 20)
    # the same query at once gives the same answer
    once = t.query("/id < 30", order_by="/id DESC", history_cut=t.history_cut(T0 + 20))
    assert docs(once) == docs(res)


def test_window_maintenance_in_bounded_passes_equals_one_full_pass(tmp_path):
    def build(kind, sub):
        f = StoreFactory(kind, tmp_path / sub, FakeClock(T0))
        t = f.topic(keys=("/id",), history=HistorySpec(window=50, granularity=0))
        for step in range(12):
            for i in range(10):
                pub(t, f.clock, step * 10 + i, id=i if step < 11 else i + 100, v=str(step))
        t.delete_by_filter("/id < 3")
        f.clock.t = T0 + 200
        return f, t

    for kind in ("transient", "persistent"):
        f1, full = build(kind, kind + "1")
        f2, stepped = build(kind, kind + "2")
        dropped, _ = full.prune_history()
        total, at, passes = 0, None, 0
        while True:
            n, at = stepped.prune_history(None, at, 7)
            total += n
            passes += 1
            if at is None:
                break
        assert passes > 3 and total == dropped > 0
        assert len(stepped.history) == len(full.history)
        assert as_of(stepped, 180) == as_of(full, 180)
        f1.close()
        f2.close()
