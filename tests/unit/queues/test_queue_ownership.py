"""Replicated queues, sans-IO: who owns a message (queues.ownership), the engine's removals by
bookmark, and the queue events that carry bookmarks and transfers (docs/design/replication.md section 4)."""

from __future__ import annotations

from amps_emulator.queues import (
    Ack,
    Acked,
    Deliver,
    Enqueue,
    Expire,
    Expired,
    Lease,
    QueueEngine,
    QueueSpec,
    Transfer,
    decode_event,
    encode_event,
    events_for,
)
from amps_emulator.queues.ownership import RETRY, Ownership
from amps_emulator.queues.recovery import replay


def up(_name: str) -> bool:
    return True


def down(_name: str) -> bool:
    return False


def test_the_owner_is_the_origin_or_the_initial_owner():
    dist = Ownership("B")
    assert dist.entered(1, None, 0.0) == "B" and dist.owns(1)
    assert dist.entered(2, "A", 0.0) == "A" and not dist.owns(2) and dist.owner(2) == "A"
    group = Ownership("B", initial_owner="C")
    assert group.entered(1, None, 0.0) == "C" and group.entered(2, "A", 0.0) == "C"
    assert group.owned_elsewhere == 2


def test_requests_wait_for_the_usual_ack_time_then_repeat_no_faster_than_retry():
    own = Ownership("B")
    own.wait = 0.5
    for p in (1, 2, 3):
        own.entered(p, "A", 10.0)
    assert own.to_request([1, 2, 3], room=5, now=10.2, reachable=up) == ({}, [])
    ask, claim = own.to_request([1, 2, 3], room=2, now=10.6, reachable=up)
    assert ask == {"A": [1, 2]} and claim == []  # no more than there is room for
    # the two requests in flight fill a room of two: nothing more is asked for
    assert own.to_request([1, 2, 3], room=2, now=10.6 + RETRY / 2, reachable=up) == ({}, [])
    ask, _ = own.to_request([1, 2, 3], room=5, now=10.6 + RETRY / 2, reachable=up)
    assert ask == {"A": [3]}  # 1 and 2 were just asked for
    ask, _ = own.to_request([1, 2, 3], room=5, now=10.6 + RETRY, reachable=up)
    assert ask == {"A": [1, 2]}


def test_the_wait_learns_how_long_the_owner_takes_to_ack():
    own = Ownership("B")
    own.entered(1, "A", 0.0 + 1)
    own.left(1, 1.0 + 1)
    assert 0.02 < own.wait < 1.0
    own.entered(2, None, 5.0)  # a message B owns: its ack says nothing of A
    before = own.wait
    own.left(2, 9.0)
    assert own.wait == before


def test_transfers_count_and_the_first_grant_wins():
    a = Ownership("A")
    a.entered(7, None, 0.0)
    assert a.may_grant(7, up)
    assert a.moved(7, "B") is False and a.transferred_out == 1
    assert not a.may_grant(7, up)  # B owns it now: a second request finds nothing to grant
    b = Ownership("B")
    b.entered(7, "A", 0.0)
    assert b.moved(7, "B") is True and b.transferred_in == 1 and b.owns(7)


def test_proxied_transfer_claims_and_grants_only_what_an_unreachable_owner_holds():
    own = Ownership("B")
    own.entered(1, "A", 0.0)
    own.entered(2, "C", 0.0)
    assert own.to_request([1, 2], room=5, now=9.0, reachable=lambda n: n == "C") == ({"C": [2]}, [])
    own.proxied = True
    ask, claim = own.to_request([1, 2], room=5, now=9.0 + RETRY, reachable=lambda n: n == "C")
    assert claim == [1] and ask == {"C": [2]}
    assert own.may_grant(1, lambda n: n == "C") and not own.may_grant(2, lambda n: n == "C")


def test_restore_keeps_the_dict_subscriptions_read():
    own = Ownership("B")
    foreign = own.foreign
    own.restore({1: "A", 2: "B", 3: "C"})
    assert own.foreign is foreign and foreign == {1: "A", 3: "C"}


def test_engine_remove_by_bookmark_frees_a_lease_and_defers_unknown_newer_ones():
    eng = QueueEngine(QueueSpec("q"))
    for p in (1, 2, 3):
        eng.enqueue(p, f"9|{p}|", 0.0)
    out = eng.add_subscriber("s", 0.0)
    assert [a.position for a in out if isinstance(a, Deliver)] == [1]
    removed, out = eng.remove(["9|1|", "9|3|", "9|50|", "junk"], 1.0)
    assert removed == [1, 3]
    assert [a.position for a in out if isinstance(a, Deliver)] == [2]  # the freed backlog
    assert eng.depth == 1 and eng.position_of("9|2|") == 2 and eng.position_of("9|1|") is None
    assert eng.bookmark_at(2) == "9|2|" and eng.holds(2) and not eng.is_available(2)
    assert eng.enqueue(50, "9|50|", 2.0) == [] and eng.depth == 1  # acked elsewhere before it came


def test_removals_carry_bookmarks_for_a_replicated_queue_and_transfers_round_trip():
    spec = QueueSpec("q", semantics="at-most-once")
    acts = [Acked(4, "1|4|"), Expired(5, "1|5|", "time_limit"), Deliver("s", 6, "1|6|", None, 1)]
    assert events_for(acts, spec) == [Ack(4), Expire(5, "time_limit"), Lease(6)]
    assert events_for(acts, spec, bookmarks=True) == [Ack(4, "1|4|"), Expire(5, "time_limit", "1|5|"),
                                                       Lease(6, "1|6|")]
    t = Transfer(6, "1|6|", "B")
    assert decode_event(*encode_event(t)) == t
    # an old record without the bookmark still decodes
    assert decode_event(*encode_event(Expire(5, "time_limit"))) == Expire(5, "time_limit", "")


def test_replay_skips_transfers():
    eng = replay(QueueEngine(QueueSpec("q")), [Enqueue(1, "1|1|", 0.0), Transfer(1, "1|1|", "B"),
                                                Enqueue(2, "1|2|", 0.0), Ack(2, "1|2|")], now=0.0)
    assert eng.depth == 1 and eng.holds(1)
