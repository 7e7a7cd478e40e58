"""Model tests for the state live subscriptions keep: after any sequence of publishes and
deletes, a paginated window and an aggregation's groups equal what a fresh query computes,
and what the subscriber was sent adds up to that same state."""

from __future__ import annotations

import json
import random

import pytest

from amps_emulator.protocol.codec import split_frame
from amps_emulator.protocol.filter import compile_filter
from amps_emulator.server.core.message import Message
from amps_emulator.server.delivery.aggregated import AggregatedSubscription
from amps_emulator.server.delivery.pagination import PageWindow
from amps_emulator.sow import TopicSpec
from amps_emulator.sow.aggregate import parse_aggregation
from amps_emulator.sow.query import parse_order_by
from amps_emulator.sow.store import TransientStore
from amps_emulator.sow.testing import js


class FakeConn:
    def __init__(self) -> None:
        self.frames: list[tuple[dict, bytes]] = []
        self.closed = False

    def send(self, data: bytes) -> None:
        self.frames.append(split_frame(data[4:]))

    def take(self) -> list[tuple[dict, bytes]]:
        out, self.frames = self.frames, []
        return out


class FakeSub:
    def __init__(self, flt: str | None, options: dict) -> None:
        self.conn = FakeConn()
        self.sub_id = "s"
        self.filter = compile_filter(flt) if flt else None
        self.options = options
        self.select = None


def published(topic, doc) -> Message:
    res = topic.publish(js(doc))
    rec = res.record
    return Message(topic.name, rec.data, None, None, rec.sow_key, None, "", rec.doc)


def random_ops(rng: random.Random, n: int):
    for _ in range(n):
        if rng.random() < 0.8:
            yield "pub", {"id": rng.randrange(25), "v": rng.randrange(60),
                          "g": rng.choice("abcd")}
        else:
            yield "del", rng.randrange(25)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("order", ["/v DESC", "/v", None])
def test_a_paginated_window_always_equals_a_fresh_query(seed, order):
    rng = random.Random(seed)
    topic = TransientStore().open_topic(TopicSpec("t", keys=("/id",), durability="transient"))
    sub = FakeSub("/v < 40", {"oof": True})
    window = PageWindow(sub, topic, parse_order_by(order), top_n=4, skip_n=3)
    window.load([])
    window.catch_up()
    seen: dict[str, dict] = {}  # what the subscriber holds, from the frames it was sent
    for op, arg in random_ops(rng, 400):
        if op == "pub":
            window.published(published(topic, arg))
        else:
            for rec in topic.delete_by_keys([topic.key_for({"id": arg})]).records:
                window.removed(rec, "deleted")
        for h, body in sub.conn.take():
            if h["c"] == "p":
                seen[h["k"]] = json.loads(body)
            else:
                assert h["c"] == "oof"
                seen.pop(h["k"])
        matching = [r for r in topic.query("/v < 40").records]
        ob = parse_order_by(order)
        if ob is None:
            matching.sort(key=lambda r: r.sow_key)
        else:
            desc = ob.keys[0][1]
            matching.sort(key=lambda r: (-r.doc["v"] if desc else r.doc["v"], r.sow_key))
        expected = [r.sow_key for r in matching[3:7]]
        assert window.window() == expected
        assert set(seen) == set(expected)
        assert all(seen[k] == topic.get(k).doc for k in expected)


@pytest.mark.parametrize("seed", range(4))
def test_aggregated_groups_always_equal_a_fresh_aggregation(seed):
    rng = random.Random(seed)
    topic = TransientStore().open_topic(TopicSpec("t", keys=("/id",), durability="transient"))
    spec = parse_aggregation({"grouping": "[/g]",
                              "projection": "[/g, SUM(/v) AS /total, COUNT(/id) AS /n]"})
    state = AggregatedSubscription(topic, spec, delta=False)
    state.sub = FakeSub("/v >= 10", {"oof": True})
    state.load([], spec.aggregator("t"), [])
    state.catch_up()
    seen: dict[str, dict] = {}
    for op, arg in random_ops(rng, 400):
        if op == "pub":
            state.published(published(topic, arg))
        else:
            for rec in topic.delete_by_keys([topic.key_for({"id": arg})]).records:
                state.removed(rec, "deleted")
        for h, body in state.sub.conn.take():
            if h["c"] == "p":
                seen[h["k"]] = json.loads(body)
            else:
                seen.pop(h["k"])
        fresh = spec.aggregate(topic.query("/v >= 10").records, "t")
        assert seen == {r.sow_key: r.doc for r in fresh}
