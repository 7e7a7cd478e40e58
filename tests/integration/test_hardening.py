"""Issue 11: inputs that took the shared broker down for every client, reproduced on the
socket (or through the official client), each now costing only the sender a failure ack,
a non-match or its own connection."""

from __future__ import annotations

import json
import logging
import threading
import time

import AMPS
import pytest

from tests.harness import ServerThread
from tests.integration.test_robustness import RawClient


def _p(r: RawClient, cid: str, topic: str, body: bytes, **fields) -> dict:
    r.send({"c": "p", "t": topic, "cid": cid, "a": "processed", **fields}, body)
    return r.recv_frame(5)[0]


def _ack_for(r: RawClient, cid: str, timeout: float = 5.0) -> dict:
    """The next ack with this cid (skipping deliveries)."""
    deadline = time.monotonic() + timeout
    while True:
        h, _ = r.recv_frame(max(0.01, deadline - time.monotonic()))
        if h.get("c") == "ack" and h.get("cid") == cid:
            return h


# -- 1, 2: numbers out of range ----------------------------------------------------------

@pytest.mark.parametrize("field,value,reason", [
    ("s", 2 ** 64 + 5, "invalid sequence"),
    ("s", -1, "invalid sequence"),
    ("s", "twelve", "invalid sequence"),
    ("e", 2 ** 70, "invalid expiration"),
])
def test_out_of_range_numbers_fail_that_command_and_live_replay_goes_on(
        server, field, value, reason):
    pub, sub = RawClient(server.port), RawClient(server.port)
    try:
        pub.logon("oor-pub")
        sub.logon("oor-sub")
        sub.send({"c": "subscribe", "t": "oor", "cid": "s", "sub_id": "s", "a": "processed",
                  "bm": "0", "o": "live"})
        assert sub.recv_frame(5)[0]["status"] == "success"
        bad = _p(pub, "bad", "oor", b'{"i":0}', **{field: value})
        assert (bad["status"], bad["reason"]) == ("failure", reason)
        good = _p(pub, "good", "oor", b'{"i":1}', s=1)
        assert good["status"] == "success"
        h, body = sub.recv_frame(5)  # the end-of-turn work still runs
        assert h["c"] == "p" and json.loads(body) == {"i": 1}
    finally:
        pub.close()
        sub.close()


def test_an_exception_in_one_subscription_costs_only_its_client(server, monkeypatch, caplog):
    from amps_emulator.server import replay

    real = replay._deliver_chunk

    def broken_for_victim(srv, cursor, limit):
        if cursor.conn.client_name == "victim":
            raise IndexError("injected")
        return real(srv, cursor, limit)

    monkeypatch.setattr(replay, "_deliver_chunk", broken_for_victim)
    clients = [RawClient(server.port) for _ in range(3)]
    try:
        victim, other, pub = clients
        for r, name in zip(clients, ("victim", "other", "pub")):
            r.logon(name)
        for r in (victim, other):
            r.send({"c": "subscribe", "t": "contained", "cid": "s", "sub_id": "s",
                    "a": "processed", "bm": "0", "o": "live"})
            assert r.recv_frame(5)[0]["status"] == "success"
        with caplog.at_level(logging.ERROR, logger="amps_emulator.server"):
            for i in range(3):
                assert _p(pub, f"p{i}", "contained", b'{"i":%d}' % i)["status"] == "success"
            for i in range(3):
                h, body = other.recv_frame(5)
                assert json.loads(body) == {"i": i}
            assert victim.closed_by_server()
        errors = [r for r in caplog.records if "internal error" in r.getMessage()]
        assert len(errors) == 1 and "victim" in errors[0].getMessage()
    finally:
        for r in clients:
            r.close()


def test_a_refused_sequence_never_poisons_the_publisher_name(tmp_path):
    """After a publish with an oversized ``s``, later publishes under that name are stored
    and delivered, and stay so across a restart (the logon ack gives back a sane ``s``)."""
    from amps_emulator.config import default_config

    def run(expect_s: int, publish: list[int]) -> list[int]:
        srv = ServerThread(default_config(data_dir=str(tmp_path / "data"))).start()
        pub = RawClient(srv.port)
        try:
            assert pub.logon("poison")["s"] == expect_s
            if expect_s == 0:
                assert _p(pub, "x", "poison", b'{"i":-1}', s=2 ** 64)["reason"] == \
                    "invalid sequence"
            for s in publish:
                assert _p(pub, f"p{s}", "poison", b'{"i":%d}' % s, s=s)["status"] == "success"
            reader = RawClient(srv.port)
            reader.logon("poison-reader")
            reader.send({"c": "subscribe", "t": "poison", "cid": "r", "sub_id": "r",
                         "a": "processed", "bm": "0"})
            assert reader.recv_frame(5)[0]["status"] == "success"
            got = [json.loads(reader.recv_frame(5)[1])["i"] for _ in range(expect_s + len(publish))]
            reader.close()
            return got
        finally:
            pub.close()
            srv.stop()

    assert run(0, [1, 2, 3]) == [1, 2, 3]
    assert run(3, [4]) == [1, 2, 3, 4]
