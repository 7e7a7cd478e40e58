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

from tests.support.raw import RawClient
from tests.support.servers import ServerThread


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
    from amps_emulator.server.delivery import replay

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


# -- 3: regular expressions of exponential cost -------------------------------------------

EVIL = "a" * 34 + "!"


def _datas(got, n: int) -> list[str]:
    return [json.loads(d)["s"] if d.startswith("{") else d
            for _, _, d, _, _ in got.wait_for(n, timeout=5)]


@pytest.mark.parametrize("pattern", [
    "^(a+)+$",  # RE2
    "^(?=a)(a|aa)+$",  # look-ahead: RE2 refuses it, the timed matcher gives up
])
def test_pathological_like_costs_milliseconds_and_does_not_match(client_factory, collector,
                                                                  pattern):
    sub, pub = client_factory(), client_factory()
    got = collector()
    sub.subscribe(got, "redos", f"/s LIKE '{pattern}'", timeout=5000)
    for s in (EVIL, EVIL + EVIL, "aaaa"):
        pub.publish("redos", json.dumps({"s": s}))
    pub.flush(5000)  # raises if the server is stuck matching
    assert _datas(got, 1) == ["aaaa"]
    pub.publish("redos", '{"s":"aa"}')
    assert _datas(got, 2) == ["aaaa", "aa"]


def test_pathological_regex_topic_costs_milliseconds(client_factory, collector):
    sub, pub = client_factory(), client_factory()
    got = collector()
    sub.subscribe(got, "^(a+)+$", timeout=5000)
    pub.publish(EVIL, '{"s":"evil"}')
    pub.publish("aaaa", '{"s":"fine"}')
    pub.flush(5000)
    assert _datas(got, 1) == ["fine"]


def test_patterns_no_engine_runs_are_refused(client_factory):
    c = client_factory()
    with pytest.raises(AMPS.BadFilterException):
        c.subscribe(lambda m: None, "t", "/s LIKE '(unclosed'", timeout=5000)
    with pytest.raises(AMPS.BadRegexTopicException):
        c.subscribe(lambda m: None, "orders.(", timeout=5000)


# -- 4: huge filters ------------------------------------------------------------------------

def test_a_filter_beyond_the_size_limit_is_a_bad_filter(client_factory):
    from amps_emulator.protocol.filter.compiler import MAX_TEXT

    c = client_factory()
    clauses = " OR ".join(f"/f{i} = {i}" for i in range(MAX_TEXT // 8))
    assert len(clauses) > MAX_TEXT
    with pytest.raises(AMPS.BadFilterException):
        c.subscribe(lambda m: None, "big", clauses, timeout=10000)
    c.publish("big", "{}")
    c.flush(5000)


def test_a_long_filter_compiles_while_the_others_are_served(client_factory, collector):
    """A filter of thousands of clauses takes about a second to compile: the other clients'
    round trips complete meanwhile, and the subscription then works."""
    sub, pub = client_factory(), client_factory()
    text = " OR ".join(f"/f{i} = {i}" for i in range(3000)) + f" OR /tag = '{time.time()}'"
    got = collector()
    subscribed = threading.Event()

    def subscribe() -> None:
        sub.subscribe(got, "long-filter", text, timeout=30000)
        subscribed.set()

    t = threading.Thread(target=subscribe)
    t.start()
    served_before = 0
    while not subscribed.is_set() and served_before < 50:
        pub.publish("elsewhere", "{}")
        pub.flush(30000)
        served_before += 1
    t.join()
    assert served_before >= 3, "the other client was not served during the compile"
    pub.publish("long-filter", '{"f2999": 2999, "s": "hit"}')
    pub.publish("long-filter", '{"f1": 2, "s": "miss"}')
    pub.publish("long-filter", '{"f7": 7, "s": "hit2"}')
    assert _datas(got, 2) == ["hit", "hit2"]


# -- 5: bodies nested too deep to evaluate ---------------------------------------------------

QUEUE = ("<SOW><Queue><Name>deepq</Name><MessageType>json</MessageType>"
         "<UnderlyingTopic>deep</UnderlyingTopic></Queue></SOW>")
DEEP = b'{"x":' * 100_000 + b"1" + b"}" * 100_000


def test_a_body_too_deep_to_evaluate_matches_no_filter_and_poisons_nothing(tmp_path):
    from tests.support.servers import config_xml, start_server

    xml = config_xml(tmp_path, extra=QUEUE)
    for restart in (False, True):
        srv = start_server(xml)
        pub, worker, watcher = (RawClient(srv.port) for _ in range(3))
        try:
            pub.logon("deep-pub")
            worker.logon("deep-worker")
            watcher.logon("deep-watcher")
            watcher.send({"c": "subscribe", "t": "deep", "cid": "w", "sub_id": "w",
                          "a": "processed", "filter": "/x = 1"})
            assert watcher.recv_frame(5)[0]["status"] == "success"
            if not restart:
                assert _p(pub, "deep", "deep", DEEP)["status"] == "success"
            worker.send({"c": "subscribe", "t": "deepq", "cid": "q", "sub_id": "q",
                         "a": "processed", "filter": "/x = 1"})
            assert worker.recv_frame(5)[0]["status"] == "success"
            assert _p(pub, "ok", "deep", b'{"x":1}')["status"] == "success"
            h, body = worker.recv_frame(5)
            assert (h["c"], body) == ("p", b'{"x":1}')
            worker.send({"c": "sow_delete", "t": "deepq", "cid": "ack", "sids": "q",
                         "bookmark": h["bm"], "a": "processed"})
            assert _ack_for(worker, "ack")["status"] == "success"
            h, body = watcher.recv_frame(5)
            assert body == b'{"x":1}'  # the deep one matched nothing, and broke nothing
        finally:
            for r in (pub, worker, watcher):
                r.close()
            srv.stop()


# -- 6: connections that never log on; the memory budget ------------------------------------

def test_a_connection_that_never_logs_on_is_closed(server):
    server.call(lambda: setattr(server.server, "logon_timeout", 0.3))
    idle, active = RawClient(server.port), RawClient(server.port)
    try:
        active.logon("logs-on")
        assert idle.closed_by_server(), "a connection without a logon stayed open"
        active.send({"c": "flush", "cid": "f", "a": "completed"})
        assert _ack_for(active, "f")["status"] == "success"
    finally:
        idle.close()
        active.close()


def test_the_memory_budget_disconnects_the_largest_holders(server, client_factory, collector,
                                                           caplog):
    server.call(lambda: setattr(server.server, "memory_budget", 8 << 20))
    sub, pub = client_factory(), client_factory()
    got = collector()
    sub.subscribe(got, "steady", timeout=5000)
    hogs = [RawClient(server.port) for _ in range(3)]
    try:
        with caplog.at_level(logging.WARNING, logger="amps_emulator.server"):
            for i, h in enumerate(hogs):  # three partial 60 MB frames, 3-4 MB in each
                h.logon(f"hog-{i}")
                try:
                    h.send_raw((60 << 20).to_bytes(4, "big") + b'{"c":"p"}'
                               + b"x" * ((3 << 20) + i * (512 << 10)))
                except OSError:
                    pass
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and len(_hogs_left(server)) == 3:
                time.sleep(0.01)  # polling server state with a deadline
            left = _hogs_left(server)
            assert len(left) < 3 and server.call(
                lambda: sum(c.buffered_bytes() for c in server.server.connections)) <= 8 << 20
            assert any("memory budget" in r.getMessage() and "hog-" in r.getMessage()
                       for r in caplog.records)
        for i in range(100):
            pub.publish("steady", '{"s":"%d"}' % i)
        pub.flush(5000)
        assert len(got.wait_for(100)) == 100
    finally:
        for h in hogs:
            h.close()


def test_the_memory_budget_counts_a_large_frame_whole_once_its_header_is_in(server, caplog):
    """A logged-on peer that announces a 60 MB publish and sends only its header has made the
    server allocate the body: the budget counts it then, not as its bytes arrive."""
    server.call(lambda: setattr(server.server, "memory_budget", 8 << 20))
    hog = RawClient(server.port)
    try:
        hog.logon("hog-header")
        with caplog.at_level(logging.WARNING, logger="amps_emulator.server"):
            hog.send_raw((60 << 20).to_bytes(4, "big") + b'{"c":"p","t":"big"}' + b"x" * 1024)
            assert hog.closed_by_server(), "a 60 MB reservation stayed within an 8 MB budget"
        assert any("memory budget" in r.getMessage() and "hog-header" in r.getMessage()
                   for r in caplog.records)
    finally:
        hog.close()


def _hogs_left(server) -> list[str]:
    return server.call(lambda: [c.client_name for c in server.server.connections
                                if not c.closed and (c.client_name or "").startswith("hog-")])


def test_the_memory_budget_covers_slow_consumers_below_their_own_limit(server, caplog):
    server.call(lambda: setattr(server.server, "memory_budget", 4 << 20))
    slow = RawClient(server.port)
    import socket

    slow.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    pub = RawClient(server.port)
    try:
        slow.logon("slow-budget")
        slow.send({"c": "subscribe", "t": "flood", "cid": "s", "sub_id": "s", "a": "processed"})
        assert slow.recv_frame(5)[0]["status"] == "success"
        pub.logon("flooder")
        body = b'{"pad":"' + b"x" * 10_000 + b'"}'
        with caplog.at_level(logging.WARNING, logger="amps_emulator.server"):
            for i in range(2000):  # 20 MB, far below the 128 MB per-client limit
                pub.send({"c": "p", "t": "flood"}, body)
            pub.send({"c": "flush", "cid": "f", "a": "completed"})
            assert _ack_for(pub, "f", timeout=30)["status"] == "success"
            assert slow.closed_by_server()
        assert any("memory budget" in r.getMessage() and "slow-budget" in r.getMessage()
                   for r in caplog.records)
    finally:
        slow.close()
        pub.close()


# -- 10: security posture -------------------------------------------------------------------

def test_the_sample_config_listens_on_loopback_only():
    from amps_emulator.config import loads_config
    from amps_emulator.config.cli import sample_config
    from amps_emulator.server.net.listener import listeners_from_config

    listeners = listeners_from_config(loads_config(sample_config(), "sample.xml"))
    assert listeners and {lst.host for lst in listeners} == {"127.0.0.1"}


def test_a_logon_taking_a_name_over_is_a_warning_naming_both_peers(server, caplog):
    first, second = RawClient(server.port), RawClient(server.port)
    try:
        with caplog.at_level(logging.WARNING, logger="amps_emulator.connection"):
            first.logon("shared-name")
            second.logon("shared-name")
            assert first.closed_by_server()
        peers = [f"127.0.0.1:{r.sock.getsockname()[1]}" for r in (first, second)]
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any(all(p in w for p in peers) and "shared-name" in w for w in warnings)
    finally:
        first.close()
        second.close()


# -- found by the fuzz: long scans hold the event loop ~10 ms at a time ------------------------

def test_a_sow_query_on_a_deep_queue_runs_in_steps(tmp_path, monkeypatch):
    from amps_emulator.server.handlers import sow as sow_handlers
    from amps_emulator.server.services import queue_held
    from tests.support.servers import config_xml, start_server

    monkeypatch.setattr(queue_held, "STEP_SECONDS", 0.0)  # yield at every chance
    monkeypatch.setattr(sow_handlers, "SLICE_SECONDS", 0.0)  # and a step a loop pass
    steps = []
    real_step = sow_handlers._step
    monkeypatch.setattr(sow_handlers, "_step", lambda *a: (steps.append(1), real_step(*a)))
    srv = start_server(config_xml(tmp_path, extra=QUEUE))
    c = RawClient(srv.port)
    try:
        c.logon("deep-queue")
        for i in range(500):
            c.send({"c": "p", "t": "deep"}, b'{"i":%d}' % i)
        c.send({"c": "sow", "t": "deepq", "cid": "q", "query_id": "q", "a": "completed",
                 "filter": "/i >= 100", "batch_size": 50})
        got = []
        while True:
            h, body = c.recv_frame(10)
            if h["c"] == "sow":
                got.extend(int(x) for x in body.split(b'"i":')[1:] for x in [x.split(b"}")[0]])
            if h["c"] == "ack":
                break
        assert got == list(range(100, 500)) and len(steps) >= 5
    finally:
        c.close()
        srv.stop()


def test_a_replay_over_a_long_log_runs_in_steps(server, monkeypatch):
    from amps_emulator.server.delivery import replay, replay_frames

    monkeypatch.setattr(replay, "STEP_SECONDS", 0.0)
    # a plain replay reads the journal's stored frames: READ_BYTES at a time, SCAN_BYTES a step
    monkeypatch.setattr(replay_frames, "READ_BYTES", 4096)
    monkeypatch.setattr(replay_frames, "SCAN_BYTES", 4096)
    scheduled = []
    real = replay.schedule
    monkeypatch.setattr(replay, "schedule", lambda s, c: (scheduled.append(1), real(s, c)))
    pub, sub = RawClient(server.port), RawClient(server.port)
    try:
        pub.logon("long-log")
        for i in range(3000):
            pub.send({"c": "p", "t": "rare" if i % 1000 == 999 else "common"}, b'{"i":%d}' % i)
        pub.send({"c": "flush", "cid": "f", "a": "completed"})
        _ack_for(pub, "f")
        sub.logon("rare-reader")
        sub.send({"c": "subscribe", "t": "rare", "cid": "s", "sub_id": "s", "bm": "0",
                  "a": "processed"})
        assert sub.recv_frame(5)[0]["status"] == "success"
        got = [json.loads(sub.recv_frame(5)[1])["i"] for _ in range(3)]
        assert got == [999, 1999, 2999] and len(scheduled) >= 5
    finally:
        pub.close()
        sub.close()
