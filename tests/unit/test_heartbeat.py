"""The heartbeat state machine, driven by a fake clock."""

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
    hb.sent(101.0)
    assert hb.next_deadline() == 102.0
    assert hb.poll(101.9) is Beat.NOTHING
    assert hb.poll(102.0) is Beat.TIMEOUT  # nothing received since 100.0


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
    hb.sent(1.5)
    assert hb.poll(2.0) is Beat.NOTHING
    assert hb.poll(3.5) is Beat.SEND
    hb.sent(3.5)
    assert hb.poll(4.0) is Beat.TIMEOUT


def test_stop():
    hb = Heartbeat()
    hb.start(1.0, now=0.0)
    hb.stop()
    assert hb.poll(100.0) is Beat.NOTHING
