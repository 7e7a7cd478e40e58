"""``server.ops.heap``: what survives a full collection is frozen (a later full collection walks
only the young objects), cyclic garbage made after a freeze is still collected, and frozen
objects that become cyclic garbage are collected once the frozen set has doubled."""

from __future__ import annotations

import gc
import weakref

import pytest

from amps_emulator.server.ops.heap import HeapPolicy


class Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the collector frees it


@pytest.fixture
def policy():
    scheduled: list = []
    p = HeapPolicy(scheduled.append, factor=2, min_growth=1000, check_every=0.0)
    p.scheduled = scheduled  # type: ignore[attr-defined]
    p.start()
    yield p
    p.stop()
    gc.unfreeze()
    gc.collect()


def test_what_survives_a_full_collection_is_frozen(policy):
    before = gc.get_freeze_count()
    kept = [Node() for _ in range(500)]
    gc.collect()
    assert gc.get_freeze_count() >= before + 500
    walked = {id(o) for g in range(3) for o in gc.get_objects(g)}
    assert not walked & {id(n) for n in kept}  # no collection walks them
    assert policy.full >= 1


def test_cyclic_garbage_made_after_a_freeze_is_collected(policy):
    gc.collect()
    node = Node()
    dead = weakref.ref(node)
    del node
    gc.collect(0)  # a young collection: it was never frozen
    assert dead() is None
    assert policy.scheduled == []


def test_frozen_cyclic_garbage_is_collected_once_the_frozen_set_has_doubled(policy):
    base = policy.base
    nodes = [Node() for _ in range(100)]
    gc.collect()  # they survive it: frozen
    dead = weakref.ref(nodes[0])
    del nodes
    gc.collect()
    assert dead() is not None  # frozen garbage waits...
    assert policy.scheduled == []  # (not doubled yet)
    growth = [Node() for _ in range(base + 2000)]  # ...until the frozen set has doubled
    gc.collect()
    assert policy.scheduled == [policy.collect_all]
    policy.scheduled.pop()()
    assert dead() is None
    assert policy.thaws == 1 and policy.base >= len(growth)
    # frozen again (objects freed since, by reference counting here or in another thread,
    # leave the permanent generation: the count may only have fallen below the new base)
    assert len(growth) <= gc.get_freeze_count() <= policy.base
    gc.collect()
    assert policy.scheduled == []  # the new base: no second complete collection


def test_a_closed_loop_leaves_the_collection_to_the_next_time():
    def closed(_fn):
        raise RuntimeError("Event loop is closed")

    p = HeapPolicy(closed, factor=2, min_growth=10, check_every=0.0)
    p.start()
    try:
        growth = [Node() for _ in range(p.base + 100)]
        gc.collect()  # would schedule the complete collection: nothing raised
        assert not p.thaw_due and p.full >= 1 and growth
    finally:
        p.stop()
        gc.unfreeze()
        gc.collect()
