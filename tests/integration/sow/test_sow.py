"""State of the World through the official client: queries, deltas, OOF, deletes, expiry,
restarts, and the SOW-based bookmark stores of seeds 000/001."""

from __future__ import annotations

import json
import threading
import time

import AMPS
import pytest

from tests.support.clients import consume_and_discard, ha_client, store_client
from tests.support.sow import query, sow_config


def test_publish_upserts_and_query_returns_one_record_per_key(sow_clients):
    c = sow_clients()
    for i in range(30):
        c.publish("orders", json.dumps({"id": i % 10, "v": i, "sym": "IBM" if i % 2 else "MSFT"}))
    c.flush(5000)
    rows = query(c, "orders", batch_size=3)
    assert sorted(r["id"] for _, r in rows) == list(range(10))
    assert {r["id"]: r["v"] for _, r in rows} == {i: 20 + i for i in range(10)}
    keys = {k for k, _ in rows}
    assert len(keys) == 10 and all(k.isdigit() for k in keys)


def test_query_filter_orderby_topn_and_counts(sow_clients):
    c = sow_clients()
    for i in range(20):
        c.publish("orders", json.dumps({"id": i, "px": (i * 7) % 20, "sym": "IBM"}))
    c.flush(5000)
    cmd = (AMPS.Command("sow").set_topic("orders").set_filter("/px >= 5").set_order_by("/px DESC,/id")
           .set_top_n(4).set_batch_size(2).add_ack_type("completed"))
    records, completed = [], None
    for m in c.execute(cmd):
        if m.get_command() == "sow":
            records.append(json.loads(m.get_data()))
        elif m.get_command() == "ack" and m.get_ack_type() == "completed":
            completed = m
    expected = sorted(({"id": i, "px": (i * 7) % 20, "sym": "IBM"} for i in range(20)
                       if (i * 7) % 20 >= 5), key=lambda r: (-r["px"], r["id"]))[:4]
    assert records == expected
    assert completed is not None
    counts = (completed.get_records_returned(), completed.get_matches(), completed.get_topic_matches())
    assert tuple(int(x) for x in counts) == (4, 15, 20)


def test_orderby_text_hint_sorts_numbers_as_text(sow_clients):
    c = sow_clients()
    for i, code in enumerate([9, 10, 100, 2]):
        c.publish("orders", json.dumps({"id": i, "code": code}))
    c.flush(5000)
    def codes(order):
        cmd = AMPS.Command("sow").set_topic("orders").set_order_by(order)
        return [json.loads(m.get_data())["code"] for m in c.execute(cmd)
                if m.get_command() == "sow"]
    assert codes("/code") == [2, 9, 10, 100]
    assert codes("/code TEXT") == [10, 100, 2, 9]
    assert codes("/code DESC TEXT") == [9, 2, 100, 10]


def test_sow_keys_select_timestamp_and_regex_topics(sow_clients):
    c = sow_clients()
    c.publish("orders", json.dumps({"id": 1, "sym": "A", "px": 1}))
    c.publish("orders", json.dumps({"id": 2, "sym": "B", "px": 2}))
    c.publish("orders-eu", json.dumps({"id": 3, "sym": "C", "px": 3}))
    c.flush(5000)
    key1 = query(c, "orders", "/id = 1")[0][0]
    cmd = AMPS.Command("sow").set_topic("orders").set_sow_keys(key1).set_options(
        "select=[-/,+/sym],timestamp")
    got = [m for m in c.execute(cmd) if m.get_command() == "sow"]
    assert [json.loads(m.get_data()) for m in got] == [{"sym": "A"}]
    assert got[0].get_timestamp().endswith("Z")
    both = [m for m in c.sow("^orders", timeout=5000) if m.get_command() == "sow"]
    assert sorted((m.get_topic(), json.loads(m.get_data())["id"]) for m in both) == [
        ("orders", 1), ("orders", 2), ("orders-eu", 3)]
    with pytest.raises(AMPS.InvalidTopicException):  # the name taken literally: no such topic
        list(c.execute(AMPS.Command("sow").set_topic("^orders").set_options("non_regex_topic")))


def test_a_regex_query_orders_and_pages_all_its_topics_as_one_result(sow_clients):
    c = sow_clients()
    for i, (topic, px) in enumerate([("orders", 5), ("orders-eu", 9), ("orders", 1),
                                     ("orders-eu", 3), ("orders", 7)]):
        c.publish(topic, json.dumps({"id": i, "px": px}))
    c.flush(5000)
    cmd = (AMPS.Command("sow").set_topic("^orders").set_order_by("/px DESC").set_top_n(3)
           .set_options("skip_n=1,select=[-/,+/px]").add_ack_type("completed"))
    got, completed = [], None
    for m in c.execute(cmd):
        if m.get_command() == "sow":
            got.append((m.get_topic(), json.loads(m.get_data())))
        elif m.get_command() == "ack":
            completed = m
    assert got == [("orders", {"px": 7}), ("orders", {"px": 5}), ("orders-eu", {"px": 3})]
    assert int(completed.get_records_returned()) == 3
    assert int(completed.get_matches()) == 5
    with pytest.raises(AMPS.AMPSException):
        list(c.execute(AMPS.Command("sow").set_topic("^orders").set_order_by("/px UP")
                       .set_options("skip_n=1")))


def test_query_errors(sow_clients):
    c = sow_clients()
    with pytest.raises(AMPS.BadFilterException):
        query(c, "orders", "/id = = 1")
    with pytest.raises(AMPS.InvalidTopicException):
        query(c, "not-a-sow-topic")
    with pytest.raises(AMPS.AMPSException):
        list(c.execute(AMPS.Command("sow").set_topic("orders").set_order_by("/id SIDEWAYS")))
    with pytest.raises(AMPS.AMPSException):
        list(c.execute(AMPS.Command("sow").set_topic("orders").set_batch_size(10_001)))
    assert query(c, "orders") == []  # the connection keeps working


def test_explicit_sow_keys_and_bad_keys(sow_clients):
    c = sow_clients()
    c.execute(AMPS.Command("publish").set_topic("explicit").set_sow_key("Zm9v").set_data('{"a":1}'))
    c.execute(AMPS.Command("publish").set_topic("explicit").set_sow_key("Zm9v").set_data('{"a":2}'))
    c.flush(5000)
    assert query(c, "explicit") == [("Zm9v", {"a": 2})]
    for bad in (AMPS.Command("publish").set_topic("explicit").set_data('{"a":3}'),
                AMPS.Command("publish").set_topic("explicit").set_sow_key("not base64!").set_data("{}"),
                AMPS.Command("publish").set_topic("orders").set_data('{"id":')):  # unparsable
        with pytest.raises(AMPS.AMPSException) as ei:
            c.execute(bad.add_ack_type("processed").set_timeout(5000))
        assert "sow key" in str(ei.value).lower()
    assert query(c, "explicit") == [("Zm9v", {"a": 2})]


def test_composite_keys(sow_clients):
    c = sow_clients()
    c.publish("positions", json.dumps({"acct": "a", "sym": "IBM", "qty": 1}))
    c.publish("positions", json.dumps({"acct": "a", "sym": "MSFT", "qty": 2}))
    c.publish("positions", json.dumps({"acct": "a", "sym": "IBM", "qty": 3}))
    c.flush(5000)
    assert sorted(r["qty"] for _, r in query(c, "positions")) == [2, 3]


def test_delta_publish_merges_and_delta_subscribers_get_changes(sow_clients):
    c = sow_clients()
    c.publish("orders", json.dumps({"id": 7, "px": 10, "qty": 100, "sym": "IBM"}))
    c.flush(5000)
    full, delta = [], []
    c.subscribe(lambda m: full.append(json.loads(m.get_data())), "orders", timeout=5000)
    c.delta_subscribe(lambda m: delta.append(json.loads(m.get_data())), "orders", timeout=5000)
    c.delta_publish("orders", json.dumps({"id": 7, "px": 11}))
    c.flush(5000)
    deadline = time.monotonic() + 10
    while (not full or not delta) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert full == [{"id": 7, "px": 11, "qty": 100, "sym": "IBM"}]
    assert delta == [{"id": 7, "px": 11}]
    assert query(c, "orders") [0][1] == {"id": 7, "px": 11, "qty": 100, "sym": "IBM"}


def test_sow_and_delta_subscribe_no_empties(sow_clients):
    c = sow_clients()
    c.publish("orders", json.dumps({"id": 1, "px": 10}))
    c.flush(5000)
    got = []
    stream = c.sow_and_delta_subscribe("orders", options="no_empties", timeout=5000).timeout(2000)
    it = iter(stream)
    c.publish("orders", json.dumps({"id": 1, "px": 10}))  # nothing changes: skipped
    c.publish("orders", json.dumps({"id": 1, "px": 12}))
    for m in it:
        if m is None:
            break
        got.append((m.get_command(), json.loads(m.get_data()) if m.get_data() else None))
        if m.get_command() == "publish":
            break
    assert got[:3] == [("group_begin", None), ("sow", {"id": 1, "px": 10}), ("group_end", None)]
    assert got[3:] == [("publish", {"id": 1, "px": 12})]  # the unchanged update was skipped
    stream.close()


def test_sow_and_subscribe_is_atomic_under_racing_publishes(sow_clients):
    pub, sub = sow_clients(), sow_clients()
    for i in range(200):
        pub.publish("orders", json.dumps({"id": i, "v": 0}))
    pub.flush(5000)
    seen: dict[int, list[int]] = {}
    done = threading.Event()

    def on(m):
        if m.get_command() in ("sow", "publish"):
            r = json.loads(m.get_data())
            seen.setdefault(r["id"], []).append(r["v"])
            if r["id"] == 199 and r["v"] == 1:
                done.set()

    def racer():
        for i in range(200):
            pub.publish("orders", json.dumps({"id": i, "v": 1}))

    t = threading.Thread(target=racer)
    t.start()
    sub.sow_and_subscribe(on, "orders", timeout=5000)
    t.join()
    pub.flush(5000)
    assert done.wait(10)
    for i in range(200):
        # Each record is seen as it was at query time and then every later update, once.
        assert seen[i] in ([0, 1], [1]), (i, seen[i])


def test_oof_match_deleted_and_expired(sow_clients):
    c = sow_clients()
    c.publish("quotes", json.dumps({"id": 1, "px": 50}))
    c.publish("quotes", json.dumps({"id": 2, "px": 60}))
    c.execute(AMPS.Command("publish").set_topic("quotes").set_data('{"id":3,"px":70}')
              .set_expiration(1))
    c.flush(5000)
    events = []
    got3 = threading.Event()

    def on(m):
        events.append((m.get_command(), json.loads(m.get_data())["id"] if m.get_data() else None,
                       m.get_reason() if m.get_command() == "oof" else ""))
        if m.get_command() == "oof" and m.get_reason() == "expired":
            got3.set()

    c.sow_and_subscribe(on, "quotes", "/px > 40", options="oof", timeout=5000)
    c.publish("quotes", json.dumps({"id": 1, "px": 10}))  # leaves the filter: oof match
    c.sow_delete("quotes", "/id = 2", 5000)  # deleted: oof deleted
    assert got3.wait(10), events  # id 3 expires after one second: oof expired
    oofs = [e for e in events if e[0] == "oof"]
    assert ("oof", 1, "match") in oofs and ("oof", 2, "deleted") in oofs and ("oof", 3, "expired") in oofs
    assert [r for _, r in query(c, "quotes")] == [{"id": 1, "px": 10}]


def test_expired_records_never_appear_in_queries(sow_clients):
    c = sow_clients()
    c.execute(AMPS.Command("publish").set_topic("quotes").set_data('{"id":9,"px":1}').set_expiration(1))
    c.publish("quotes", json.dumps({"id": 10, "px": 1}))
    c.flush(5000)
    assert sorted(r["id"] for _, r in query(c, "quotes")) == [9, 10]
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and len(query(c, "quotes")) == 2:
        time.sleep(0.05)
    assert [r["id"] for _, r in query(c, "quotes")] == [10]


def test_sow_delete_by_filter_keys_and_data_with_stats(sow_clients):
    c = sow_clients()
    for i in range(10):
        c.publish("orders", json.dumps({"id": i, "sym": "IBM" if i < 5 else "MSFT"}))
    c.flush(5000)
    ack = c.sow_delete("orders", "/sym = 'IBM' AND /id < 3", 5000)
    assert tuple(int(x) for x in (ack.get_sow_deleted(), ack.get_matches(),
                                  ack.get_topic_matches())) == (3, 3, 10)
    key = dict((r["id"], k) for k, r in query(c, "orders"))[7]
    ack = c.sow_delete_by_keys("orders", key, 5000)
    assert int(ack.get_sow_deleted()) == 1
    ack = c.sow_delete_by_data("orders", json.dumps({"id": 8}), 5000)
    assert int(ack.get_sow_deleted()) == 1
    assert sorted(r["id"] for _, r in query(c, "orders")) == [3, 4, 5, 6, 9]
    ack = c.sow_delete("orders", "1=1", 5000)
    assert int(ack.get_sow_deleted()) == 5 and query(c, "orders") == []


def test_restart_keeps_acked_records_and_rebuilds_transient_from_the_log(tmp_path):
    from tests.support.procserver import ProcServer

    srv = ProcServer.with_config(tmp_path, sow_config)
    try:
        c = store_client(srv.uri, "restart-writer")
        for i in range(300):
            c.publish("orders", json.dumps({"id": i % 100, "v": i}))
            c.publish("cache", json.dumps({"id": i % 50, "v": i}))
        c.execute(AMPS.Command("publish").set_topic("quotes").set_data('{"id":1,"px":1}')
                  .set_expiration(2))
        c.publish_flush(10000)
        c.close()
        srv.kill()  # SIGKILL: everything acked as persisted must survive
        srv.start()
        r = AMPS.Client("restart-reader")
        r.connect(srv.uri)
        r.logon(5000)
        assert {x["id"]: x["v"] for _, x in query(r, "orders")} == {i: 200 + i for i in range(100)}
        assert {x["id"]: x["v"] for _, x in query(r, "cache")} == {i: 250 + i for i in range(50)}
        r.close()
        srv.stop()  # graceful
        time.sleep(2.1)  # the quote's two-second lifetime passes while the server is down
        srv.start()
        r = AMPS.Client("restart-reader-2")
        r.connect(srv.uri)
        r.logon(5000)
        assert len(query(r, "orders")) == 100 and len(query(r, "cache")) == 50
        assert query(r, "quotes") == []  # expired across the restart
        r.close()
    finally:
        srv.stop()


class SowBookmarkStore:
    """The seed-001 application pattern: a bookmark store kept in a SOW topic.

    Written here as an application would write it against the client's store interface:
    the most recent bookmark per subscription is loaded with one query at construction and
    updated by publishing a record each time a message is discarded (in order)."""

    def __init__(self, store_client, topic, tracked_name):
        self.client = store_client
        self.topic = topic
        self.name = tracked_name
        self.recent: dict[str, str] = {}
        for m in store_client.sow(topic, f"/clientName = '{tracked_name}'", timeout=5000):
            if m.get_command() == "sow":
                rec = json.loads(m.get_data())
                self.recent[rec["subId"]] = rec["bookmark"]

    def set_server_version(self, version):
        pass

    def get_most_recent(self, sub_id):
        return self.recent.get(sub_id, "0")

    def is_discarded(self, message):
        return False

    def log(self, message):
        return 1

    def persisted(self, sub_id, bookmark):
        pass

    def discard(self, sub_id, seq):
        pass

    def discard_message(self, message):
        sub_id, bm = message.get_sub_id(), message.get_bookmark()
        if not sub_id or not bm:
            return
        self.client.publish(self.topic, json.dumps(
            {"clientName": self.name, "subId": sub_id, "bookmark": bm}))
        self.recent[sub_id] = bm


def test_seed_001_sow_bookmark_store_resumes_after_client_restart(sow_clients, sow_server):
    pub = sow_clients("seed1-publisher")
    for i in range(60):
        pub.publish("events", json.dumps({"i": i}))
    pub.flush(5000)

    def run_app(stop_after: int) -> list[int]:
        store_client = AMPS.Client(f"seed1-store-{time.monotonic_ns()}")
        store_client.connect(sow_server.uri)
        store_client.logon(5000)
        store = SowBookmarkStore(store_client, "/ADMIN/bookmark_store", "seed1-app")
        app = ha_client("seed1-app", sow_server.uri)
        app.set_bookmark_store(store)
        app.connect_and_logon()
        got = consume_and_discard(app, store, "events", "s1", stop_after)
        store_client.flush(5000)
        app.close()
        store_client.close()
        return got

    assert run_app(25) == list(range(25))
    assert run_app(20) == list(range(25, 45))


def test_sow_recovery_point_adapter_worker_resumes_across_server_kill(tmp_path):
    from tests.support.procserver import ProcServer

    srv = ProcServer.with_config(tmp_path, sow_config)
    try:
        pub = AMPS.Client("rp-publisher")
        pub.connect(srv.uri)
        pub.logon(5000)
        for i in range(80):
            pub.publish("jobs", json.dumps({"i": i}))
        pub.flush(5000)
        pub.close()

        def run_worker(count: int) -> list[int]:
            store_client = AMPS.Client(f"rp-store-{time.monotonic_ns()}")
            store_client.connect(srv.uri)
            store_client.logon(5000)
            adapter = AMPS.SOWRecoveryPointAdapter(store_client, "rp-worker")
            store = AMPS.MemoryBookmarkStore(adapter)
            worker = AMPS.Client("rp-worker")
            worker.set_bookmark_store(store)
            worker.connect(srv.uri)
            worker.logon(5000)
            got = consume_and_discard(worker, store, "jobs", "rp-sub", count)
            worker.close()  # the adapter's last update goes out before the store client closes
            store_client.flush(5000)
            store_client.close()
            return got

        assert run_worker(30) == list(range(30))
        assert run_worker(10) == list(range(30, 40))
        srv.kill()
        srv.start()
        assert run_worker(10) == list(range(40, 50))
    finally:
        srv.stop()


def test_skip_n_pages_after_ordering(sow_clients):
    c = sow_clients()
    for i in range(10):
        c.publish("orders", json.dumps({"id": i, "px": i}))
    c.flush(5000)
    cmd = AMPS.Command("sow").set_topic("orders").set_order_by("/px DESC").set_top_n(3)
    cmd.set_options("skip_n=2")  # the Python client has no skip_n setter: it rides in options
    got = [json.loads(m.get_data())["px"] for m in c.execute(cmd) if m.get_command() == "sow"]
    assert got == [7, 6, 5]


def test_missing_sow_file_is_rebuilt_from_the_log(tmp_path):
    import shutil

    from tests.support.procserver import ProcServer

    srv = ProcServer.with_config(tmp_path, sow_config)
    try:
        c = AMPS.Client("rebuild-writer")
        c.connect(srv.uri)
        c.logon(5000)
        for i in range(50):
            c.publish("orders", json.dumps({"id": i % 20, "v": i}))
        c.sow_delete("orders", "/id >= 15", 5000)
        c.flush(5000)
        c.close()
        srv.stop()
        shutil.rmtree(tmp_path / "data" / "sow")  # the SOW files are gone
        srv.start()
        r = AMPS.Client("rebuild-reader")
        r.connect(srv.uri)
        r.logon(5000)
        expected = {i: (40 + i if i < 10 else 20 + i) for i in range(15)}  # last write per id
        assert {x["id"]: x["v"] for _, x in query(r, "orders")} == expected
        r.close()
    finally:
        srv.stop()


def test_a_damaged_sow_file_is_moved_aside_and_rebuilt_from_the_log(tmp_path):
    import glob

    from tests.support.procserver import ProcServer

    srv = ProcServer.with_config(tmp_path, sow_config)
    try:
        c = store_client(srv.uri, "damage-writer")
        for i in range(50):
            c.publish("orders", json.dumps({"id": i % 20, "v": i}))
        c.publish_flush(10000)
        c.close()
        srv.kill()
        envs = glob.glob(str(tmp_path / "data" / "sow" / "*.lmdb"))
        for env in envs:  # every SOW environment is garbage now
            with open(f"{env}/data.mdb", "wb") as f:
                f.write(b"\xde\xad" * 8192)
        srv.start()
        r = AMPS.Client("damage-reader")
        r.connect(srv.uri)
        r.logon(5000)
        expected = {i: (40 + i if i < 10 else 20 + i) for i in range(20)}  # last write per id
        assert {x["id"]: x["v"] for _, x in query(r, "orders")} == expected
        r.close()
        assert len(glob.glob(str(tmp_path / "data" / "sow" / "*.damaged-*"))) == len(envs)
    finally:
        srv.stop()


def test_ha_client_sow_and_subscribe_is_rerun_after_failover(tmp_path):
    from tests.support.procserver import ProcServer

    srv = ProcServer.with_config(tmp_path, sow_config)
    try:
        pub = AMPS.Client("failover-pub")
        pub.connect(srv.uri)
        pub.logon(5000)
        pub.publish("orders", json.dumps({"id": 1, "v": 1}))
        pub.flush(5000)
        pub.close()
        ha = ha_client("failover-sub", srv.uri)
        ha.connect_and_logon()
        events = []
        second_query = threading.Event()

        def on(m):
            events.append((m.get_command(), m.get_data()))
            ends = [i for i, e in enumerate(events) if e[0] == "group_end"]
            if len(ends) >= 2 and any(e[0] in ("sow", "publish") and json.loads(e[1])["id"] == 2
                                      for e in events[ends[0] + 1:]):
                second_query.set()

        ha.sow_and_subscribe(on, "orders", timeout=5000)
        srv.kill()
        srv.start()
        pub = AMPS.Client("failover-pub-2")
        pub.connect(srv.uri)
        pub.logon(5000)
        pub.publish("orders", json.dumps({"id": 2, "v": 2}))
        pub.flush(5000)
        assert second_query.wait(15), events
        # The re-sent sow_and_subscribe ran the query again: a second group with the record
        # that survived the kill, then id 2 (in that group or live after it).
        begins = [i for i, e in enumerate(events) if e[0] == "group_begin"]
        assert len(begins) == 2
        after = events[begins[1]:]
        ids = [json.loads(d)["id"] for c_, d in after if c_ in ("sow", "publish")]
        assert ids[0] == 1 and 2 in ids
        assert after[1][0] == "sow"
        pub.close()
        ha.close()
    finally:
        srv.stop()


def test_store_publish_with_a_bad_sow_key_reaches_the_failed_write_handler(sow_server):
    failed = []
    done = threading.Event()

    def on_failed(*args):
        failed.append(" ".join(str(a) for a in args))
        done.set()

    c = store_client(sow_server.uri, "bad-key-store", on_failed)
    c.publish("orders", '{"id":')  # does not parse: no Key /id to read (sow/keys.py)
    c.publish("orders", '{"id":1}')
    assert done.wait(10)
    assert "sow key" in failed[0].lower()
    c.publish_flush(5000)
    assert c.get_unpersisted_count() == 0
    assert [r for _, r in query(c, "orders")] == [{"id": 1}]
    c.close()
