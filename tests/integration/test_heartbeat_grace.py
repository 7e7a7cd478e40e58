"""Heartbeats with AMPS's grace, through the official client on the server's test clock: a
client gets a whole interval to answer the server's heartbeat, even where that answer lands
past two intervals after its last traffic (where the rule without the grace dropped it)."""

from __future__ import annotations

import json
import threading

import AMPS
import pytest

from amps_emulator.config import loads_config
from amps_emulator.server.clock import TestClock
from tests.harness import ServerThread
from tests.integration.conftest import Collector, config_xml


@pytest.fixture
def clocked(tmp_path):
    clock = TestClock()
    srv = ServerThread(loads_config(config_xml(tmp_path), "hb.xml"), timebase=clock).start()
    yield srv, clock
    srv.stop()


def test_the_answer_to_a_late_heartbeat_is_in_time(clocked):
    srv, clock = clocked
    beating = AMPS.Client("beating")
    beating.set_heartbeat(5)  # beats on its own every 5 s of real time: none in this test
    lost = threading.Event()
    beating.set_disconnect_handler(lambda client: lost.set())
    beating.connect(srv.uri)
    beating.logon(5000)
    got = Collector()
    beating.subscribe(got, "ticks")
    beating.flush(5000)  # the client's last traffic: clock 0
    pub = AMPS.Client("pub")
    pub.connect(srv.uri)
    pub.logon(5000)
    try:
        srv.call(lambda: clock.advance(3))
        pub.publish("ticks", json.dumps({"n": 1}))
        got.wait_for(1)  # the server sent to it at 3: its next heartbeat is due at 8
        # At 10 the client has been silent for two intervals, but the heartbeat it is to
        # answer went out at 8: its answer (after this advance returns) is in time.
        srv.call(lambda: clock.advance(9))
        beating.flush(5000)
        assert not lost.is_set()
        assert srv.call(lambda: [c.client_name for c in srv.server.connections]).count("beating") == 1
    finally:
        pub.close()
        beating.close()
