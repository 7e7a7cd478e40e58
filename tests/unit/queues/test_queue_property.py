"""Property test: the queue engine against a simple model (hypothesis rule-based).

The model keeps, per message, one status (available, leased/sent to a subscription, acked,
expired) and replays the engine's actions on it, checking each transition is legal:

* a message is never leased to two subscriptions at once (a ``Deliver`` needs "available");
* a delivery goes to a subscription whose filter matches, is the first in delivery order
  (oldest, or highest priority) it could take, and never exceeds its backlog or MaxBacklog;
* ``Returned``/``Expired`` only for messages in the queue, with legal reasons and times;
* acks obey the Leasing model and the option;
* after every step the engine agrees with the model (every message enqueued is acked,
  expired, sent, or still queued - and the queued ones are exactly what the engine shows),
  nothing that could be delivered is left undelivered, nothing is overdue after ``poll``,
  and ``poll`` before ``next_deadline()`` does nothing.
"""

from __future__ import annotations

import math

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from amps_emulator.queues import Acked, Deliver, Expired, QueueEngine, QueueSpec, Returned

FILTERS = {
    "all": None,
    "even": lambda p: p % 2 == 0,
    "not3": lambda p: p % 3 != 0,
}
SUB_KEYS = ("s1", "s2", "s3")
VALID_REASONS = {"time_limit", "max_cancels", "max_deliveries", "forced_expire"}

AVAIL, LEASED, ACKED, EXPIRED = "avail", "leased", "acked", "expired"


def bm(i: int) -> str:
    return f"3|{i}|"


class QueueModel(RuleBasedStateMachine):
    SPEC: dict = {}

    @initialize(compaction=st.sampled_from(["prefix", "sparse", "both"]))
    def setup(self, compaction):
        self.spec = QueueSpec("prop", **self.SPEC)
        self.eng = QueueEngine(self.spec)
        # compact at tiny sizes so renumbering is exercised under the model all the time
        self.eng._compact_min = 10**9 if compaction == "sparse" else 2
        self.eng._sparse_min = 10**9 if compaction == "prefix" else 1
        self.eng._sparse_ratio = 0
        self.now = 0.0
        self.n = 0
        self.status: dict[int, str] = {}
        self.holder: dict[int, str] = {}
        self.lease_until: dict[int, float] = {}
        self.deadline: dict[int, float] = {}
        self.prio: dict[int, object] = {}
        self.barrier: set[int] = set()
        self.delivered: dict[int, int] = {}
        self.cancels: dict[int, int] = {}
        self.deferred: set[int] = set()
        self.swallowed: set[int] = set()
        self.subs: dict[str, tuple[int, object]] = {}  # key -> (limit, eligible)

    # -- model helpers -------------------------------------------------------------------
    def held(self, sub: str) -> int:
        return sum(1 for p, h in self.holder.items() if h == sub)

    def outstanding(self) -> int:
        return len(self.holder)

    def key(self, p: int):
        if self.spec.has_priority:
            v = self.prio[p]
            return (-(v if v is not None else -1), p)
        return (p,)

    def eligible(self, sub: str, p: int) -> bool:
        f = self.subs[sub][1]
        return f is None or f(p)

    def pending_barrier(self):
        bs = [b for b in self.barrier if self.status[b] == AVAIL]
        return min(bs) if bs else None

    def deliverable(self, p: int) -> bool:
        if self.status[p] != AVAIL or p in self.barrier:
            return False
        b = self.pending_barrier()
        return b is None or p < b

    def release(self, p: int) -> None:
        self.holder.pop(p, None)
        self.lease_until.pop(p, None)

    def apply(self, actions: list) -> None:
        amo = self.spec.at_most_once
        for a in actions:
            t = type(a)
            if t is Deliver:
                p = a.position
                assert a.sub_key in self.subs
                assert self.eligible(a.sub_key, p)
                if a.barrier:
                    assert p in self.barrier and self.status[p] == AVAIL
                    assert all(self.status[q] in (ACKED, EXPIRED) and q not in self.holder
                               for q in self.status if q < p), "barrier released early"
                    assert a.lease_expiry is None
                    continue
                assert self.deliverable(p), f"deliver of {p} in state {self.status[p]}"
                for q, s in self.status.items():  # first in delivery order it could take
                    if self.deliverable(q) and self.eligible(a.sub_key, q):
                        assert self.key(q) >= self.key(p), f"{q} should precede {p}"
                self.delivered[p] = self.delivered.get(p, 0) + 1
                assert a.delivery_count == self.delivered[p]
                self.status[p] = ACKED if amo else LEASED  # at-most-once: out of the queue
                self.holder[p] = a.sub_key
                assert self.held(a.sub_key) <= self.subs[a.sub_key][0], "backlog exceeded"
                mb = self.spec.max_backlog
                assert mb is None or self.outstanding() <= mb, "MaxBacklog exceeded"
                lp = self.spec.lease_period
                assert a.lease_expiry == (None if lp is None else self.now + lp)
                if lp is not None:
                    self.lease_until[p] = a.lease_expiry
            elif t is Acked:
                if a.position is None:
                    continue
                p = a.position
                if a.barrier:
                    assert p in self.barrier and self.status[p] == AVAIL
                else:
                    assert self.status[p] in (AVAIL, LEASED) or (amo and p in self.holder)
                self.status[p] = ACKED
                self.release(p)
            elif t is Returned:
                p = a.position
                assert self.status[p] == LEASED and self.holder[p] == a.sub_key
                if a.reason == "lease_expired":
                    assert self.lease_until[p] <= self.now
                if a.reason == "cancel":
                    self.cancels[p] = self.cancels.get(p, 0) + 1
                    mc = self.spec.max_cancels
                    assert not (mc and self.cancels[p] >= mc), "should have hit MaxCancels"
                md = self.spec.max_deliveries
                assert not (md and self.delivered[p] >= md), "should have hit MaxDeliveries"
                assert self.deadline[p] > self.now, "should have expired (time_limit)"
                self.status[p] = AVAIL
                self.release(p)
            elif t is Expired:
                p = a.position
                assert self.status[p] in (AVAIL, LEASED), f"expire of {p} in {self.status[p]}"
                reasons = a.reason.split(",")
                assert set(reasons) <= VALID_REASONS
                if "time_limit" in reasons:
                    assert self.deadline[p] <= self.now
                if "max_deliveries" in reasons:
                    assert self.delivered.get(p, 0) >= self.spec.max_deliveries > 0
                if "max_cancels" in reasons:
                    self.cancels[p] = self.cancels.get(p, 0) + 1
                    assert self.cancels[p] >= self.spec.max_cancels > 0
                self.status[p] = EXPIRED
                self.release(p)
            else:
                raise AssertionError(f"unexpected action {a!r}")

    # -- rules ---------------------------------------------------------------------------
    @rule(
        count=st.integers(1, 3),
        e=st.sampled_from([None, None, None, 0, 5.0, 25.0]),
        prio=st.sampled_from([None, 0, 1, 5, 5, 9]),
        barrier=st.integers(0, 9),
    )
    def enqueue(self, count, e, prio, barrier):
        for _ in range(count):
            self.n += 1
            p = self.n
            is_barrier = self.spec.has_barrier and barrier == 0
            if p in self.deferred:
                self.swallowed.add(p)
                self.status[p] = ACKED  # acknowledged before it arrived: never enters
                self.eng.enqueue(p, bm(p), self.now)
                continue
            self.status[p] = AVAIL
            ttl = e if e is not None else self.spec.expiration
            self.deadline[p] = math.inf if not ttl else self.now + ttl
            self.prio[p] = prio if self.spec.has_priority else None
            if is_barrier:
                self.barrier.add(p)
            out = self.eng.enqueue(
                p, bm(p), self.now, expiration=e,
                priority=prio if self.spec.has_priority else None, is_barrier=is_barrier,
            )
            self.apply(out)

    @rule(key=st.sampled_from(SUB_KEYS), max_backlog=st.sampled_from([None, 0, 1, 2, 3, 5]),
          filt=st.sampled_from(sorted(FILTERS)))
    def subscribe(self, key, max_backlog, filt):
        if key in self.subs:
            return
        self.subs[key] = (self.spec.subscription_limit(max_backlog), FILTERS[filt])
        self.apply(self.eng.add_subscriber(key, self.now, max_backlog=max_backlog,
                                           eligible=FILTERS[filt]))

    @rule(key=st.sampled_from(SUB_KEYS))
    def unsubscribe(self, key):
        if key not in self.subs:
            return
        out = self.eng.remove_subscriber(key, self.now)
        if self.spec.at_most_once:  # unacked sends are forgotten silently
            for p in [p for p, h in self.holder.items() if h == key]:
                self.release(p)
        del self.subs[key]
        self.apply(out)
        assert not any(h == key for h in self.holder.values()), "leases not broken at once"

    @rule(data=st.data(), who=st.sampled_from(["holder", "holder", "sub", "outsider"]),
          option=st.sampled_from([None, None, "cancel", "cancel", "expire"]))
    def ack(self, data, who, option):
        if self.n == 0:
            return
        leased = sorted(self.holder)
        if leased and data.draw(st.booleans()):
            p = data.draw(st.sampled_from(leased))
        else:
            p = data.draw(st.integers(1, self.n + 2))
        if who == "holder" and p in self.holder:
            acker = self.holder[p]
        elif who == "outsider":
            acker = "outsider"
        else:
            acker = data.draw(st.sampled_from(SUB_KEYS))
        out = self.eng.ack(acker, bm(p), self.now, option)
        mine = [a for a in out if getattr(a, "position", None) == p and type(a) is not Deliver]
        amo = self.spec.at_most_once
        state = self.status.get(p)
        holder = self.holder.get(p)
        blocked = self.spec.strict_leasing and holder is not None and holder != acker
        if p > self.n:
            if option != "cancel":
                self.deferred.add(p)
                assert out[:1] == [Acked(None, bm(p))]
        elif blocked or (state not in (AVAIL, LEASED) and holder is None):
            assert mine == [], f"ack of {p} ({state}, holder {holder}) by {acker}: {out}"
        elif amo or option is None:
            assert type(mine[0]) is Acked
        elif option == "cancel":
            if state == LEASED:
                assert type(mine[0]) in (Returned, Expired)
            else:
                assert mine == []
        else:
            assert mine[0] == Expired(p, bm(p), "forced_expire")
        self.apply(out)

    @rule(dt=st.sampled_from([0.0, 0.5, 3.0, 5.0, 10.0, 17.0]))
    def advance(self, dt):
        t = self.now + dt
        d = self.eng.next_deadline()
        if d is None or t < d:
            assert self.eng.poll(t) == [], "poll before the deadline did something"
        self.now = t
        if self.spec.at_most_once:  # the lease period frees the slot, silently
            for p in [p for p, u in self.lease_until.items() if u <= t]:
                self.release(p)
        self.apply(self.eng.poll(t))
        nd = self.eng.next_deadline()
        assert nd is None or nd > t, "something is overdue after poll"

    @precondition(lambda self: self.eng.next_deadline() is not None)
    @rule()
    def jump_to_deadline(self):
        t = self.eng.next_deadline()
        self.now = t
        if self.spec.at_most_once:
            for p in [p for p, u in self.lease_until.items() if u <= t]:
                self.release(p)
        self.apply(self.eng.poll(t))

    # -- invariants ----------------------------------------------------------------------
    @invariant()
    def engine_agrees_with_model(self):
        if not hasattr(self, "eng"):
            return
        view = {m.position: m for m in self.eng.messages(include_leased=True)}
        queued = {p for p, s in self.status.items() if s in (AVAIL, LEASED)}
        assert set(view) == queued
        for p, m in view.items():
            assert (m.state == "leased") == (self.status[p] == LEASED)
            assert m.sub_key == (self.holder.get(p) if self.status[p] == LEASED else None)
        assert self.eng.depth == len(queued)
        assert set(self.status) == set(range(1, self.n + 1))  # each accounted for, once
        for k, (limit, _) in self.subs.items():
            assert self.eng.subscriber_backlog(k) == (self.held(k), limit)
        assert self.eng.leased_count == self.outstanding()
        # low water: the last message the engine holds before the first one still queued
        first = min(queued, default=self.n + 1)
        held = [p for p in range(1, first) if p not in self.swallowed]
        assert self.eng.low_water_position == (held[-1] if held else 0)

    @invariant()
    def nothing_deliverable_is_left_behind(self):
        if not hasattr(self, "eng") or not self.subs:
            return
        mb = self.spec.max_backlog
        if mb is None or self.outstanding() < mb:
            for k, (limit, _) in self.subs.items():
                if self.held(k) < limit:
                    stuck = [p for p in self.status if self.deliverable(p) and self.eligible(k, p)]
                    assert not stuck, f"{k} has room but {stuck} wait"
        b = self.pending_barrier()
        if b is not None:
            before = [q for q in self.status if q < b]
            assert not all(self.status[q] in (ACKED, EXPIRED) and q not in self.holder
                           for q in before), "barrier not released"

    @invariant()
    def nothing_overdue(self):
        if not hasattr(self, "eng"):
            return
        for p, s in self.status.items():
            if s == AVAIL:
                assert self.deadline[p] > self.now
            if s == LEASED and p in self.lease_until:
                assert self.lease_until[p] > self.now


SETTINGS = settings(max_examples=50, stateful_step_count=40, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow])


class AtLeastOnce(QueueModel):
    SPEC = dict(lease_period=10.0, expiration=40.0, max_cancels=2, max_deliveries=3,
                max_per_subscription_backlog=3, max_backlog=3)


class AtLeastOnceStrictRoundRobin(QueueModel):
    SPEC = dict(lease_period=7.0, leasing="strict", fairness="round-robin",
                max_per_subscription_backlog=2)


class AtLeastOnceFastNoLease(QueueModel):
    SPEC = dict(fairness="fast", max_per_subscription_backlog=4, expiration=20.0, max_cancels=1)


class AtMostOnce(QueueModel):
    SPEC = dict(semantics="at-most-once", lease_period=10.0, expiration=30.0,
                max_per_subscription_backlog=3)


class PriorityQueue(QueueModel):
    SPEC = dict(priority="/p", lease_period=10.0, max_per_subscription_backlog=3, max_cancels=3)


class BarrierQueue(QueueModel):
    SPEC = dict(barrier_expression="/b", lease_period=10.0, expiration=50.0,
                max_per_subscription_backlog=3)


class BarrierAtMostOnce(QueueModel):
    SPEC = dict(semantics="at-most-once", barrier_expression="/b", max_per_subscription_backlog=2)


TestAtLeastOnce = AtLeastOnce.TestCase
TestAtLeastOnceStrictRoundRobin = AtLeastOnceStrictRoundRobin.TestCase
TestAtLeastOnceFastNoLease = AtLeastOnceFastNoLease.TestCase
TestAtMostOnce = AtMostOnce.TestCase
TestPriorityQueue = PriorityQueue.TestCase
TestBarrierQueue = BarrierQueue.TestCase
TestBarrierAtMostOnce = BarrierAtMostOnce.TestCase
for _case in (TestAtLeastOnce, TestAtLeastOnceStrictRoundRobin, TestAtLeastOnceFastNoLease,
              TestAtMostOnce, TestPriorityQueue, TestBarrierQueue, TestBarrierAtMostOnce):
    _case.settings = SETTINGS
del _case
