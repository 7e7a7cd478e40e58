"""The heartbeat state machine, driven by a fake clock: heartbeats on an idle connection, and
AMPS's rule for a silent client (two intervals without traffic, and a whole interval to answer
the server's last heartbeat)."""

import heapq
import random

from amps_emulator.server.heartbeat import Beat, Heartbeat


def test_inactive_until_started():
    hb = Heartbeat()
    assert hb.poll(1e9) is Beat.NOTHING and hb.next_deadline() is None


def test_sends_after_an_idle_interval_and_times_out_after_two():
    hb = Heartbeat()
    hb.start(1.0, now=100.0)
    assert hb.next_deadline() == 101.0
    assert hb.poll(100.5) is Beat.NOTHING
    assert hb.poll(101.0) is Beat.SEND
    hb.beat_sent(101.0)
    assert hb.next_deadline() == 102.0
    assert hb.poll(101.9) is Beat.NOTHING
    assert hb.poll(102.0) is Beat.TIMEOUT  # nothing received since 100.0, heartbeat unanswered
    assert hb.silent_for(102.0) == 2.0


def test_traffic_from_the_client_keeps_it_alive():
    hb = Heartbeat()
    hb.start(1.0, now=0.0)
    t = 0.0
    for _ in range(50):
        t += 0.9
        hb.received(t)
        action = hb.poll(t)
        assert action is not Beat.TIMEOUT
        if action is Beat.SEND:
            hb.beat_sent(t)


def test_outbound_traffic_postpones_heartbeats_and_the_answer_gets_an_interval():
    hb = Heartbeat()
    hb.start(2.0, now=0.0)
    hb.sent(1.5)  # e.g. a message to one of its subscriptions
    assert hb.poll(2.0) is Beat.NOTHING
    assert hb.poll(3.5) is Beat.SEND
    hb.beat_sent(3.5)
    # two intervals without traffic have passed at 4.0, but the heartbeat of 3.5 is the one
    # the client answers, and it has a whole interval for that
    assert hb.next_deadline() == 5.5
    assert hb.poll(4.0) is Beat.NOTHING
    assert hb.poll(5.4) is Beat.NOTHING
    hb.received(5.4)  # the answer
    assert hb.poll(5.5) is Beat.SEND  # the next heartbeat, no drop
    hb.beat_sent(5.5)
    assert hb.poll(7.5) is Beat.SEND
    hb.beat_sent(7.5)
    assert hb.poll(9.4) is Beat.NOTHING  # 4 s silent, but the beat of 7.5 may still come
    assert hb.poll(9.5) is Beat.TIMEOUT


def test_a_busy_server_sends_no_heartbeats_and_the_two_interval_rule_alone_applies():
    hb = Heartbeat()
    hb.start(1.0, now=0.0)
    t = 0.0
    while True:
        t = round(t + 0.25, 2)
        action = hb.poll(t)
        if action is Beat.TIMEOUT:
            break
        assert action is Beat.NOTHING  # never a heartbeat: output flows all the time
        hb.sent(t)
    assert t == 2.0


def test_a_silent_client_goes_at_the_first_heartbeat_tick_after_two_intervals():
    hb = Heartbeat()
    hb.start(1.0, now=0.0)
    hb.received(0.4)
    t, dropped_at = 0.0, None
    while dropped_at is None:
        deadline = hb.next_deadline()
        assert deadline is not None
        t = deadline
        action = hb.poll(t)
        if action is Beat.SEND:
            hb.beat_sent(t)
        elif action is Beat.TIMEOUT:
            dropped_at = t
    assert dropped_at == 3.0  # ticks at 1, 2, 3: silent 2.6 s, the beat of 2.0 unanswered


def test_stop():
    hb = Heartbeat()
    hb.start(1.0, now=0.0)
    hb.stop()
    assert hb.poll(100.0) is Beat.NOTHING


# -- the JavaScript client's heartbeat, as its source does it ------------------------------------
# On a server heartbeat (or any message) the JS client beats only when its own last beat is
# more than an interval old, on Date.getTime() milliseconds; so with jitter it answers every
# heartbeat or every second one. Events: (time, order, kind).

def _js_client_run(rng: random.Random, interval: float, intervals: int,
                   two_interval_rule: bool) -> tuple[bool, int]:
    """Run an idle JavaScript-client connection for ``intervals`` heartbeat intervals with
    random one-way latencies; return (dropped, beats that arrived more than two intervals
    after the previous one). ``two_interval_rule`` judges by the rule without the grace."""
    hb = Heartbeat()
    order = iter(range(10**9))
    events: list[tuple[float, int, str]] = []

    def lat() -> float:
        return rng.uniform(0.0005, 0.004)

    client_beat_ms = 0  # the client starts heartbeating as it logs on, at 0
    t0 = lat()
    hb.start(interval, t0)
    last_rx, late = t0, 0
    end = t0 + interval * intervals
    while True:
        deadline = hb.next_deadline()
        assert deadline is not None
        if events and events[0][0] <= deadline:
            now, _, kind = heapq.heappop(events)
            if kind == "server heartbeat at client":
                if int(now * 1000) - client_beat_ms > interval * 1000:
                    client_beat_ms = int(now * 1000)
                    heapq.heappush(events, (now + lat(), next(order), "beat at server"))
            else:  # a beat arrives
                if two_interval_rule and now - last_rx >= 2 * interval:
                    return True, late
                late += now - last_rx > 2 * interval
                last_rx = now
                hb.received(now)
            continue
        if deadline > end:
            return False, late
        action = hb.poll(deadline)
        if action is Beat.TIMEOUT:
            return True, late
        if action is Beat.SEND:
            hb.beat_sent(deadline)
            heapq.heappush(events, (deadline + lat(), next(order), "server heartbeat at client"))


def test_a_javascript_client_on_a_one_second_heartbeat_is_never_dropped_by_jitter():
    rng = random.Random(23)
    late_total = old_rule_drops = 0
    for _ in range(60):
        seed = rng.random()
        dropped, late = _js_client_run(random.Random(seed), 1.0, 60, two_interval_rule=False)
        assert not dropped
        late_total += late
        old_rule_drops += _js_client_run(random.Random(seed), 1.0, 60, two_interval_rule=True)[0]
    # the runs did contain beats later than two intervals, the ones the old rule dropped
    assert late_total > 0
    assert old_rule_drops > 20
