"""Bookmark replay through the official client, with live publishes racing the replay.

Every test checks the exact sequence a subscriber receives: no gap, no duplicate, replay
and live cut over in log order.
"""

from __future__ import annotations

import json
import threading
import time

import AMPS
import pytest

from amps_emulator.journal.segment import FileOps
from tests.support.clients import store_client

TOPIC = "tl"
FIRST = 300  # messages published before the subscription
RACE = 700  # messages published while the subscription replays


class Recorder:
    """Collects (i, bookmark, ts) of deliveries and notes the completed ack."""

    def __init__(self) -> None:
        self.items: list[tuple[int, str, str]] = []
        self.completed = threading.Event()
        self.acks: list[tuple[str, str]] = []
        self._cv = threading.Condition()

    def __call__(self, m) -> None:
        cmd = m.get_command()
        if cmd == "ack":
            self.acks.append((m.get_ack_type(), m.get_bookmark()))
            if m.get_ack_type() == "completed":
                self.completed.set()
            return
        if cmd in ("p", "publish"):
            with self._cv:
                self.items.append((json.loads(m.get_data())["i"], m.get_bookmark(),
                                   m.get_timestamp()))
                self._cv.notify_all()

    def wait_for_i(self, last: int, timeout: float = 20.0) -> bool:
        deadline = time.monotonic() + timeout
        with self._cv:
            while not any(i == last for i, _, _ in self.items):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(left)
        return True

    @property
    def ids(self) -> list[int]:
        return [i for i, _, _ in self.items]


def publish_range(client, lo: int, hi: int, topic: str = TOPIC) -> None:
    for i in range(lo, hi):
        client.publish(topic, json.dumps({"i": i, "g": i % 3}))
        if i % 50 == 0:
            client.publish("noise", json.dumps({"i": -i}))  # other topics share the log


@pytest.fixture
def history(client_factory):
    """FIRST messages in the log; returns (publisher, {i: (bookmark, ts)})."""
    pub = client_factory("history-publisher")
    publish_range(pub, 0, FIRST)
    pub.flush(10000)
    reader = client_factory()
    rec = Recorder()
    cmd = (AMPS.Command("subscribe").set_topic(TOPIC).set_bookmark("0")
           .set_options("timestamp").add_ack_type("completed"))
    reader.execute_async(cmd, rec)
    assert rec.completed.wait(20)
    assert rec.ids == list(range(FIRST))
    return pub, {i: (bm, ts) for i, bm, ts in rec.items}


def race(client_factory, pub, bookmark: str, flt: str | None, options: str = "") -> Recorder:
    """Subscribe at ``bookmark`` while ``pub`` publishes RACE more messages."""
    sub = client_factory()
    rec = Recorder()
    publisher = threading.Thread(target=publish_range, args=(pub, FIRST, FIRST + RACE))
    publisher.start()
    cmd = AMPS.Command("subscribe").set_topic(TOPIC).set_bookmark(bookmark)
    if flt:
        cmd.set_filter(flt)
    if options:
        cmd.set_options(options)
    cmd.add_ack_type("completed")
    sub.execute_async(cmd, rec)
    publisher.join()
    pub.flush(10000)
    last = max(i for i in range(FIRST + RACE) if flt is None or i % 3 == 0)
    assert rec.wait_for_i(last), f"never saw {last}; got {len(rec.items)}"
    assert rec.completed.is_set()
    return rec


def expected(start_i: int, flt_g0: bool = True) -> list[int]:
    return [i for i in range(start_i, FIRST + RACE) if not flt_g0 or i % 3 == 0]


def test_replay_from_epoch_with_filter_and_racing_publishes(client_factory, history):
    pub, _ = history
    rec = race(client_factory, pub, "0", "/g = 0")
    assert rec.ids == expected(0)


def test_replay_from_now_sees_only_new_messages(client_factory, history):
    pub, _ = history
    sub = client_factory()
    rec = Recorder()
    cmd = (AMPS.Command("subscribe").set_topic(TOPIC).set_bookmark("0|1|").set_filter("/g = 0")
           .set_timeout(5000))  # execute_async then waits for the processed ack
    sub.execute_async(cmd, rec)
    publish_range(pub, FIRST, FIRST + 30)
    pub.flush(5000)
    assert rec.wait_for_i(FIRST + 27)
    assert rec.ids == [i for i in range(FIRST, FIRST + 30) if i % 3 == 0]


def test_replay_from_a_bookmark_resumes_right_after_it(client_factory, history):
    pub, marks = history
    rec = race(client_factory, pub, marks[120][0], "/g = 0")
    assert rec.ids == expected(121)


def test_replay_from_a_comma_list_starts_at_the_earliest(client_factory, history):
    pub, marks = history
    other = client_factory("second-publisher")
    other.publish(TOPIC, json.dumps({"i": -1, "g": 0}))  # a second publisher's bookmark
    other.flush(5000)
    probe = client_factory()
    rec0 = Recorder()
    probe.execute_async(AMPS.Command("subscribe").set_topic(TOPIC).set_bookmark(marks[FIRST - 1][0])
                        .add_ack_type("completed"), rec0)
    assert rec0.completed.wait(10) and rec0.ids == [-1]
    second_bm = rec0.items[0][1]
    rec = race(client_factory, pub, f"{second_bm},{marks[60][0]}", "/g = 0")
    # Starts after the earliest of the two (publisher 1's #60) and skips nothing after it,
    # including the second publisher's message.
    assert rec.ids == [i for i in range(61, FIRST) if i % 3 == 0] + [-1] + expected(FIRST)


def test_replay_from_a_timestamp(client_factory, history):
    pub, marks = history
    ts = marks[150][1]
    assert ts and ts.endswith("Z")
    rec = race(client_factory, pub, ts, "/g = 0")
    from_ts = [i for i in range(FIRST) if marks[i][1] >= ts]
    assert rec.ids == [i for i in from_ts if i % 3 == 0] + expected(FIRST)
    assert 150 in from_ts and rec.ids[0] <= 150


def test_replay_over_a_range_ends_with_completed(client_factory, history):
    _, marks = history
    sub = client_factory()
    rec = Recorder()
    rng = f"[{marks[30][0]}:{marks[90][0]}]"
    cmd = (AMPS.Command("subscribe").set_topic(TOPIC).set_bookmark(rng).set_filter("/g = 0")
           .add_ack_type("completed"))
    sub.execute_async(cmd, rec)
    assert rec.completed.wait(10)
    assert rec.ids == [i for i in range(30, 91) if i % 3 == 0]
    half_open = Recorder()
    cmd = (AMPS.Command("subscribe").set_topic(TOPIC).set_bookmark(f"({marks[30][0]}:{marks[90][0]})")
           .add_ack_type("completed"))
    sub.execute_async(cmd, half_open)
    assert half_open.completed.wait(10)
    assert half_open.ids == list(range(31, 90))


def test_top_n_limits_the_replay(client_factory, history):
    _, _ = history
    sub = client_factory()
    rec = Recorder()
    cmd = (AMPS.Command("subscribe").set_topic(TOPIC).set_bookmark("0").set_top_n(5)
           .add_ack_type("completed"))
    sub.execute_async(cmd, rec)
    assert rec.completed.wait(10)
    assert rec.ids == [0, 1, 2, 3, 4]


def test_unknown_bookmark_starts_now_or_as_asked(client_factory, history):
    pub, _ = history
    unknown = "123456789|42|"
    sub = client_factory()
    now_rec, epoch_rec = Recorder(), Recorder()
    sub.execute_async(AMPS.Command("subscribe").set_topic(TOPIC).set_bookmark(unknown)
                      .add_ack_type("completed"), now_rec)
    sub.execute_async(AMPS.Command("subscribe").set_topic(TOPIC).set_bookmark(unknown)
                      .set_options("bookmark_not_found=epoch").add_ack_type("completed"), epoch_rec)
    assert now_rec.completed.wait(10) and epoch_rec.completed.wait(10)
    pub.publish(TOPIC, json.dumps({"i": 5000, "g": 2}))
    pub.flush(5000)
    assert now_rec.wait_for_i(5000) and epoch_rec.wait_for_i(5000)
    assert now_rec.ids == [5000]
    assert epoch_rec.ids == list(range(FIRST)) + [5000]
    with pytest.raises(AMPS.InvalidBookmarkException):
        sub.execute(AMPS.Command("subscribe").set_topic(TOPIC).set_bookmark(unknown)
                    .set_options("bookmark_not_found=fail"))


def test_bad_bookmark_text_is_invalid_bookmark(client_factory):
    c = client_factory()
    with pytest.raises(AMPS.InvalidBookmarkException):
        c.execute(AMPS.Command("subscribe").set_topic(TOPIC).set_bookmark("abc|def"))


def test_live_deliveries_carry_bookmarks_and_logon_ack_has_name_hash(client_factory, collector):
    c = client_factory("bm-publisher")
    stream = c.subscribe("live-bm", timeout=5000).timeout(5000)
    c.publish("live-bm", '{"a":1}')
    msg = next(iter(stream))
    publisher_id, seq, empty = msg.get_bookmark().split("|")
    assert publisher_id == c.get_name_hash() and seq.isdigit() and empty == ""
    stream.close()


def test_pause_then_resume(client_factory, history):
    sub = client_factory()
    rec = Recorder()
    sub.execute_async(AMPS.Command("subscribe").set_topic(TOPIC).set_bookmark("0")
                      .set_sub_id("paused-sub").set_options("pause").set_timeout(5000), rec)
    probe = Recorder()
    sub.execute_async(AMPS.Command("subscribe").set_topic(TOPIC).set_bookmark("0").set_top_n(1)
                      .add_ack_type("completed"), probe)
    assert probe.completed.wait(10)  # a later command was fully processed: nothing was paused-delivered
    assert rec.items == []
    sub.execute_async(AMPS.Command("subscribe").set_sub_id("paused-sub").set_topic(TOPIC)
                      .set_options("resume").set_timeout(5000), lambda m: None)
    assert rec.wait_for_i(FIRST - 1)
    assert rec.ids == list(range(FIRST))


def test_bookmark_subscription_to_an_unrecorded_topic_fails(server_factory):
    import AMPS as _amps

    srv = server_factory(txlog_topics=("^only-this$",))
    c = _amps.Client("unrecorded")
    c.connect(srv.uri)
    c.logon(5000)
    try:
        with pytest.raises(_amps.AMPSException) as ei:
            c.execute(_amps.Command("subscribe").set_topic("elsewhere").set_bookmark("0"))
        assert "tx" in str(ei.value).lower() or "log" in str(ei.value).lower()
        c.subscribe(lambda m: None, "elsewhere", timeout=5000)  # plain subscriptions still work
    finally:
        c.close()


def test_bookmark_subscription_gets_persisted_acks_that_advance_while_idle(server, history):
    from tests.support.raw import RawClient

    _, marks = history
    r = RawClient(server.port)
    r.logon("store-backed-subscriber")
    r.send({"c": "subscribe", "t": TOPIC, "cid": "b1", "sub_id": "b1", "bookmark": "0",
            "a": "processed,persisted", "filter": "/g = 99"})  # matches nothing: an idle sub
    acks = []
    while not acks:
        h, _ = r.recv_frame()
        if h.get("a") == "persisted":
            acks.append(h)
    # After the replay: persisted up to the end of the log as it was.
    assert acks[0]["sub_id"] == "b1" and acks[0]["status"] == "success"
    last_bm = acks[0]["bm"]
    assert last_bm.split("|")[1].isdigit()
    assert int(last_bm.split("|")[1]) >= int(marks[FIRST - 1][0].split("|")[1])
    # Traffic on another topic moves the idle subscription's persisted point on (within ~1 s).
    other = RawClient(server.port)
    other.logon("other-topic-publisher")
    other.send({"c": "p", "t": "unrelated"}, b'{"x":1}')
    while True:
        h, _ = r.recv_frame(timeout=5)
        if h.get("a") == "persisted" and h["bm"] != last_bm:
            break
    assert int(h["bm"].split("|")[1]) > int(last_bm.split("|")[1])
    other.close()
    r.close()


def test_retention_removes_old_segments_but_never_what_a_replay_is_reading(tmp_path):
    from amps_emulator.config import loads_config
    from tests.support.servers import ServerThread, config_xml

    xml = config_xml(tmp_path).replace(
        "<Durability>group</Durability>",
        "<Durability>group</Durability><JournalSize>64KB</JournalSize>"
        "<RetentionSize>256KB</RetentionSize>")
    srv = ServerThread(loads_config(xml, "retention.xml")).start()
    try:
        c = AMPS.Client("retention-publisher")
        c.connect(srv.uri)
        c.logon(5000)
        pad = "x" * 200
        for i in range(3000):  # ~750 KB: a dozen 64 KB segments
            c.publish("ret", json.dumps({"i": i, "pad": pad}))
        c.flush(5000)
        journal = srv.server.txlog.journal
        before = srv.call(lambda: len(journal.segments))
        assert before > 8
        # A paused replay from EPOCH pins the oldest segment.
        r = Recorder()
        c.execute_async(AMPS.Command("subscribe").set_topic("ret").set_bookmark("0")
                        .set_sub_id("pinning").set_options("pause").set_timeout(5000), r)
        kept = srv.call(lambda: srv.server.txlog.enforce_retention())
        assert kept.removed == () and kept.blocked_by_pin is not None
        c.unsubscribe("pinning")
        c.flush(5000)
        result = srv.call(lambda: srv.server.txlog.enforce_retention())
        assert result.removed, result
        after = srv.call(lambda: len(journal.segments))
        assert after < before
        # at most the limit plus the oldest segment kept; a segment may pass JournalSize by
        # the run of publishes written into it (longer runs on a busy machine)
        sizes = srv.call(lambda: [s.size for s in journal.segments])
        assert sum(sizes) <= 256 * 1024 + max(sizes)
        # What is left still replays in order, from the oldest retained message.
        tail = Recorder()
        c.execute_async(AMPS.Command("subscribe").set_topic("ret").set_bookmark("0")
                        .add_ack_type("completed"), tail)
        assert tail.completed.wait(10)
        assert tail.ids == list(range(tail.ids[0], 3000)) and tail.ids[0] > 0
        c.close()
    finally:
        srv.stop()


def test_a_journal_write_failure_is_reported_on_the_persisted_ack(server):
    import errno

    failures = []
    got_all = threading.Event()

    def on_failed(*args):
        failures.append(args)
        if len(failures) >= 3:
            got_all.set()

    c = store_client(server.uri, "failing-writes", on_failed)
    c.publish("fw", '{"ok":1}')
    c.publish_flush(5000)

    def break_disk():
        def boom(limit=None):
            raise OSError(errno.ENOSPC, "No space left on device")
        server.server.txlog.journal.flush = boom

    server.call(break_disk)
    for i in range(3):
        c.publish("fw", json.dumps({"lost": i}))
    assert got_all.wait(10), failures
    assert all("tx store failure" in " ".join(str(a) for a in f) for f in failures)
    # failed writes leave the store, as with AMPS (the client drops them just after the
    # handler returns: publish_flush waits for that, and times out if they stayed)
    c.publish_flush(5000)
    assert c.get_unpersisted_count() == 0
    c.close()


def test_live_option_delivers_before_persistence(server_factory):
    srv = server_factory(durability="group")
    gate = threading.Event()

    class HeldSync(FileOps):
        def fdatasync(self, fd: int) -> None:
            gate.wait(10)  # hold every fsync until the test says so
            super().fdatasync(fd)

    srv.call(lambda: setattr(srv.server.txlog.journal, "file_ops", HeldSync()))
    c = AMPS.Client("live-sub")
    c.connect(srv.uri)
    c.logon(5000)
    live, durable = Recorder(), Recorder()
    c.execute_async(AMPS.Command("subscribe").set_topic("lv").set_bookmark("0|1|")
                    .set_options("live").set_timeout(5000), live)
    c.execute_async(AMPS.Command("subscribe").set_topic("lv").set_bookmark("0|1|")
                    .set_timeout(5000), durable)
    c.publish("lv", json.dumps({"i": 1}))
    assert live.wait_for_i(1, timeout=5)
    assert durable.items == []  # not on disk yet: a durable subscriber waits
    gate.set()
    assert durable.wait_for_i(1, timeout=5)
    c.close()


def test_a_rate_limited_replay_paces_its_messages(client_factory):
    pub = client_factory("rate-publisher")
    publish_range(pub, 0, 12, topic="paced")
    pub.flush(10000)
    reader = client_factory()
    rec = Recorder()
    started = time.monotonic()
    reader.execute_async(AMPS.Command("subscribe").set_topic("paced").set_bookmark("0")
                         .set_options("rate=10").add_ack_type("completed"), rec)
    assert rec.wait_for_i(11)
    assert rec.ids == list(range(12))
    # ten a second: the twelfth goes 1.1 s after the first (a lower bound only)
    assert time.monotonic() - started >= 1.0
    with pytest.raises(AMPS.AMPSException):
        reader.execute(AMPS.Command("subscribe").set_topic("paced").set_bookmark("0")
                       .set_options("rate=fast"))
    with pytest.raises(AMPS.AMPSException):
        reader.execute(AMPS.Command("subscribe").set_topic("paced").set_bookmark("0")
                       .set_options("live,rate=10"))
