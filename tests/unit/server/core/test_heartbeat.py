"""The heartbeat state machine, driven by a fake clock: AMPS's two-interval limit for a silent
client, and heartbeats every half interval on a quiet connection, which keep 60East's
JavaScript client (it beats only on what it receives) inside its window whatever the jitter."""

import heapq
import random

from amps_emulator.server.core.heartbeat import Beat, Heartbeat


def test_inactive_until_started():
    hb = Heartbeat()
    assert hb.poll(1e9) is Beat.NOTHING and hb.next_deadline() is None


def test_sends_every_half_interval_and_times_out_after_two_intervals():
    hb = Heartbeat()
    hb.start(1.0, now=100.0)
    assert hb.next_deadline() == 100.5
    assert hb.poll(100.4) is Beat.NOTHING
    for t in (100.5, 101.0, 101.5):
        assert hb.poll(t) is Beat.SEND
        hb.sent(t)
        assert hb.next_deadline() == t + 0.5
    assert hb.poll(101.9) is Beat.NOTHING
    assert hb.poll(102.0) is Beat.TIMEOUT  # nothing received since 100.0
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
            hb.sent(t)


def test_outbound_traffic_postpones_heartbeats_but_not_the_timeout():
    hb = Heartbeat()
    hb.start(2.0, now=0.0)
    hb.sent(0.5)  # e.g. a message to one of its subscriptions
    assert hb.poll(1.0) is Beat.NOTHING
    assert hb.next_deadline() == 1.5
    assert hb.poll(1.5) is Beat.SEND
    hb.sent(1.5)
    hb.sent(3.0)
    assert hb.poll(3.9) is Beat.NOTHING
    assert hb.poll(4.0) is Beat.TIMEOUT


def test_stop():
    hb = Heartbeat()
    hb.start(1.0, now=0.0)
    hb.stop()
    assert hb.poll(100.0) is Beat.NOTHING


# -- the JavaScript client's heartbeat, as its source (npm amps, checkAndSendHeartbeat) does it --
# On a server heartbeat or any other message it beats only when its own last beat is more than
# an interval old, in Date.getTime() milliseconds; it gives up when it has not beaten for two
# intervals (its default timeout). Both sides are modelled; one-way latencies are random.

class _FullIntervalPacing(Heartbeat):
    """The pacing before: a heartbeat only after a whole interval without output."""

    def poll(self, now: float) -> Beat:
        iv = self.interval
        assert iv is not None
        if now >= self.last_received + 2 * iv:
            return Beat.TIMEOUT
        return Beat.SEND if now >= self.last_sent + iv else Beat.NOTHING

    def next_deadline(self) -> float | None:
        iv = self.interval
        assert iv is not None
        return min(self.last_sent + iv, self.last_received + 2 * iv)


def _idle_js_client(hb: Heartbeat, rng: random.Random, interval: float, intervals: int) -> str:
    """Run an idle connection: "server dropped it", "client gave up", or "connected"."""
    events: list[tuple[float, int, str]] = []  # (time, order, what)
    order = iter(range(10**9))

    def lat() -> float:
        return rng.uniform(0.0002, 0.004)

    last_beat_ms = 0  # the client beats as it starts heartbeating, at 0
    hb.start(interval, lat())
    end = interval * intervals
    while True:
        deadline = hb.next_deadline()
        assert deadline is not None
        if (events and events[0][0] <= deadline) or deadline > end:
            if not events or events[0][0] > end:
                return "connected"
            now, _, what = heapq.heappop(events)
            if now * 1000 >= last_beat_ms + 2 * interval * 1000:
                return "client gave up"  # its absence timer fired before this arrived
            if what == "at client":
                if int(now * 1000) - last_beat_ms > interval * 1000:
                    last_beat_ms = int(now * 1000)
                    heapq.heappush(events, (now + lat(), next(order), "at server"))
            else:
                hb.received(now)
            continue
        action = hb.poll(deadline)
        if action is Beat.TIMEOUT:
            return "server dropped it"
        if action is Beat.SEND:
            hb.sent(deadline)
            heapq.heappush(events, (deadline + lat(), next(order), "at client"))


def test_an_idle_javascript_client_on_a_one_second_heartbeat_stays_connected():
    rng = random.Random(23)
    before: dict[str, int] = {}
    for _ in range(60):
        seed = rng.random()
        assert _idle_js_client(Heartbeat(), random.Random(seed), 1.0, 60) == "connected"
        outcome = _idle_js_client(_FullIntervalPacing(), random.Random(seed), 1.0, 60)
        before[outcome] = before.get(outcome, 0) + 1
    # heartbeats a whole interval apart lost that client in most of the same runs
    assert before.get("connected", 0) < 30, before
