"""Entitlements on what a user reads and deletes, record by record (issue 22; docs/design/beyond-json.md
B.3), through the official Python client: sow_delete by keys or data under a write filter,
regex subscriptions replaying from a bookmark, each topic's select list, paginated and
aggregated queries and subscriptions under a read filter."""

from __future__ import annotations

import json

import pytest

from tests.support.clients import logged_on
from tests.support.entitlements import ALL, FILTERED, serve, web_config, with_user

AMPS = pytest.importorskip("AMPS")


def test_sow_delete_by_keys_and_by_data_deletes_only_the_records_the_write_filter_admits(tmp_path):
    owner = {"topic": [{"topic": "test", "read": True, "write": "/owner = 'alice'"}]}
    srv = serve(tmp_path, web_config(tmp_path, {"alice": owner, "admin": {"topic": [ALL]}}))
    try:
        alice = logged_on(with_user(srv.uri, "alice"), "alice")
        pub = logged_on(with_user(srv.uri, "admin"), "pub")
        for i, who in ((1, "alice"), (2, "bob"), (3, "alice"), (4, "bob")):
            pub.publish("test", json.dumps({"id": i, "owner": who}))
        pub.publish_flush(5000)
        keys = {json.loads(m.get_data())["id"]: m.get_sow_key()
                for m in pub.sow("test") if m.get_command() == "sow"}

        def left() -> list[int]:
            return sorted(json.loads(m.get_data())["id"] for m in pub.sow("test")
                          if m.get_command() == "sow")

        def deleted(ack) -> tuple[str, int]:
            return ack.get_status(), int(ack.get_sow_deleted())

        # by keys: alice's record 1 goes, bob's record 2 stays; the ack succeeds, counting 1
        ack = alice.sow_delete_by_keys("test", f"{keys[1]},{keys[2]}")
        assert deleted(ack) == ("success", 1)
        assert left() == [2, 3, 4]
        # by data: the stored record decides (bob's record 4, whatever the data says)
        ack = alice.sow_delete_by_data("test", '{"id":4,"owner":"alice"}')
        assert deleted(ack) == ("success", 0)
        assert left() == [2, 3, 4]
        ack = alice.sow_delete_by_data("test", '{"id":3}')
        assert deleted(ack) == ("success", 1)
        assert left() == [2, 4]
        # a user without a write filter deletes whatever the keys name
        assert deleted(pub.sow_delete_by_keys("test", keys[2])) == ("success", 1)
        assert left() == [4]
    finally:
        srv.stop()


def test_regex_bookmark_replay_skips_unentitled_topics_and_applies_each_topics_grant(tmp_path):
    import threading

    doc = {"topic": [{"topic": "orders/a", "read": "/qty > 10", "write": False,
                      "select": "-/,+/n,+/qty"},
                     {"topic": "orders/b", "read": False, "write": False},
                     {"topic": "orders/c", "read": True, "write": False}]}
    xml = web_config(tmp_path, {"alice": doc, "admin": {"topic": [ALL]}}, sow=False).replace(
        "</AMPSConfig>",
        f"<TransactionLog><JournalDirectory>{tmp_path}/journal</JournalDirectory><Topic>"
        "<Name>orders/.*</Name><MessageType>json</MessageType></Topic></TransactionLog></AMPSConfig>")
    srv = serve(tmp_path, xml)
    try:
        pub = logged_on(with_user(srv.uri, "admin"), "pub")

        def publish_round(n: int) -> None:
            for t in "abd":  # d: in no entry of the document, so not readable
                for qty in (5, 50):
                    pub.publish(f"orders/{t}", json.dumps({"n": n, "qty": qty, "secret": t}))
            pub.publish("orders/c", json.dumps({"n": n, "qty": 1, "secret": "c"}))
            pub.publish_flush(5000)

        publish_round(1)  # before the subscription: replayed
        alice = logged_on(with_user(srv.uri, "alice"), "alice")
        got = []
        four = threading.Event()

        def on_message(m) -> None:
            if m.get_command() == "publish":
                got.append((m.get_topic(), json.loads(m.get_data())))
                if len(got) >= 4:
                    four.set()

        alice.execute_async(AMPS.Command("subscribe").set_topic("orders/.*").set_bookmark("0"),
                            on_message)
        publish_round(2)  # after it: delivered once the replay caught up
        pub.publish("orders/c", '{"n":3,"qty":1}')  # the last one: nothing else comes after it
        pub.publish_flush(5000)
        assert four.wait(10), got
        alice.flush(5000)
        assert got[:4] == [("orders/a", {"n": 1, "qty": 50}),
                           ("orders/c", {"n": 1, "qty": 1, "secret": "c"}),
                           ("orders/a", {"n": 2, "qty": 50}),
                           ("orders/c", {"n": 2, "qty": 1, "secret": "c"})]
    finally:
        srv.stop()


def test_a_live_regex_subscription_applies_each_topics_select_list(tmp_path):
    doc = {"topic": [{"topic": "orders/a", "read": True, "write": False, "select": "-/secret"},
                     {"topic": "orders/c", "read": True, "write": False}]}
    srv = serve(tmp_path, web_config(tmp_path, {"alice": doc, "admin": {"topic": [ALL]}}, sow=False))
    try:
        alice = logged_on(with_user(srv.uri, "alice"), "alice")
        pub = logged_on(with_user(srv.uri, "admin"), "pub")
        got = []
        alice.execute_async(AMPS.Command("subscribe").set_topic("orders/.*").set_options("select=[-/n]"),
                            lambda m: got.append((m.get_topic(), json.loads(m.get_data()))))
        for t in "abc":
            pub.publish(f"orders/{t}", json.dumps({"id": 1, "n": 2, "secret": t}))
        pub.publish_flush(5000)
        alice.flush(5000)
        # the entitlement's list first, then the subscriber's; orders/c has none of its own
        assert got == [("orders/a", {"id": 1}), ("orders/c", {"id": 1, "secret": "c"})]
    finally:
        srv.stop()


def test_a_regex_sow_query_applies_each_topics_select_list(tmp_path):
    doc = {"topic": [{"topic": "orders/a", "read": True, "write": False, "select": "-/secret"},
                     {"topic": "orders/c", "read": True, "write": False}]}
    topics = "".join(f"<Topic><Name>orders/{t}</Name><MessageType>json</MessageType><Key>/id</Key>"
                     "<Durability>transient</Durability></Topic>" for t in "ac")
    xml = web_config(tmp_path, {"alice": doc, "admin": {"topic": [ALL]}}, sow=False).replace(
        "</AMPSConfig>", f"<SOW>{topics}</SOW></AMPSConfig>")
    srv = serve(tmp_path, xml)
    try:
        pub = logged_on(with_user(srv.uri, "admin"), "pub")
        for t, i in (("a", 1), ("c", 2), ("a", 3)):
            pub.publish(f"orders/{t}", json.dumps({"id": i, "n": i, "secret": t}))
        pub.publish_flush(5000)
        alice = logged_on(with_user(srv.uri, "alice"), "alice")

        def query(**how) -> list:
            cmd = AMPS.Command("sow").set_topic("orders/.*").set_options("select=[-/n]")
            if "orderby" in how:
                cmd.set_order_by(how["orderby"])
            return [(m.get_topic(), json.loads(m.get_data())) for m in alice.execute(cmd)
                    if m.get_command() == "sow"]

        # each topic in turn, then one ordered result over both: the same select lists
        assert sorted(query(), key=lambda r: r[1]["id"]) == query(orderby="/id") == [
            ("orders/a", {"id": 1}), ("orders/c", {"id": 2, "secret": "c"}), ("orders/a", {"id": 3})]
    finally:
        srv.stop()


def sow_rows(client, cmd) -> list[dict]:
    return [json.loads(m.get_data()) for m in client.execute(cmd) if m.get_command() == "sow"]


def test_paginated_queries_and_subscriptions_page_after_the_read_filter(tmp_path):
    srv = serve(tmp_path, web_config(tmp_path, {"alice": FILTERED, "admin": {"topic": [ALL]}}))
    try:
        pub = logged_on(with_user(srv.uri, "admin"), "pub")
        for i in range(10):
            pub.publish("test", json.dumps({"id": i, "priority": 1 if i % 2 else 2}))
        pub.publish_flush(5000)
        alice = logged_on(with_user(srv.uri, "alice", "pw"), "alice")
        query = AMPS.Command("sow").set_topic("test").set_order_by("/id").set_top_n(2) \
            .set_options("skip_n=1")
        # the readable records are 1, 3, 5, 7, 9: the window skips 1 and keeps two
        assert [d["id"] for d in sow_rows(alice, query)] == [3, 5]
        got = []
        alice.execute_async(
            AMPS.Command("sow_and_subscribe").set_topic("test").set_order_by("/id").set_top_n(2)
            .set_options("skip_n=1,oof"),
            lambda m: got.append((m.get_command(), m.get_reason(), json.loads(m.get_data())))
            if m.get_command() in ("sow", "publish", "oof") else None)
        alice.flush(5000)
        assert [(c, d["id"]) for c, _, d in got] == [("sow", 3), ("sow", 5)]
        del got[:]
        pub.publish("test", '{"id":3,"priority":2}')  # leaves alice's filter: 7 moves in
        pub.publish("test", '{"id":4,"priority":2}')  # never readable: nothing
        pub.publish_flush(5000)
        alice.flush(5000)
        assert sorted(((c, r, d["id"], d["priority"]) for c, r, d in got), key=str) == sorted(
            [("oof", "entitlement", 3, 1), ("publish", "", 7, 1)], key=str)
    finally:
        srv.stop()


def test_aggregated_queries_and_subscriptions_group_only_readable_rows(tmp_path):
    srv = serve(tmp_path, web_config(tmp_path, {"alice": FILTERED, "admin": {"topic": [ALL]}}))
    try:
        pub = logged_on(with_user(srv.uri, "admin"), "pub")
        rows = [(1, "x", 1), (2, "x", 1), (3, "x", 2), (4, "y", 1), (5, "z", 2)]
        for i, g, prio in rows:
            pub.publish("test", json.dumps({"id": i, "g": g, "priority": prio}))
        pub.publish_flush(5000)
        alice = logged_on(with_user(srv.uri, "alice", "pw"), "alice")
        opts = "grouping=[/g],projection=[/g,COUNT(/id) AS /n]"
        counts = {d["g"]: d["n"] for d in sow_rows(
            alice, AMPS.Command("sow").set_topic("test").set_options(opts))}
        assert counts == {"x": 2, "y": 1}  # z only has a record alice may not read
        got = []
        alice.execute_async(
            AMPS.Command("sow_and_subscribe").set_topic("test").set_options(opts + ",oof"),
            lambda m: got.append((m.get_command(), m.get_reason(), json.loads(m.get_data())))
            if m.get_command() in ("sow", "publish", "oof") else None)
        alice.flush(5000)
        del got[:]
        pub.publish("test", '{"id":1,"g":"x","priority":2}')  # x keeps one readable record
        pub.publish("test", '{"id":4,"g":"y","priority":2}')  # y has none left
        pub.publish("test", '{"id":5,"g":"z","priority":2}')  # still unreadable: nothing
        pub.publish_flush(5000)
        alice.flush(5000)
        assert [(c, r, d) for c, r, d in got] == [
            ("publish", "", {"g": "x", "n": 1}), ("oof", "entitlement", {"g": "y", "n": 1})]
    finally:
        srv.stop()


def test_a_regex_sow_delete_checks_each_topic_and_its_write_filter(tmp_path):
    doc = {"topic": [{"topic": "orders/a", "read": True, "write": "/owner = 'alice'"},
                     {"topic": "orders/b", "read": True, "write": True},
                     {"topic": "orders/c", "read": True, "write": False}]}
    topics = "".join(f"<Topic><Name>orders/{t}</Name><MessageType>json</MessageType><Key>/id</Key>"
                     "<Durability>transient</Durability></Topic>" for t in "abc")
    xml = web_config(tmp_path, {"alice": doc, "admin": {"topic": [ALL]}}, sow=False).replace(
        "</AMPSConfig>",
        f"<TransactionLog><JournalDirectory>{tmp_path}/journal</JournalDirectory><Topic>"
        "<Name>orders/.*</Name><MessageType>json</MessageType></Topic></TransactionLog>"
        f"<SOW>{topics}</SOW></AMPSConfig>")
    srv = serve(tmp_path, xml)
    try:
        pub = logged_on(with_user(srv.uri, "admin"), "pub")

        def fill() -> None:
            for t in "abc":
                for i, who in ((1, "alice"), (2, "bob"), (3, "alice")):
                    pub.publish(f"orders/{t}", json.dumps({"id": i, "owner": who}))
            pub.publish_flush(5000)

        def left() -> dict[str, list[int]]:
            out: dict[str, list[int]] = {}
            for m in pub.sow("orders/.*"):
                if m.get_command() == "sow":
                    out.setdefault(m.get_topic(), []).append(json.loads(m.get_data())["id"])
            return {t: sorted(ids) for t, ids in sorted(out.items())}

        fill()
        alice = logged_on(with_user(srv.uri, "alice"), "alice")
        # a: alice's records only; b: everything; c: not writable, left alone
        ack = alice.sow_delete("orders/.*", "1=1")
        assert (ack.get_status(), int(ack.get_sow_deleted())) == ("success", 5)
        assert left() == {"orders/a": [2], "orders/c": [1, 2, 3]}
        fill()
        # by data: the key of {"id":1} in each topic; a's record 1 is alice's, c is not writable
        ack = alice.sow_delete_by_data("orders/.*", '{"id":1}')
        assert int(ack.get_sow_deleted()) == 2
        assert left() == {"orders/a": [2, 3], "orders/b": [2, 3], "orders/c": [1, 2, 3]}
        # a user who may write everything deletes in every topic
        assert int(pub.sow_delete("orders/.*", "/id = 2").get_sow_deleted()) == 3
        assert left() == {"orders/a": [3], "orders/b": [3], "orders/c": [1, 3]}
    finally:
        srv.stop()


def test_a_big_regex_sow_delete_runs_in_steps_with_every_oof(tmp_path):
    import threading

    doc = {"topic": [{"topic": "orders/a", "read": True, "write": "/n < 20"},
                     {"topic": ".*", "read": True, "write": True}]}
    topics = "".join(f"<Topic><Name>orders/{t}</Name><MessageType>json</MessageType><Key>/id</Key>"
                     "<Durability>transient</Durability></Topic>" for t in "ab")
    xml = web_config(tmp_path, {"alice": doc, "admin": {"topic": [ALL]}}, sow=False).replace(
        "</AMPSConfig>", f"<SOW>{topics}</SOW></AMPSConfig>")
    srv = serve(tmp_path, xml)
    try:
        def small_steps() -> None:
            for t in "ab":
                srv.server.sow_service.get(f"orders/{t}").query_chunk = 4  # real steps
        srv.call(small_steps)
        pub = logged_on(with_user(srv.uri, "admin"), "pub")
        for t in "ab":
            for i in range(30):
                pub.publish(f"orders/{t}", json.dumps({"id": i, "n": i}))
        pub.publish_flush(5000)
        oofs: list = []
        cv = threading.Condition()

        def on(m) -> None:
            if m.get_command() == "oof":
                with cv:
                    oofs.append((m.get_topic(), json.loads(m.get_data())["id"]))
                    cv.notify_all()

        pub.execute_async(AMPS.Command("subscribe").set_topic("orders/.*").set_options("oof"), on)
        alice = logged_on(with_user(srv.uri, "alice"), "alice")
        ack = alice.sow_delete("orders/.*", "/n >= 0", 5000)
        assert (int(ack.get_sow_deleted()), int(ack.get_matches())) == (50, 50)
        with cv:
            assert cv.wait_for(lambda: len(oofs) == 50, 10)
        assert sorted(oofs) == sorted([("orders/a", i) for i in range(20)]
                                      + [("orders/b", i) for i in range(30)])
        left = [json.loads(m.get_data())["id"] for m in pub.sow("orders/.*") if m.get_command() == "sow"]
        assert sorted(left) == list(range(20, 30))
    finally:
        srv.stop()
