"""The queue engine (queues/), driven with explicit ``now`` values: no sleeps, no IO.

Sections follow the AMPS User Guide's Message Queues chapter: delivery semantics and the
"Message Flow for Queues" items, backlog, fairness (the Inky/Blinky/Clyde example), acks
and their options, Leasing, limits and dead-letter reasons, Priority, barriers,
TargetQueueDepth, the sow view, replace, and recovery by replaying journaled events.
"""

from __future__ import annotations

import types

import pytest

from amps_emulator.queues import (
    Ack,
    Acked,
    Cancel,
    Deliver,
    Enqueue,
    Expire,
    Expired,
    Lease,
    LeaseExpire,
    QueueCheckpoint,
    QueueConfigError,
    QueueEngine,
    QueueSpec,
    Returned,
    SubscriptionBacklog,
    decode_event,
    encode_event,
    event_for,
    events_for,
    plan_recovery,
)
from amps_emulator.queues.recovery import replay

ALO = "at-least-once"
AMO = "at-most-once"


def bm(i: int) -> str:
    return f"7|{i}|"


def make(**kw) -> QueueEngine:
    kw.setdefault("max_per_subscription_backlog", 10)
    return QueueEngine(QueueSpec("q", **kw))


class Log:
    """Enqueue helper: positions 1, 2, 3, ... with bookmarks 7|n|."""

    def __init__(self, eng: QueueEngine) -> None:
        self.eng = eng
        self.n = 0

    def pub(self, now: float = 0.0, count: int = 1, **kw) -> list:
        out = []
        for _ in range(count):
            self.n += 1
            out += self.eng.enqueue(self.n, bm(self.n), now, **kw)
        return out


def delivered(actions, sub=None) -> list[int]:
    return [a.position for a in actions if type(a) is Deliver and (sub is None or a.sub_key == sub)]


def of(actions, cls) -> list:
    return [a for a in actions if type(a) is cls]


def only_sets(*sets):
    """eligible callables: subscription i matches the positions in sets[i]."""
    return [(lambda p, s=frozenset(s): p in s) for s in sets]


# ------------------------------------------------------------------------------------------
# QueueSpec and validation
# ------------------------------------------------------------------------------------------
def test_spec_defaults_follow_the_amps_tables():
    s = QueueSpec("q")
    assert s.semantics == ALO and s.fairness_model == "proportional"
    assert s.max_per_subscription_backlog == 1 and s.leasing == "sublet"
    assert s.lease_period is None and s.expiration is None and s.recovery_point == "epoch"
    assert QueueSpec("q", semantics=AMO).fairness_model == "round-robin"


def test_subscription_limit_is_the_smaller_of_queue_cap_and_option_default_one():
    s = QueueSpec("q", max_per_subscription_backlog=5)
    assert s.subscription_limit(None) == 1
    assert s.subscription_limit(3) == 3
    assert s.subscription_limit(10) == 5
    assert QueueSpec("q", max_per_subscription_backlog=None).subscription_limit(50) == 50


@pytest.mark.parametrize(
    "kw, needle",
    [
        ({"target_queue_depth": 5000, "priority": "/p"}, "TargetQueueDepth cannot be set for a queue that specifies a Priority"),
        ({"target_queue_depth": 5000, "barrier_expression": "/b = 1"}, "TargetQueueDepth cannot be set for a queue that specifies a BarrierExpression"),
        ({"priority": "/p", "barrier_expression": "/b = 1"}, "Priority cannot be specified"),
        ({"target_queue_depth": 10}, "TargetQueueDepth must be an integer >= 1000"),
        ({"semantics": AMO, "fairness": "proportional"}, "not valid for an at-most-once queue"),
        ({"semantics": "exactly-once"}, "Semantics must be one of"),
        ({"fairness": "random"}, "FairnessModel must be one of"),
        ({"leasing": "loose"}, "Leasing must be one of"),
        ({"lease_period": 0}, "LeasePeriod must be a positive duration"),
        ({"max_cancels": -1}, "MaxCancels"),
    ],
)
def test_invalid_specs_raise_a_clear_error(kw, needle):
    with pytest.raises(QueueConfigError) as ei:
        QueueSpec("Jobs", **kw)
    assert needle in str(ei.value) and "'Jobs'" in str(ei.value)


def test_validation_reports_every_problem_at_once():
    with pytest.raises(QueueConfigError) as ei:
        QueueSpec("q", target_queue_depth=5000, priority="/p", barrier_expression="/b")
    assert len(ei.value.problems) == 3


def test_from_config_maps_the_config_struct_and_forces_round_robin_for_at_most_once():
    cfg = types.SimpleNamespace(
        name="Jobs", semantics=AMO, lease_period=30.0, max_backlog=None,
        max_per_subscription_backlog=4, expiration=60.0, fairness_model="proportional",
        leasing="strict", max_cancels=3, max_deliveries=10, target_queue_depth=None,
        priority=None, barrier_expression=None, recovery_point="epoch",
        deferred_ack_expiration=900.0,
    )
    s = QueueSpec.from_config(cfg)
    assert (s.name, s.semantics, s.fairness_model, s.leasing) == ("Jobs", AMO, "round-robin", "strict")
    assert (s.max_cancels, s.max_deliveries, s.expiration, s.lease_period) == (3, 10, 60.0, 30.0)


def test_from_config_accepts_the_real_config_model():
    model = pytest.importorskip("amps_emulator.config.model")
    q = model.Queue(kind="queue", name="WorkToDo", message_type="json", underlying_topic="Work")
    s = QueueSpec.from_config(q)
    assert s.name == "WorkToDo" and s.fairness_model == "proportional"


# ------------------------------------------------------------------------------------------
# Message flow, at-most-once
# ------------------------------------------------------------------------------------------
def test_amo_message_goes_to_one_matching_subscriber_and_leaves_the_queue_when_sent():
    eng = make(semantics=AMO)
    log = Log(eng)
    match_even, match_all = only_sets({2, 4})[0], None
    assert eng.add_subscriber("even", 0.0, max_backlog=5, eligible=match_even) == []
    eng.add_subscriber("all", 0.0, max_backlog=5, eligible=match_all)
    out = log.pub(count=1)
    assert delivered(out) == [1] and delivered(out, "all") == [1]  # "even" does not match 1
    out = log.pub()
    assert len(delivered(out)) == 1  # exactly one subscriber
    assert eng.depth == 0 and list(eng.messages(include_leased=True)) == []
    assert eng.low_water_position == 2  # removed as sent: recovery starts after it
    # the subscriber's going away does not bring an at-most-once message back
    out = eng.remove_subscriber("all", 1.0) + eng.remove_subscriber("even", 1.0)
    assert out == [] and eng.depth == 0


def test_amo_oldest_matching_message_first_and_ack_frees_the_backlog():
    eng = make(semantics=AMO)
    log = Log(eng)
    log.pub(count=3)
    out = eng.add_subscriber("s", 0.0)  # default max_backlog 1
    assert delivered(out) == [1]
    assert log.pub() == []  # backlog full until the ack (item 6)
    out = eng.ack("s", bm(1), 1.0)
    assert of(out, Acked)[0].position == 1 and delivered(out) == [2]


def test_amo_ack_options_have_no_effect_beyond_the_ack():
    eng = make(semantics=AMO, max_cancels=1)
    log = Log(eng)
    log.pub(count=3)
    eng.add_subscriber("s", 0.0)
    out = eng.ack("s", bm(1), 1.0, option="cancel")
    assert of(out, Returned) == [] and of(out, Expired) == [] and delivered(out) == [2]
    out = eng.ack("s", bm(2), 1.0, option="expire")
    assert of(out, Expired) == [] and delivered(out) == [3]


def test_amo_expiration_removes_unrequested_messages():
    eng = make(semantics=AMO, expiration=10.0)
    log = Log(eng)
    log.pub(now=0.0)
    assert eng.next_deadline() == 10.0
    assert eng.poll(9.9) == []
    out = eng.poll(10.0)
    assert out == [Expired(1, bm(1), "time_limit")] and eng.depth == 0


def test_amo_lease_period_frees_the_slot_of_a_silent_subscriber_without_redelivery():
    eng = make(semantics=AMO, lease_period=5.0)
    log = Log(eng)
    log.pub(count=2)
    out = eng.add_subscriber("s", 0.0)
    assert out[0].lease_expiry == 5.0
    out = eng.poll(5.0)
    assert delivered(out) == [2] and of(out, Returned) == []


def test_amo_round_robin_across_subscribers():
    eng = make(semantics=AMO)
    log = Log(eng)
    for k in "abc":
        eng.add_subscriber(k, 0.0, max_backlog=10)
    out = log.pub(count=6)
    assert [a.sub_key for a in out] == list("abcabc")


# ------------------------------------------------------------------------------------------
# Message flow, at-least-once
# ------------------------------------------------------------------------------------------
def test_alo_delivery_carries_the_lease_expiry_and_ack_removes():
    eng = make(lease_period=30.0)
    log = Log(eng)
    log.pub(count=2)
    out = eng.add_subscriber("s", 100.0, max_backlog=2)
    assert out == [Deliver("s", 1, bm(1), 130.0, 1), Deliver("s", 2, bm(2), 130.0, 1)]
    assert eng.depth == 2  # leased messages are still in the queue
    out = eng.ack("s", f"{bm(1)},{bm(2)}", 101.0)  # comma list
    assert [a.position for a in of(out, Acked)] == [1, 2] and eng.depth == 0
    assert eng.next_deadline() is None


def test_alo_oldest_matching_message_is_delivered_first():
    eng = make()
    log = Log(eng)
    log.pub(count=6)
    odd = lambda p: p % 2 == 1  # noqa: E731
    out = eng.add_subscriber("odd", 0.0, max_backlog=2, eligible=odd)
    assert delivered(out) == [1, 3]
    out = eng.add_subscriber("all", 0.0, max_backlog=10)
    assert delivered(out) == [2, 4, 5, 6]


def test_alo_unleased_message_expires_but_a_leased_one_waits_for_its_lease():
    eng = make(lease_period=20.0, expiration=10.0)
    log = Log(eng)
    log.pub(now=0.0, count=2)
    eng.add_subscriber("s", 0.0)  # leases message 1 until 20
    out = eng.poll(10.0)
    assert out == [Expired(2, bm(2), "time_limit")]  # item 5: no lease on 2
    assert eng.depth == 1
    # item 6: when the lease expires after the Expiration time, the message is removed
    assert eng.next_deadline() == 20.0
    out = eng.poll(20.0)
    assert out == [Expired(1, bm(1), "time_limit")] and eng.depth == 0


def test_alo_ack_of_a_leased_message_after_its_expiration_time_still_succeeds():
    eng = make(lease_period=20.0, expiration=10.0)
    log = Log(eng)
    log.pub(now=0.0)
    eng.add_subscriber("s", 0.0)
    assert eng.poll(15.0) == []
    assert of(eng.ack("s", bm(1), 15.0), Acked)


def test_alo_lease_expiry_returns_the_message_for_redelivery():
    eng = make(lease_period=5.0)
    log = Log(eng)
    log.pub()
    eng.add_subscriber("s", 0.0)
    out = eng.poll(5.0)
    assert out == [Returned(1, bm(1), "lease_expired", "s"), Deliver("s", 1, bm(1), 10.0, 2)]


def test_a_lease_renewed_by_redelivery_does_not_expire_at_the_old_lease_time():
    eng = make(lease_period=10.0)
    Log(eng).pub()
    eng.add_subscriber("s", 0.0)  # lease until 10
    out = eng.ack("s", bm(1), 4.0, option="cancel")  # redelivered: lease until 14
    assert of(out, Deliver)[0].lease_expiry == 14.0
    assert eng.poll(10.0) == []
    assert eng.next_deadline() == 14.0


def test_with_either_semantics_each_message_is_delivered_once_in_normal_processing():
    for semantics in (ALO, AMO):
        eng = make(semantics=semantics, lease_period=5.0)
        log = Log(eng)
        eng.add_subscriber("a", 0.0, max_backlog=3)
        eng.add_subscriber("b", 0.0, max_backlog=3)
        pending = [(a.sub_key, a.position) for a in of(log.pub(count=30), Deliver)]
        seen = []
        while pending:
            seen += pending
            nxt = []
            for sub, p in pending:
                nxt += [(a.sub_key, a.position) for a in of(eng.ack(sub, bm(p), 1.0), Deliver)]
            pending = nxt
        assert sorted(p for _, p in seen) == list(range(1, 31)), semantics
        assert eng.depth == 0


# ------------------------------------------------------------------------------------------
# Workers
# ------------------------------------------------------------------------------------------
def test_three_workers_drain_a_thousand_messages_exactly_once():
    eng = make(lease_period=60.0)
    log = Log(eng)
    held = {w: [] for w in ("w1", "w2", "w3")}
    for w in held:
        assert eng.add_subscriber(w, 0.0, max_backlog=4) == []
    counts = {}

    def absorb(actions):
        for a in actions:
            if type(a) is Deliver:
                held[a.sub_key].append(a.bookmark)
                counts[a.position] = counts.get(a.position, 0) + 1

    absorb(log.pub(count=1000))
    now = 0.0
    while any(held.values()):
        now += 0.01
        for w in held:
            batch, held[w] = held[w][:3], held[w][3:]
            if batch:
                absorb(eng.ack(w, ",".join(batch), now))
    assert sorted(counts) == list(range(1, 1001)) and set(counts.values()) == {1}
    assert eng.depth == 0 and eng.low_water_position == 1000


def test_a_worker_that_stops_acking_loses_its_messages_to_another_after_the_lease():
    eng = make(lease_period=10.0, fairness="fast")
    log = Log(eng)
    eng.add_subscriber("good", 0.0, max_backlog=2)
    eng.add_subscriber("stuck", 0.0, max_backlog=2)
    out = log.pub(count=4)
    assert delivered(out, "good") == [1, 2] and delivered(out, "stuck") == [3, 4]
    # the good worker acks; the stuck one never does
    assert delivered(eng.ack("good", f"{bm(1)},{bm(2)}", 1.0)) == []
    assert eng.poll(9.99) == []
    out = eng.poll(10.0)
    assert [a.position for a in of(out, Returned)] == [3, 4]
    assert delivered(out, "good") == [3, 4] and delivered(out, "stuck") == []
    assert all(a.delivery_count == 2 for a in of(out, Deliver))
    # sublet (default): the stuck worker's late ack is still honoured
    out = eng.ack("stuck", bm(3), 11.0)
    assert of(out, Acked)[0].position == 3 and eng.subscriber_backlog("good") == (1, 2)


def test_under_strict_leasing_the_late_ack_of_the_old_holder_is_ignored():
    eng = make(lease_period=10.0, fairness="fast", leasing="strict")
    log = Log(eng)
    eng.add_subscriber("good", 0.0, max_backlog=1)
    eng.add_subscriber("stuck", 0.0, max_backlog=1)
    assert delivered(log.pub(count=2), "stuck") == [2]
    eng.ack("good", bm(1), 1.0)
    assert delivered(eng.poll(10.0), "good") == [2]
    assert eng.ack("stuck", bm(2), 11.0) == []
    assert eng.subscriber_backlog("good") == (1, 1)


def test_a_removed_workers_leases_move_immediately():
    eng = make(lease_period=300.0)
    log = Log(eng)
    eng.add_subscriber("a", 0.0, max_backlog=3)
    log.pub(count=3)
    eng.add_subscriber("b", 0.0, max_backlog=3)
    out = eng.remove_subscriber("a", 1.0)
    assert [a.reason for a in of(out, Returned)] == ["unsubscribe"] * 3
    assert delivered(out, "b") == [1, 2, 3]
    assert all(a.lease_expiry == 301.0 for a in of(out, Deliver))


def test_disconnect_breaks_every_lease_of_the_client():
    eng = make(lease_period=300.0)
    log = Log(eng)
    eng.add_subscriber("c1-s1", 0.0, client="c1")
    eng.add_subscriber("c1-s2", 0.0, client="c1")
    log.pub(count=2)
    eng.add_subscriber("c2-s1", 0.0, client="c2", max_backlog=5)
    out = eng.disconnect("c1", 2.0)
    assert sorted(delivered(out, "c2-s1")) == [1, 2] and eng.subscribers() == ["c2-s1"]


# ------------------------------------------------------------------------------------------
# Backlog
# ------------------------------------------------------------------------------------------
def test_default_max_backlog_is_one_even_when_the_queue_allows_more():
    eng = make(max_per_subscription_backlog=10)
    Log(eng).pub(count=5)
    assert delivered(eng.add_subscriber("s", 0.0)) == [1]
    assert eng.subscriber_backlog("s") == (1, 1)


def test_queue_cap_limits_the_requested_backlog():
    eng = make(max_per_subscription_backlog=3)
    Log(eng).pub(count=5)
    assert delivered(eng.add_subscriber("s", 0.0, max_backlog=100)) == [1, 2, 3]


def test_max_backlog_limits_the_whole_queue():
    eng = make(max_backlog=3)
    log = Log(eng)
    log.pub(count=10)
    a = eng.add_subscriber("a", 0.0, max_backlog=2)
    b = eng.add_subscriber("b", 0.0, max_backlog=2)
    assert len(delivered(a + b)) == 3 and eng.leased_count == 3
    out = eng.ack("a", bm(1), 1.0)
    assert len(delivered(out)) == 1 and eng.leased_count == 3


def test_max_backlog_zero_subscriber_receives_nothing():
    eng = make()
    Log(eng).pub(count=2)
    assert eng.add_subscriber("s", 0.0, max_backlog=0) == []


def test_replace_recomputes_backlog_and_keeps_leases_even_when_over_the_new_limit():
    eng = make(lease_period=100.0)
    log = Log(eng)
    log.pub(count=12)
    assert len(delivered(eng.add_subscriber("s", 0.0, max_backlog=10))) == 10
    assert eng.replace_subscriber("s", 1.0, max_backlog=5) == []
    assert eng.subscriber_backlog("s") == (10, 5)
    # acks bring it down; nothing is delivered until it is under 5
    out = eng.ack("s", ",".join(bm(i) for i in range(1, 6)), 2.0)
    assert delivered(out) == []
    out = eng.ack("s", bm(6), 2.0)
    assert delivered(out) == [11]


def test_replace_with_a_new_filter_keeps_leases_but_only_delivers_matches():
    eng = make(lease_period=100.0)
    log = Log(eng)
    log.pub(count=6)
    eng.add_subscriber("s", 0.0, max_backlog=2)  # leases 1, 2
    out = eng.replace_subscriber("s", 1.0, max_backlog=3, eligible=lambda p: p >= 5)
    assert delivered(out) == [5]
    assert eng.subscriber_backlog("s") == (3, 3)
    assert eng.poll(50.0) == []  # the leases on 1 and 2 were not broken
    out = eng.ack("s", bm(1), 51.0)
    assert delivered(out) == [6]


def test_shared_backlog_across_two_queues():
    shared = SubscriptionBacklog(limit=2)
    q1, q2 = make(), make()
    Log(q1).pub(count=3)
    Log(q2).pub(count=2)
    assert delivered(q1.add_subscriber("s", 0.0, backlog=shared)) == [1, 2]
    assert q2.add_subscriber("s", 0.0, backlog=shared) == []  # backlog filled by q1
    assert delivered(q1.ack("s", bm(1), 1.0)) == [3] and shared.leased == 2
    assert delivered(q1.ack("s", f"{bm(2)},{bm(3)}", 1.0)) == [] and shared.leased == 0
    assert delivered(q2.dispatch(1.0)) == [1, 2]  # the server kicks the other queue


# ------------------------------------------------------------------------------------------
# Fairness: the User Guide's example with Inky, Blinky and Clyde
# ------------------------------------------------------------------------------------------
def _ghosts(fairness: str) -> QueueEngine:
    """Inky max_backlog=2 with 1 leased, Blinky 4 with 3, Clyde 10 with 4; the last
    message delivered during setup went to Inky."""
    eng = make(fairness=fairness)
    log = Log(eng)
    f_inky, f_blinky, f_clyde = only_sets({8}, {1, 2, 3}, {4, 5, 6, 7})
    eng.add_subscriber("Inky", 0.0, max_backlog=2, eligible=f_inky)
    eng.add_subscriber("Blinky", 0.0, max_backlog=4, eligible=f_blinky)
    eng.add_subscriber("Clyde", 0.0, max_backlog=10, eligible=f_clyde)
    out = log.pub(count=8)
    assert [a.sub_key for a in out][-1] == "Inky"
    for name, mb in (("Inky", 2), ("Blinky", 4), ("Clyde", 10)):
        assert eng.replace_subscriber(name, 0.0, max_backlog=mb) == []
    assert [eng.subscriber_backlog(n) for n in ("Inky", "Blinky", "Clyde")] == [(1, 2), (3, 4), (4, 10)]
    eng._log = log  # type: ignore[attr-defined]
    return eng


@pytest.mark.parametrize(
    "fairness, expected",
    [("proportional", "Clyde"), ("fast", "Inky"), ("round-robin", "Blinky")],
)
def test_fairness_seed_example(fairness, expected):
    eng = _ghosts(fairness)
    out = eng._log.pub()  # type: ignore[attr-defined]
    assert [a.sub_key for a in of(out, Deliver)] == [expected]


def test_proportional_tie_goes_to_the_first_subscription_found():
    eng = make(fairness="proportional")
    for k in "abc":
        eng.add_subscriber(k, 0.0, max_backlog=4)
    out = Log(eng).pub(count=6)
    # a: 0/4 tie -> a; then b and c have 0/4 -> b; c; then all 1/4 -> a ...
    assert [a.sub_key for a in out] == list("abcabc")


def test_proportional_prefers_the_most_unused_capacity():
    eng = make(fairness="proportional")
    eng.add_subscriber("small", 0.0, max_backlog=2)
    eng.add_subscriber("big", 0.0, max_backlog=8)
    out = Log(eng).pub(count=6)
    # 0/2 vs 0/8 tie -> small; then 1/2 beats nothing until big reaches 4/8, a tie again
    assert [a.sub_key for a in out] == ["small", "big", "big", "big", "big", "small"]


def test_fast_fills_the_first_subscription_first():
    eng = make(fairness="fast")
    for k in "abc":
        eng.add_subscriber(k, 0.0, max_backlog=2)
    out = Log(eng).pub(count=5)
    assert [a.sub_key for a in out] == list("aabbc")


def test_round_robin_rotates_and_skips_full_subscriptions():
    eng = make(fairness="round-robin")
    eng.add_subscriber("a", 0.0, max_backlog=1)
    eng.add_subscriber("b", 0.0, max_backlog=5)
    eng.add_subscriber("c", 0.0, max_backlog=5)
    out = Log(eng).pub(count=5)
    assert [a.sub_key for a in out] == ["a", "b", "c", "b", "c"]


# ------------------------------------------------------------------------------------------
# Acknowledgement options and Leasing
# ------------------------------------------------------------------------------------------
def test_cancel_returns_the_message_and_max_cancels_expires_it_on_the_nth_cancel():
    eng = make(max_cancels=3, lease_period=60.0)
    Log(eng).pub()
    eng.add_subscriber("s", 0.0)
    for n in (1, 2):
        out = eng.ack("s", bm(1), float(n), option="cancel")
        assert out[0] == Returned(1, bm(1), "cancel", "s") and delivered(out) == [1]
    out = eng.ack("s", bm(1), 3.0, option="cancel")
    assert out == [Expired(1, bm(1), "max_cancels")] and eng.depth == 0


def test_expire_option_removes_at_once_with_forced_expire():
    eng = make()
    Log(eng).pub(count=2)
    eng.add_subscriber("s", 0.0)
    out = eng.ack("s", bm(1), 1.0, option="expire")
    assert out[0] == Expired(1, bm(1), "forced_expire") and delivered(out) == [2]
    # an unleased message can be expired too
    eng2 = make()
    Log(eng2).pub()
    assert eng2.ack("x", bm(1), 1.0, option="expire") == [Expired(1, bm(1), "forced_expire")]


def test_unknown_option_is_refused():
    eng = make()
    with pytest.raises(ValueError):
        eng.ack("s", bm(1), 0.0, option="bogus")


def test_strict_leasing_ignores_acks_from_other_clients_but_allows_unleased():
    eng = make(leasing="strict")
    Log(eng).pub(count=2)
    eng.add_subscriber("s", 0.0)  # leases 1
    assert eng.ack("other", bm(1), 1.0) == []
    assert eng.ack("other", bm(1), 1.0, option="cancel") == []
    assert eng.ack("other", bm(1), 1.0, option="expire") == []
    assert of(eng.ack("other", bm(2), 1.0), Acked)  # unleased: allowed
    assert of(eng.ack("s", bm(1), 1.0), Acked)


def test_sublet_leasing_lets_anyone_ack_and_frees_the_holders_backlog():
    eng = make(leasing="sublet")
    Log(eng).pub(count=2)
    eng.add_subscriber("s", 0.0)
    out = eng.ack("other", bm(1), 1.0)
    assert of(out, Acked)[0].position == 1 and delivered(out, "s") == [2]


def test_ack_by_filter_enumerates_messages_and_acks_positions():
    eng = make()
    Log(eng).pub(count=5)
    eng.add_subscriber("s", 0.0)  # leases 1
    view = list(eng.messages(include_leased=True))
    assert [(m.position, m.state) for m in view] == [(1, "leased")] + [(p, "available") for p in range(2, 6)]
    matches = [m.position for m in view if m.position % 2 == 1]  # "the filter"
    out = eng.ack_positions("admin", matches, 1.0)
    assert [a.position for a in of(out, Acked)] == [1, 3, 5] and delivered(out) == [2]


def test_duplicate_and_unknown_bookmarks_are_ignored():
    eng = make()
    Log(eng).pub(count=2)
    eng.add_subscriber("s", 0.0)
    eng.ack("s", bm(1), 1.0)
    assert eng.ack("s", f"{bm(1)},garbage,,", 1.0) == []


def test_ack_for_a_message_not_yet_queued_is_deferred_and_it_never_enters():
    eng = make()
    log = Log(eng)
    log.pub()
    out = eng.ack("s", bm(3), 1.0)  # 7|3| is newer than anything seen
    assert out == [Acked(None, bm(3))]
    log.pub(now=2.0, count=2)  # positions 2 and 3
    assert [m.position for m in eng.messages()] == [1, 2]
    # deferred acks expire after DeferredAckExpiration
    eng2 = make(deferred_ack_expiration=60.0)
    eng2.ack("s", bm(1), 0.0)
    eng2.poll(61.0)
    Log(eng2).pub(now=61.0)
    assert [m.position for m in eng2.messages()] == [1]


# ------------------------------------------------------------------------------------------
# Limits and dead-letter reasons
# ------------------------------------------------------------------------------------------
def test_max_deliveries_expires_after_the_nth_unsuccessful_delivery():
    eng = make(lease_period=10.0, max_deliveries=3)
    Log(eng).pub()
    eng.add_subscriber("s", 0.0)
    t = 0.0
    for n in (2, 3):
        t += 10.0
        out = eng.poll(t)
        assert of(out, Deliver)[0].delivery_count == n
    out = eng.poll(t + 10.0)
    assert out == [Expired(1, bm(1), "max_deliveries")] and eng.depth == 0


def test_max_deliveries_applies_when_the_subscriber_unsubscribes():
    # Configuration reference example: delivered twice, MaxDeliveries 2, then unsubscribe.
    eng = make(lease_period=10.0, max_deliveries=2)
    Log(eng).pub()
    eng.add_subscriber("s", 0.0)
    eng.poll(10.0)  # second delivery
    assert eng.remove_subscriber("s", 11.0) == [Expired(1, bm(1), "max_deliveries")]


def test_several_reasons_are_comma_joined():
    eng = make(lease_period=100.0, max_cancels=2, max_deliveries=2, expiration=5.0)
    Log(eng).pub(now=0.0)
    eng.add_subscriber("s", 0.0)
    eng.ack("s", bm(1), 1.0, option="cancel")  # delivered again (count 2)
    out = eng.ack("s", bm(1), 6.0, option="cancel")
    assert out == [Expired(1, bm(1), "time_limit,max_cancels,max_deliveries")]


def test_per_message_expiration_overrides_the_queue_and_zero_means_never():
    eng = make(expiration=100.0)
    log = Log(eng)
    log.pub(now=0.0)  # 1: queue Expiration -> 100
    log.pub(now=0.0, expiration=5.0)  # 2: own e -> 5
    log.pub(now=0.0, expiration=0)  # 3: never
    log.pub(now=1.0, timestamp=-50.0)  # 4: logged at -50 -> 50 (out of order: heap)
    assert eng.next_deadline() == 5.0
    assert eng.poll(5.0) == [Expired(2, bm(2), "time_limit")]
    assert eng.next_deadline() == 50.0
    assert eng.poll(50.0) == [Expired(4, bm(4), "time_limit")]
    assert eng.poll(1e9) == [Expired(1, bm(1), "time_limit")]
    assert [m.position for m in eng.messages()] == [3] and eng.next_deadline() is None


def test_a_message_returned_after_the_expiration_scan_passed_it_still_expires():
    eng = make(lease_period=10.0, expiration=30.0)
    log = Log(eng)
    log.pub(now=0.0, count=2)
    eng.add_subscriber("s", 0.0)  # leases 1
    eng.next_deadline()  # the scan may move past the leased message
    out = eng.ack("s", bm(1), 1.0, option="cancel")  # 1 back in the queue; redelivered
    eng.remove_subscriber("s", 2.0)
    assert eng.next_deadline() == 30.0
    out = eng.poll(30.0)
    assert sorted(a.position for a in of(out, Expired)) == [1, 2]


def test_next_deadline_is_the_earliest_of_leases_and_expirations():
    eng = make(lease_period=7.0, expiration=20.0)
    log = Log(eng)
    assert eng.next_deadline() is None
    log.pub(now=0.0, count=2)
    assert eng.next_deadline() == 20.0
    eng.add_subscriber("s", 1.0)
    assert eng.next_deadline() == 8.0
    eng.ack("s", bm(1), 2.0)  # 2 is leased now, until 9
    assert eng.next_deadline() == 9.0
    assert eng.poll(8.5) == []


# ------------------------------------------------------------------------------------------
# Priority
# ------------------------------------------------------------------------------------------
def test_priority_descending_oldest_first_at_equal_priority_null_lowest():
    eng = make(priority="/p")
    log = Log(eng)
    for p in (5, None, 9, 5, float("nan"), "abc", 9.7, 0, -3, 2**70):
        log.pub(priority=p)
    eng.add_subscriber("s", 0.0, max_backlog=10)
    out = list(eng.messages(include_leased=True))
    order = [m.position for m in out]
    # 2**70 clamps to max; 9.7 -> 9 ties with 9 (older first); -3 -> 0 ties with 0
    assert order == [10, 3, 7, 1, 4, 8, 9, 2, 5, 6]
    assert [m.priority for m in out][:3] == [2**64 - 2, 9, 9]


def test_priority_delivery_order_and_late_high_priority_message_jumps_ahead():
    eng = make(priority="/p")
    log = Log(eng)
    for p in (1, 3, 2):
        log.pub(priority=p)
    out = eng.add_subscriber("s", 0.0, max_backlog=1)
    assert delivered(out) == [2]
    log.pub(priority=100)  # position 4
    out = eng.ack("s", bm(2), 1.0)
    assert delivered(out) == [4]
    out = eng.ack("s", bm(4), 1.0)
    assert delivered(out) == [3]


def test_priority_with_filters_gives_each_subscriber_its_highest_matching_message():
    eng = make(priority="/p")
    log = Log(eng)
    for p in (1, 9, 5, 7):
        log.pub(priority=p)
    out = eng.add_subscriber("odd", 0.0, max_backlog=10, eligible=lambda p: p % 2 == 1)
    assert delivered(out) == [3, 1]  # priority 5 then 1
    out = eng.add_subscriber("even", 0.0, max_backlog=1, eligible=lambda p: p % 2 == 0)
    assert delivered(out) == [2]
    out = eng.ack("odd", bm(3), 1.0, option="cancel")  # 3 back: still highest for odd
    assert delivered(out) == [3]


# ------------------------------------------------------------------------------------------
# Barriers
# ------------------------------------------------------------------------------------------
def test_barrier_waits_for_every_earlier_ack_and_holds_later_messages():
    eng = make(barrier_expression="/sync IS NOT NULL", lease_period=100.0)
    log = Log(eng)
    log.pub(count=2)
    log.pub(is_barrier=True)  # 3
    log.pub(count=2)  # 4, 5
    eng.add_subscriber("a", 0.0, max_backlog=5)
    assert eng.add_subscriber("b", 0.0, max_backlog=5) == []
    # a got 1 and 2; nothing after the barrier
    assert eng.subscriber_backlog("a") == (2, 5) and eng.subscriber_backlog("b") == (0, 5)
    out = eng.ack("a", bm(1), 1.0)
    assert delivered(out) == []
    out = eng.ack("a", bm(2), 1.0)
    barrier = [a for a in of(out, Deliver) if a.barrier]
    assert [(a.sub_key, a.position, a.lease_expiry) for a in barrier] == [("a", 3, None), ("b", 3, None)]
    assert Acked(3, bm(3), True) in out
    assert sorted(delivered([a for a in out if not (type(a) is Deliver and a.barrier)])) == [4, 5]
    assert out.index(Acked(3, bm(3), True)) < out.index(of(out, Deliver)[-1])


def test_barrier_ignores_backlog_but_honours_filters():
    eng = make(barrier_expression="/b")
    log = Log(eng)
    log.pub(is_barrier=True)
    log.pub()
    out = eng.add_subscriber("zero", 0.0, max_backlog=0)
    assert [(a.position, a.barrier) for a in of(out, Deliver)] == [(1, True)]
    eng2 = make(barrier_expression="/b")
    log2 = Log(eng2)
    log2.pub()
    log2.pub(is_barrier=True)
    log2.pub()
    eng2.add_subscriber("worker", 0.0, max_backlog=1)  # leases 1
    # backlog filled by another queue's messages (regex topic subscription)
    eng2.add_subscriber("busy", 0.0, backlog=SubscriptionBacklog(1, leased=1))
    eng2.add_subscriber("nomatch", 0.0, max_backlog=5, eligible=lambda p: p != 2)
    out = eng2.ack("worker", bm(1), 1.0)
    barrier = [a.sub_key for a in of(out, Deliver) if a.barrier]
    assert barrier == ["worker", "busy"]
    assert delivered([a for a in out if not (type(a) is Deliver and a.barrier)]) == [3]
    assert eng2.subscriber_backlog("busy") == (1, 1)  # the barrier did not count


class Undecided:
    """An ``eligible`` that cannot tell (None: its record is being read) until ``known``."""

    def __init__(self, takes=lambda p: True) -> None:
        self.takes = takes
        self.known = False
        self.asked: list[int] = []

    def __call__(self, p: int) -> bool | None:
        self.asked.append(p)
        return self.takes(p) if self.known else None


def test_a_barrier_released_while_a_filter_cannot_tell_is_owed_to_it_once():
    """The barrier is released while one subscription's filter cannot tell (it waits for a
    record): the others get it at once; that one gets it, once and before anything after
    it, at the dispatch after its filter can tell."""
    eng = make(barrier_expression="/b")
    log = Log(eng)
    log.pub()  # 1
    log.pub(is_barrier=True)  # 2
    log.pub(count=3)  # 3, 4, 5
    eng.add_subscriber("other", 0.0, max_backlog=1)  # leases 1
    held = Undecided()
    eng.add_subscriber("held", 0.0, max_backlog=5, eligible=held)
    out = eng.ack("other", bm(1), 1.0)
    assert [(a.sub_key, a.position) for a in of(out, Deliver) if a.barrier] == [("other", 2)]
    assert Acked(2, bm(2), True) in out
    assert delivered(out, "other") == [2, 3] and delivered(out, "held") == []
    assert eng.dispatch(1.0) == []  # (still cannot tell: nothing, the barrier still owed)
    held.known = True
    out = eng.dispatch(1.0)
    assert [(a.position, a.barrier) for a in of(out, Deliver) if a.sub_key == "held"] == [
        (2, True), (4, False), (5, False)]  # the barrier first, then what is left
    assert Deliver("held", 2, bm(2), None, 1, True) in out
    out = eng.dispatch(1.0) + eng.ack("held", bm(4), 1.0) + eng.ack("other", bm(3), 1.0)
    assert [a for a in of(out, Deliver) if a.barrier] == []  # once


def test_an_owed_barrier_goes_by_the_filter_and_keeps_the_barriers_order():
    """Two barriers released while a filter cannot tell: once it can, each is delivered
    or not as the filter says, in order; an unsubscribe drops what it was owed."""
    eng = make(barrier_expression="/b")
    log = Log(eng)
    log.pub(is_barrier=True)  # 1
    log.pub(is_barrier=True)  # 2
    log.pub(is_barrier=True)  # 3
    held = Undecided(lambda p: p != 2)
    out = eng.add_subscriber("held", 0.0, eligible=held)
    assert of(out, Deliver) == [] and eng.depth == 0  # released all the same
    assert held.asked == [1]  # (behind the first, the others wait without asking)
    held.known = True
    out = eng.dispatch(0.0)
    assert [(a.position, a.barrier) for a in of(out, Deliver)] == [(1, True), (3, True)]
    eng.add_subscriber("gone", 0.0, eligible=Undecided())
    out = log.pub(is_barrier=True)  # 4: owed to "gone"
    assert [a.sub_key for a in of(out, Deliver)] == ["held"]
    eng.remove_subscriber("gone", 0.0)
    assert eng.add_subscriber("gone", 0.0) == []  # (a new subscription: owed nothing)
    assert delivered(log.pub(), "held") == [5]


def test_barrier_with_no_subscribers_waits_for_the_first_one():
    eng = make(barrier_expression="/b")
    log = Log(eng)
    log.pub(is_barrier=True)
    assert eng.depth == 1
    out = eng.add_subscriber("s", 0.0)
    assert out == [Deliver("s", 1, bm(1), None, 1, True), Acked(1, bm(1), True)]


def test_an_expired_barrier_releases_the_messages_behind_it():
    eng = make(barrier_expression="/b", lease_period=100.0)
    log = Log(eng)
    log.pub(now=0.0)
    log.pub(now=0.0, is_barrier=True, expiration=5.0)
    log.pub(now=0.0)
    eng.add_subscriber("s", 0.0, max_backlog=5)  # 1 only
    out = eng.poll(5.0)
    assert out[0] == Expired(2, bm(2), "time_limit") and delivered(out) == [3]


def test_at_most_once_barrier_waits_for_the_acks_of_sent_messages():
    eng = make(semantics=AMO, barrier_expression="/b")
    log = Log(eng)
    log.pub()
    log.pub(is_barrier=True)
    eng.add_subscriber("s", 0.0)
    assert eng.depth == 1  # 1 was sent (removed), the barrier waits for its ack
    out = eng.ack("s", bm(1), 1.0)
    assert Deliver("s", 2, bm(2), None, 1, True) in out


# ------------------------------------------------------------------------------------------
# TargetQueueDepth
# ------------------------------------------------------------------------------------------
def test_target_queue_depth_limits_the_active_part_of_the_queue():
    eng = make(target_queue_depth=1000)
    log = Log(eng)
    log.pub(count=1005)
    assert eng.depth == 1005 and eng.inactive_count == 5
    view = [m.position for m in eng.messages()]
    assert view == list(range(1, 1001))  # inactive messages do not appear in a sow query
    # an ack for an inactive message: it never becomes active
    eng.ack("x", bm(1002), 1.0)
    assert eng.inactive_count == 4
    # filter acks only see active messages
    assert 1003 not in [m.position for m in eng.messages(include_leased=True)]
    out = eng.ack("x", f"{bm(1)},{bm(2)}", 1.0)
    assert [m.position for m in eng.messages()][-2:] == [1001, 1003]
    out = eng.add_subscriber("s", 2.0, max_backlog=1, eligible=lambda p: p > 1000)
    assert delivered(out) == [1001]  # matching messages exist only in the active part


def test_target_queue_depth_no_match_in_the_active_part_means_no_delivery():
    eng = make(target_queue_depth=1000)
    log = Log(eng)
    log.pub(count=1001)
    assert eng.add_subscriber("s", 0.0, eligible=lambda p: p == 1001) == []
    out = eng.ack("x", bm(5), 1.0)
    assert delivered(out) == [1001]


# ------------------------------------------------------------------------------------------
# sow view
# ------------------------------------------------------------------------------------------
def test_sow_view_is_read_only_and_shows_available_messages_in_delivery_order():
    eng = make(lease_period=10.0, expiration=50.0)
    log = Log(eng)
    log.pub(now=0.0, count=3)
    eng.add_subscriber("s", 0.0)
    snap1 = list(eng.messages())
    snap2 = list(eng.messages())
    assert snap1 == snap2 and [m.position for m in snap1] == [2, 3]
    assert snap1[0].expiration == 50.0 and snap1[0].state == "available"
    assert [m.position for m in eng.messages(now=50.0)] == []  # expired, not yet polled
    assert eng.poll(9.0) == []  # querying leased nothing


# ------------------------------------------------------------------------------------------
# Bookmark lookup and compaction
# ------------------------------------------------------------------------------------------
def test_out_of_order_sequences_fall_back_to_an_index():
    eng = make()
    # per-publisher sequences: not increasing across the log
    for pos, b in enumerate(["1|5|", "2|1|", "1|6|", "2|2|"], start=1):
        eng.enqueue(pos, b, 0.0)
    eng.add_subscriber("s", 0.0, max_backlog=4)
    out = eng.ack("s", "2|1|,1|6|", 1.0)
    assert [a.position for a in of(out, Acked)] == [2, 3]
    assert [m.position for m in eng.messages(include_leased=True)] == [1, 4]


def test_positions_must_increase():
    eng = make()
    eng.enqueue(5, bm(5), 0.0)
    with pytest.raises(ValueError):
        eng.enqueue(5, bm(6), 0.0)
    with pytest.raises(ValueError):
        eng.enqueue(6, "not-a-bookmark", 0.0)


def test_low_water_position_tracks_the_fully_acked_prefix():
    eng = make()
    log = Log(eng)
    log.pub(count=5)
    eng.ack("x", f"{bm(2)},{bm(3)}", 0.0)
    assert eng.low_water_position == 0
    eng.ack("x", bm(1), 0.0)
    assert eng.low_water_position == 3
    cp = eng.checkpoint()
    assert cp == QueueCheckpoint("q", "epoch", 3)


def test_compaction_keeps_lookups_working():
    eng = make(lease_period=5.0)
    log = Log(eng)
    log.pub(count=5000)
    eng.ack("x", ",".join(bm(i) for i in range(1, 4001)), 0.0)
    assert len(eng._st) <= 1000 and eng.low_water_position == 4000
    eng.add_subscriber("s", 0.0, max_backlog=2)
    out = eng.ack("s", bm(4001), 1.0)
    assert delivered(out) == [4003]
    out = eng.poll(5.0)
    assert of(out, Returned)[0].position == 4002


def test_a_message_leased_forever_does_not_pin_the_acked_messages_behind_it():
    for extra in ({}, {"priority": "/p"}, {"semantics": AMO}):
        eng = make(**extra)
        log = Log(eng)
        log.pub()
        eng.add_subscriber("stuck", 0.0)  # holds 1, never acks, no LeasePeriod
        eng.add_subscriber("w", 0.0, max_backlog=5, eligible=lambda p: p % 7 != 0)
        for i in range(300):
            for a in of(log.pub(), Deliver):
                if a.sub_key == "w":
                    eng.ack("w", a.bookmark, 1.0)
        eng._sparse_min = 50  # what 65536 does for big queues, at test scale
        for i in range(300):
            for a in of(log.pub(), Deliver):
                if a.sub_key == "w":
                    eng.ack("w", a.bookmark, 1.0)
        live = eng.depth + eng.leased_count
        assert len(eng._st) <= 3 * live + 60, (extra, len(eng._st), live)
        # everything still works after renumbering
        waiting = [m.position for m in eng.messages()]
        assert waiting == [p for p in range(2, 602) if p % 7 == 0 and p <= 601][: len(waiting)]
        out = eng.ack("stuck", bm(1), 2.0)
        assert of(out, Acked)[0].position == 1
        assert delivered(out, "stuck") == waiting[:1]
        amo = extra.get("semantics") == AMO  # a sent message has left the queue
        assert eng.low_water_position == (waiting[1] - 1 if amo else waiting[0] - 1)
        eng.remove_subscriber("stuck", 3.0)
        assert [m.position for m in eng.messages()] == (waiting[1:] if amo else waiting)


def test_squeezing_acked_holes_keeps_a_pending_barrier_in_place():
    eng = make(barrier_expression="/b", lease_period=100.0)
    eng._compact_min, eng._sparse_min, eng._sparse_ratio = 10**9, 1, 0  # squeeze every time
    log = Log(eng)
    log.pub(count=4)
    log.pub(is_barrier=True)  # 5
    log.pub()  # 6
    eng.add_subscriber("stuck", 0.0, eligible=lambda p: p == 1)
    eng.add_subscriber("w", 0.0, max_backlog=3)
    eng.ack("w", f"{bm(2)},{bm(3)},{bm(4)}", 1.0)
    assert len(eng._st) == 4  # 1, a tombstone for 2-4, the barrier, 6
    out = eng.ack("stuck", bm(1), 2.0)
    assert [(a.sub_key, a.position) for a in of(out, Deliver) if a.barrier] == [("w", 5)]
    assert delivered([a for a in out if not (type(a) is Deliver and a.barrier)]) == [6]
    assert eng.low_water_position == 5


# ------------------------------------------------------------------------------------------
# Events and recovery
# ------------------------------------------------------------------------------------------
def test_event_kinds_match_the_journal_record_kinds():
    record = pytest.importorskip("amps_emulator.journal.record")
    K = record.RecordKind
    assert encode_event(Ack(1))[0] == K.QUEUE_ACK
    assert encode_event(Cancel(1))[0] == K.QUEUE_CANCEL
    assert encode_event(Expire(1, "time_limit"))[0] == K.QUEUE_EXPIRE
    assert encode_event(Lease(1))[0] == K.QUEUE_LEASE
    assert encode_event(LeaseExpire(1))[0] == K.QUEUE_LEASE_EXPIRE


@pytest.mark.parametrize(
    "ev", [Ack(12), Ack(None, "7|99|"), Cancel(3), Expire(4, "max_cancels"), Lease(5), LeaseExpire(6)]
)
def test_events_round_trip_and_are_small(ev):
    kind, payload = encode_event(ev)
    assert decode_event(kind, payload) == ev and len(payload) <= 24


def test_event_for_maps_actions_to_required_and_full_events():
    alo, amo = QueueSpec("q"), QueueSpec("q", semantics=AMO)
    d = Deliver("s", 5, bm(5), 1.0, 1)
    assert event_for(d, alo) is None and event_for(d, alo, full=True) == Lease(5)
    assert event_for(d, amo) == Lease(5)  # an at-most-once send is the removal
    assert event_for(Deliver("s", 5, bm(5), None, 1, True), amo) is None
    assert event_for(Acked(5, bm(5)), alo) == Ack(5)
    assert event_for(Acked(None, bm(9)), alo) == Ack(None, bm(9))
    assert event_for(Expired(5, bm(5), "max_deliveries"), alo) == Expire(5, "max_deliveries")
    assert event_for(Returned(5, bm(5), "cancel", "s"), alo) is None
    assert event_for(Returned(5, bm(5), "cancel", "s"), alo, full=True) == Cancel(5)
    assert event_for(Returned(5, bm(5), "unsubscribe", "s"), alo, full=True) == LeaseExpire(5)


class Journal:
    """A test double for the server: records enqueues and journaled queue events."""

    def __init__(self, spec, full=False):
        self.spec, self.full, self.records = spec, full, []

    def enqueue(self, eng, pos, now, **kw):
        self.records.append(Enqueue(pos, bm(pos), now, kw.get("expiration"), kw.get("priority"),
                                    kw.get("is_barrier", False)))
        return self.run(eng.enqueue(pos, bm(pos), now, **kw))

    def run(self, actions):
        for ev in events_for(actions, self.spec, full=self.full):
            kind, payload = encode_event(ev)  # through the wire format
            self.records.append(decode_event(kind, payload))
        return actions


def test_recovery_acked_never_redelivered_unacked_redelivered():
    spec = QueueSpec("q", lease_period=30.0, max_per_subscription_backlog=10)
    eng, j = QueueEngine(spec), Journal(spec)
    for p in range(1, 11):
        j.enqueue(eng, p, 0.0)
    j.run(eng.add_subscriber("s", 0.0, max_backlog=5))  # leases 1..5
    j.run(eng.ack("s", f"{bm(1)},{bm(2)},{bm(4)}", 1.0))  # acks; 6, 7, 8 leased next
    j.run(eng.ack("s", bm(6), 1.0, option="expire"))
    # crash: leases (3, 5, 7, 8, 9) are lost with the connection
    rec = replay(QueueEngine(spec), j.records, now=2.0)
    assert rec.poll(2.0) == []
    assert [m.position for m in rec.messages()] == [3, 5, 7, 8, 9, 10]
    out = rec.add_subscriber("s2", 2.0, max_backlog=10)
    assert delivered(out) == [3, 5, 7, 8, 9, 10]
    assert all(a.delivery_count == 1 for a in of(out, Deliver))  # AMPS resets the counters
    assert rec.low_water_position == 2


def test_recovery_starts_after_the_low_water_mark():
    spec = QueueSpec("q", max_per_subscription_backlog=10)
    eng, j = QueueEngine(spec), Journal(spec)
    for p in range(1, 7):
        j.enqueue(eng, p, 0.0)
    j.run(eng.ack("x", f"{bm(1)},{bm(2)},{bm(3)},{bm(5)}", 1.0))
    cp = eng.checkpoint()
    assert cp.low_water == 3
    start = plan_recovery(spec, cp)
    assert start.after_position == 3
    rec = replay(QueueEngine(spec), j.records, now=2.0, start_after=start.after_position)
    assert [m.position for m in rec.messages()] == [4, 6]
    assert rec.low_water_position == 3


def test_recovery_keep_counters_and_at_most_once_sends():
    spec = QueueSpec("q", lease_period=5.0, max_deliveries=3, max_cancels=5)
    eng, j = QueueEngine(spec), Journal(spec, full=True)
    j.enqueue(eng, 1, 0.0)
    j.run(eng.add_subscriber("s", 0.0))
    j.run(eng.ack("s", bm(1), 1.0, option="cancel"))  # redelivered (2)
    rec = replay(QueueEngine(spec), j.records, now=2.0, keep_counters=True)
    view = list(rec.messages())
    assert (view[0].delivery_count, view[0].cancel_count) == (2, 1)
    out = rec.add_subscriber("t", 2.0)
    assert of(out, Deliver)[0].delivery_count == 3
    assert rec.poll(7.0) == [Expired(1, bm(1), "max_deliveries")]
    # at-most-once: a journaled send is a removal
    spec2 = QueueSpec("q", semantics=AMO)
    eng2, j2 = QueueEngine(spec2), Journal(spec2)
    for p in (1, 2):
        j2.enqueue(eng2, p, 0.0)
    j2.run(eng2.add_subscriber("s", 0.0))
    rec2 = replay(QueueEngine(spec2), j2.records, now=1.0)
    assert [m.position for m in rec2.messages()] == [2] and rec2.low_water_position == 1


def test_recovery_expires_what_expired_while_down_and_rebuilds_priority_and_deferred_acks():
    spec = QueueSpec("q", expiration=10.0, priority="/p", max_per_subscription_backlog=10)
    eng, j = QueueEngine(spec), Journal(spec)
    j.enqueue(eng, 1, 0.0, priority=1)
    j.enqueue(eng, 2, 8.0, priority=5)
    j.enqueue(eng, 3, 8.0, priority=9)
    j.run(eng.ack("x", bm(4), 8.0))  # deferred
    j.enqueue(eng, 4, 8.5, priority=10)  # never enters
    rec = replay(QueueEngine(spec), j.records, now=12.0)
    assert rec.poll(12.0) == [Expired(1, bm(1), "time_limit")]
    assert [m.position for m in rec.messages()] == [3, 2]


def test_plan_recovery_rules():
    spec = QueueSpec("q", recovery_point="epoch")
    assert plan_recovery(spec, None).recovery_point == "epoch"
    assert plan_recovery(spec, QueueCheckpoint("q", "now", 50)).recovery_point == "epoch"
    assert plan_recovery(spec, QueueCheckpoint("q", "epoch", 50)).after_position == 50
    old = plan_recovery(spec, QueueCheckpoint("q", "epoch", 50), journal_first_position=100)
    assert old.after_position == 0 and old.recovery_point is None
