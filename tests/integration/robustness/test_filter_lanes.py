"""Long filters compile off the event loop in worker threads: one client's huge filter must
not keep another client's long-but-small filter waiting (server.net.filter_lanes).

The huge compile is held deterministically: the entry point of the compile aside
(``connection._precompile``) is wrapped so that the huge text waits on an event."""

from __future__ import annotations

import threading
import time

import pytest

from amps_emulator.server.net import connection
from amps_emulator.server.net.filter_lanes import SMALL_LANE
from tests.support.raw import RawClient


def _filter(clauses: int, tag: str) -> str:
    return " OR ".join(f"/f{i} = {i}" for i in range(clauses)) + f" OR /tag = '{tag}'"


def _next_ack(r: RawClient, timeout: float = 10.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        got = r.recv_frame(max(0.01, deadline - time.monotonic()))
        assert got is not None, "the server closed the connection"
        if got[0].get("c") == "ack":
            return got[0]


@pytest.fixture
def held(monkeypatch):
    """(the huge text, started, release): compiling the huge text aside waits for
    ``release`` once it has set ``started``."""
    huge = _filter(2500, f"huge-{time.time()}")
    assert len(huge) > SMALL_LANE
    started, release = threading.Event(), threading.Event()
    original = connection._precompile

    def precompile(text, context):
        if text == huge:
            started.set()
            release.wait(60)
        return original(text, context)

    monkeypatch.setattr(connection, "_precompile", precompile)
    yield huge, started, release
    release.set()  # (never leave the worker held, whatever failed)


def test_a_huge_filter_does_not_delay_another_clients_long_filter(server, client_factory,
                                                                    collector, held):
    huge, started, release = held
    small = _filter(250, f"small-{time.time()}")
    assert connection.INLINE_FILTER < len(small) <= SMALL_LANE  # compiled aside, small lane

    noisy = RawClient(server.port)
    assert noisy.logon("noisy")["status"] == "success"
    noisy.send({"c": "subscribe", "t": "lanes", "sub_id": "big", "filter": huge,
                "cid": "s1", "a": "processed"})
    noisy.send({"c": "flush", "cid": "f1", "a": "processed"})  # behind it, in order
    assert started.wait(10), "the huge filter never started compiling"

    sub, pub = client_factory("quiet"), client_factory("pub")
    got = collector()
    sub.subscribe(got, "lanes", small, timeout=10000)  # acked while the huge one is held
    pub.publish("lanes", '{"f249": 249, "s": "small"}')
    assert [m[2] for m in got.wait_for(1)] == ['{"f249": 249, "s": "small"}']

    with pytest.raises(TimeoutError):  # the noisy client's own commands still wait
        noisy.recv_frame(0.2)
    release.set()
    first, second = _next_ack(noisy, 30), _next_ack(noisy, 30)
    assert (first["cid"], first["status"]) == ("s1", "success")
    assert second["cid"] == "f1"  # its flush came after its subscribe, as sent
    pub.publish("lanes", '{"f2499": 2499, "s": "huge"}')
    pub.flush(5000)
    h, body = noisy.recv_frame(10)
    assert (h["c"], h["sids"], body) == ("p", "big", b'{"f2499": 2499, "s": "huge"}')
    noisy.close()
