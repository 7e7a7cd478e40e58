"""Heartbeats through the official client on the server's test clock: on a quiet connection
the server sends one every half interval, each is answered, and an idle client stays
connected for as long as the test runs the clock (the two-interval limit never comes near)."""

from __future__ import annotations

import threading

import AMPS
import pytest

from amps_emulator.config import loads_config
from amps_emulator.server.core.clock import TestClock
from tests.support.servers import ServerThread, config_xml, until


@pytest.fixture
def clocked(tmp_path):
    clock = TestClock()
    srv = ServerThread(loads_config(config_xml(tmp_path), "hb.xml"), timebase=clock).start()
    yield srv, clock
    srv.stop()


def test_an_idle_client_is_kept_alive_by_half_interval_heartbeats(clocked):
    srv, clock = clocked
    c = AMPS.Client("beating")
    c.set_heartbeat(5)  # beats on its own every 5 s of real time: none in this test
    lost = threading.Event()
    c.set_disconnect_handler(lambda client: lost.set())
    heartbeats = []
    c.connect(srv.uri)
    c.set_global_command_type_message_handler("heartbeat", lambda m: heartbeats.append(m))
    c.logon(5000)
    c.flush(5000)  # the client's last traffic: clock 0

    def heard_at() -> float:
        return srv.call(lambda: srv.server.broker.by_name["beating"].heartbeat.last_received)

    try:
        for step in range(1, 9):  # 20.8 s of an idle connection, 2.6 s at a time
            srv.call(lambda: clock.advance(2.6))
            # a heartbeat went out at the half interval, and its answer came back
            assert until(lambda n=step: len(heartbeats) >= n), (step, len(heartbeats))
            assert until(lambda: heard_at() == srv.call(clock.monotonic)), step
        assert not lost.is_set()
        c.publish("alive", "{}")
        c.flush(5000)
    finally:
        c.close()
