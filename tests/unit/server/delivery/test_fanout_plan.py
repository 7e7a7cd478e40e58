"""The fan-out's delivery plan (``server.delivery.plan``): one frame per connection whose
``sids`` are its subscriptions that pass, in subscription order; a filter text evaluated once
per message however many subscriptions share it; connections with another kind of
subscription delivered the general way; the plan made again when the subscriptions change.
A real router and fake connections; no server."""

from __future__ import annotations

from collections import Counter
from typing import Any

from amps_emulator.protocol.codec import payloads_of, split_frame
from amps_emulator.protocol.filter import compile_filter
from amps_emulator.server.core.message import Message
from amps_emulator.server.core.processors import Processors
from amps_emulator.server.core.router import Router, Subscription
from amps_emulator.server.delivery.fanout import fan_out
from amps_emulator.server.delivery.plan import Plan


class Conn:
    def __init__(self, name: str) -> None:
        self.name = name
        self.subs: dict[str, Subscription] = {}
        self.out: list[bytes] = []

    def send(self, data: bytes) -> None:
        self.out.append(data)

    def frames(self) -> list[tuple[dict, bytes]]:
        got = [split_frame(p) for p in payloads_of(b"".join(self.out))]
        self.out.clear()
        return got


class Bodies:
    def __init__(self) -> None:
        self.decoded = 0

    def decode(self, body: bytes, topic: str) -> Any:
        import json

        self.decoded += 1
        return json.loads(body)


class Host:
    def __init__(self) -> None:
        self.router = Router()
        self.stats: Counter[str] = Counter()
        self.bodies = Bodies()
        self.topics_in: dict[str, int] = {}
        self.topics_out: dict[str, int] = {}
        self.processors = Processors()
        self.delivered: Any = None

    def wallclock(self) -> float:
        return 1_700_000_000.0

    def sub(self, conn: Conn, sub_id: str, filt: str | None = None, **options: Any
            ) -> Subscription:
        s = Subscription(conn, sub_id, "t", compile_filter(filt) if filt else None, options)
        conn.subs[sub_id] = s
        self.router.add(s)
        return s

    def publish(self, body: bytes, bm: str = "1|1|") -> int:
        return fan_out(self, Message("t", body, bm))


class Counted:
    """A filter that counts its calls (the same text: the same answer)."""

    def __init__(self, text: str) -> None:
        self.inner = compile_filter(text)
        self.text = text
        self.deterministic = True
        self.calls = 0

    def __call__(self, doc: Any, ctx: Any = None) -> bool:
        self.calls += 1
        return self.inner(doc, ctx)


def test_one_frame_per_connection_listing_its_passing_subscriptions_in_order() -> None:
    h = Host()
    a, b = Conn("a"), Conn("b")
    h.sub(a, "a1", "/v > 5")
    h.sub(a, "a2")
    h.sub(b, "b1", "/v > 5")
    h.sub(a, "a3", "/v > 5")
    assert h.publish(b'{"v":10}') == 2
    [(head, body)] = a.frames()
    assert head == {"c": "p", "t": "t", "sids": "a1,a2,a3", "bm": "1|1|"} and body == b'{"v":10}'
    assert [f[0]["sids"] for f in b.frames()] == ["b1"]
    assert h.publish(b'{"v":1}', "1|2|") == 1
    assert [f[0] for f in a.frames()] == [{"c": "p", "t": "t", "sids": "a2", "bm": "1|2|"}]
    assert b.frames() == []
    assert h.stats["delivered"] == 3 and h.stats["published"] == 2


def test_a_filter_text_is_evaluated_once_per_message_for_all_its_subscriptions() -> None:
    h = Host()
    conns = [Conn(f"c{i}") for i in range(6)]
    ibm, msft = Counted("/sym = 'IBM'"), Counted("/sym = 'MSFT'")
    for i, c in enumerate(conns):
        s = h.sub(c, f"s{i}")
        s.filter = ibm if i % 2 == 0 else msft  # (routed already: the plan is made later)
    assert len(Plan(h.router.match("t"), Subscription.revision).filters) == 2
    for n, sym in enumerate(["IBM", "MSFT", "IBM", "AAPL"]):
        h.publish(b'{"sym":"%s","n":%d}' % (sym.encode(), n))
    assert ibm.calls == msft.calls == 4
    assert h.bodies.decoded == 4  # each body decoded once
    for i, c in enumerate(conns):
        want = [0, 2] if i % 2 == 0 else [1]
        assert [int(body.split(b":")[-1][:-1]) for _, body in c.frames()] == want


def test_a_filter_that_reads_the_clock_is_not_shared() -> None:
    h = Host()
    for i in range(3):
        h.sub(Conn(f"c{i}"), f"s{i}", "/t < UNIX_TIMESTAMP()")
    h.sub(Conn("d"), "d", "/v = 1")
    h.sub(Conn("e"), "e", "/v = 1")
    plan = Plan(h.router.match("t"), Subscription.revision)
    assert len(plan.filters) == 4


def test_a_connection_with_another_kind_of_subscription_gets_the_general_frames() -> None:
    h = Host()
    a, b = Conn("a"), Conn("b")
    h.sub(a, "plain")
    h.sub(a, "stamped", timestamp=True)
    h.sub(b, "b")
    plan = Plan(h.router.match("t"), Subscription.revision)
    assert [s.sub_id for s in plan.general] == ["plain", "stamped"]
    assert h.publish(b'{"v":1}') == 3
    got = a.frames()
    assert [f[0]["sids"] for f in got] == ["plain", "stamped"]
    assert "ts" not in got[0][0] and "ts" in got[1][0]
    assert [f[0]["sids"] for f in b.frames()] == ["b"]


def test_the_plan_follows_the_subscriptions() -> None:
    h = Host()
    a = Conn("a")
    s1 = h.sub(a, "s1")
    h.publish(b'{"v":1}')
    s2 = h.sub(a, "s2", "/v = 2")
    h.publish(b'{"v":2}')
    h.router.remove(s1)
    h.publish(b'{"v":3}')
    h.publish(b'{"v":2}')
    assert [f[0]["sids"] for f in a.frames()] == ["s1", "s1,s2", "s2"]

    class Window:  # a paginated window's state, set once the subscription is routed
        def __init__(self) -> None:
            self.seen: list[bytes] = []

        def published(self, msg: Message) -> None:
            self.seen.append(msg.body)

    s2.live = Window()
    h.publish(b'{"v":2}')
    assert s2.live.seen == [b'{"v":2}'] and a.frames() == []  # the window decides now
