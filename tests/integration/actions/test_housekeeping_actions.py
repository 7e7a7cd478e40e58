"""The housekeeping actions on a real server, driven by the official Python client and the
test clock: archived and compressed journal segments stay in the transaction log (a bookmark
replay from EPOCH and a queue read them, before and after a restart), and remove-files /
compress-files act on the files a pattern names, before the action's next step runs."""

from __future__ import annotations

import gzip
import json
import os
import threading
import urllib.request

import AMPS
import pytest

from amps_emulator.config import loads_config
from amps_emulator.protocol.bookmarks import format_timestamp
from amps_emulator.server.core.clock import TestClock
from amps_emulator.server.ops.stats import tree
from amps_emulator.server.services import queue_service
from tests.support.clients import Collector
from tests.support.journals import SlowGunzip, compressing_config
from tests.support.servers import ServerThread, until

N = 1500  # ~300 KB of journal: several 64 KB segments
QUEUED = 40


def config(d) -> str:
    return compressing_config(d, "housekeeping-test", """
<SOW><Queue><Name>work-q</Name><MessageType>json</MessageType><UnderlyingTopic>work</UnderlyingTopic>
  </Queue></SOW>""", f"""<Actions>
  <Action>
    <On><Module>amps-action-on-admin</Module><Options><Path>housekeep</Path></Options></On>
    <Do><Module>amps-action-do-archive-journal</Module><Options><Age>1h</Age></Options></Do>
    <Do><Module>amps-action-do-compress-journal</Module><Options><Age>1h</Age></Options></Do>
    <Do><Module>amps-action-do-publish-message</Module>
      <Options><Topic>housekeeping-done</Topic><MessageType>json</MessageType><Data>{{"step":"journal"}}</Data></Options></Do>
  </Action>
  <Action>
    <On><Module>amps-action-on-admin</Module><Options><Path>logs</Path></Options></On>
    <Do><Module>amps-action-do-compress-files</Module>
      <Options><Age>1d</Age><Pattern>{d}/logs/*.log</Pattern><Keep>1</Keep></Options></Do>
    <Do><Module>amps-action-do-remove-files</Module>
      <Options><Age>1d</Age><Pattern>{d}/logs/*.gz</Pattern><Count>1</Count></Options></Do>
    <Do><Module>amps-action-do-publish-message</Module>
      <Options><Topic>housekeeping-done</Topic><MessageType>json</MessageType><Data>{{"step":"files"}}</Data></Options></Do>
  </Action>
</Actions>""")


class Replay:
    """The ``i`` of every message a subscription got, and its completed ack."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.completed = threading.Event()

    def __call__(self, m) -> None:
        if m.get_command() == "ack" and m.get_ack_type() == "completed":
            self.completed.set()
        elif m.get_command() in ("p", "publish"):
            self.ids.append(json.loads(m.get_data())["i"])


def take(m) -> int | None:
    """A queue message's ``i``, acknowledged (so the next one comes)."""
    if m.get_command() not in ("p", "publish"):
        return None
    m.ack()
    return json.loads(m.get_data())["i"]


def start(d):
    return ServerThread(loads_config(config(d), "housekeeping.xml"), timebase=TestClock()).start()


def client(srv, name: str):
    c = AMPS.Client(name)
    c.connect(srv.uri)
    c.logon(5000)
    return c


def replay_from_epoch(c) -> list[int]:
    r = Replay()
    c.execute_async(AMPS.Command("subscribe").set_topic("orders").set_bookmark("0")
                    .add_ack_type("completed").set_timeout(10000), r)
    assert r.completed.wait(30)
    return r.ids


def run_admin_action(srv, path: str, c) -> None:
    """Run the on-admin action ``path`` and wait for the message its last step publishes."""
    done = Collector()
    c.subscribe(done, "housekeeping-done")
    with urllib.request.urlopen(srv.admin_uri + f"/amps/administrator/actions/{path}",
                                timeout=10) as r:
        assert r.status == 200
    assert len(done.wait_for(1, 30)) == 1


def test_archived_and_compressed_journals_still_replay_and_feed_queues(tmp_path):
    pad = "x" * 150
    srv = start(tmp_path)
    try:
        c = client(srv, "publisher")
        for i in range(QUEUED):
            c.publish("work", json.dumps({"i": i}))
        for i in range(N):
            c.publish("orders", json.dumps({"i": i, "pad": pad}))
        c.flush(5000)
        segments = srv.call(lambda: len(srv.server.txlog.journal.segments))
        assert segments > 3
        srv.http("/emulator/clock/advance?seconds=7200", "POST")  # all but the newest: 2h old
        c.publish("orders", json.dumps({"i": N, "pad": pad}))  # written now: stays as it is
        c.flush(5000)
        journal = srv.server.txlog.journal
        # (a segment just rolled is taken once its file is closed and its summary written)
        assert until(lambda: srv.call(lambda: all(s.fd < 0 for s in journal.segments[:-1])
                                      and not journal._summq.pending))
        sealed = srv.call(lambda: len(journal.segments) - 1)
        run_admin_action(srv, "housekeep", c)
        archived = sorted(os.listdir(tmp_path / "archive"))
        gz = [n for n in archived if n.endswith(".journal.gz")]
        assert len(gz) == sealed >= segments - 1
        assert not any(n.endswith(".journal") for n in archived)
        with gzip.open(tmp_path / "archive" / gz[0]) as f:
            assert f.read(8) == b"AMPSJRNL"
        left = [n for n in os.listdir(tmp_path / "journal") if n.endswith(".journal")]
        assert len(left) == 1  # the one being written
        assert replay_from_epoch(c) == list(range(N + 1))
        c.close()
    finally:
        srv.stop()
    srv = start(tmp_path)
    try:
        c = client(srv, "after-restart")
        assert replay_from_epoch(c) == list(range(N + 1))
        work = Collector(take)
        c.subscribe(work, "work-q")
        assert work.wait_until(lambda items: len([i for i in items if i is not None]) >= QUEUED, 20)
        assert sorted(i for i in work.items if i is not None) == list(range(QUEUED))
        c.close()
    finally:
        srv.stop()


def test_compress_and_remove_files_before_the_next_step(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    for i in range(3):
        (logs / f"app{i}.log").write_text(f"log {i}\n" * 100)
        t = os.path.getmtime(logs / f"app{i}.log") - 3600 * (3 - i)  # app0 the oldest
        os.utime(logs / f"app{i}.log", (t, t))
    os.symlink(tmp_path / "elsewhere.log", logs / "link.log")
    (tmp_path / "elsewhere.log").write_text("not mine\n")
    srv = start(tmp_path)
    try:
        c = client(srv, "operator")
        srv.http("/emulator/clock/advance?seconds=172800", "POST")  # two days on
        run_admin_action(srv, "logs", c)
        # app0 and app1 compressed (app2 kept), then the oldest .gz (app0's) removed
        assert sorted(os.listdir(logs)) == ["app1.log.gz", "app2.log", "link.log"]
        with gzip.open(logs / "app1.log.gz", "rt") as f:
            assert f.read() == "log 1\n" * 100
        assert (tmp_path / "elsewhere.log").read_text() == "not mine\n"
        c.close()
    finally:
        srv.stop()


def test_a_snapshot_carries_the_archived_segments(tmp_path):
    srv = start(tmp_path)
    try:
        c = client(srv, "publisher")
        for i in range(N):
            c.publish("orders", json.dumps({"i": i, "pad": "y" * 150}))
        c.flush(5000)
        srv.http("/emulator/clock/advance?seconds=7200", "POST")
        journal = srv.server.txlog.journal
        assert until(lambda: srv.call(lambda: all(s.fd < 0 for s in journal.segments[:-1])
                                      and not journal._summq.pending))
        run_admin_action(srv, "housekeep", c)
        assert len(os.listdir(tmp_path / "archive")) > 2
        with urllib.request.urlopen(srv.admin_uri + "/emulator/snapshot", timeout=30) as r:
            archive = r.read()
        c.publish("orders", json.dumps({"i": N}))  # after the snapshot: gone once restored
        c.flush(5000)
        req = urllib.request.Request(srv.admin_uri + "/emulator/snapshot", method="POST",
                                     data=archive)
        with urllib.request.urlopen(req, timeout=30) as r:
            assert r.status == 200
        assert os.listdir(tmp_path / "archive") == []  # restored into the journal directory
        c = client(srv, "after-restore")
        assert replay_from_epoch(c) == list(range(N))
        c.close()
    finally:
        srv.stop()


def compressed_log(srv, c, n: int) -> str:
    """``n`` + 1 messages on ``orders`` (``i`` 0..n), all but the newest segment archived
    and compressed; returns a timestamp bookmark between the first 100 and the others."""
    pad = "x" * 150
    since = ""
    for i in range(n):
        if i == 100:
            c.flush(5000)
            srv.http("/emulator/clock/advance?seconds=60", "POST")
            since = format_timestamp(int(srv.call(srv.server.timebase.time) * 1_000_000))
        c.publish("orders", json.dumps({"i": i, "pad": pad}))
    c.flush(5000)
    srv.http("/emulator/clock/advance?seconds=7200", "POST")
    c.publish("orders", json.dumps({"i": n, "pad": pad}))
    c.flush(5000)
    journal = srv.server.txlog.journal
    assert until(lambda: srv.call(lambda: all(s.fd < 0 for s in journal.segments[:-1])
                                  and not journal._summq.pending))
    run_admin_action(srv, "housekeep", c)
    assert srv.call(lambda: journal.segments[0].path.endswith(".journal.gz")
                    and journal.segments[0].last_position > 100)
    return since


@pytest.mark.parametrize("since", ["epoch", "time", "range", "list"])
def test_a_replay_waits_for_a_compressed_segment_without_holding_the_others(tmp_path, monkeypatch,
                                                                           since):
    srv = start(tmp_path)
    slow = SlowGunzip()
    try:
        c = client(srv, "publisher")
        at_time = compressed_log(srv, c, N)
        slow.install(monkeypatch)
        r = Replay()
        sub = client(srv, "replayer")
        bookmark = {"epoch": "0", "time": at_time, "range": f"[{at_time}:0|1|]",
                    "list": f"{at_time},0|1|"}[since]
        sub.execute_async(AMPS.Command("subscribe").set_topic("orders").set_bookmark(bookmark)
                          .add_ack_type("completed").set_timeout(10000), r)
        # the replay reached the oldest segment (a timestamp bookmark: to find where it starts)
        assert slow.entered.wait(30)
        # meanwhile another client publishes and is answered (its persisted acks, the flush)
        for i in range(N + 1, N + 6):
            c.publish("orders", json.dumps({"i": i}))
        c.flush(5000)
        # and the statistics the admin interface records are taken (the log's time span)
        recorded = srv.call(lambda: tree(srv.server, srv.server.admin.sampler))
        span = recorded["amps"]["instance"]["transaction_log"]
        assert "" < span["min_timestamp"] < span["max_timestamp"]
        assert not slow.release.is_set() and slow.calls == 1 and r.ids == []
        slow.release.set()
        assert r.completed.wait(30)
        first = 0 if since == "epoch" else 100
        last = N if since == "range" else N + 5  # (a range stops where the log was)
        assert until(lambda: len(r.ids) >= last + 1 - first)
        assert r.ids == list(range(first, last + 1))  # every record in order, then the live ones
        sub.close()
        c.close()
    finally:
        slow.release.set()
        srv.stop()


class SowQuery:
    """The ``i`` of every record a sow query returned, and its group_end."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.done = threading.Event()

    def __call__(self, m) -> None:
        if m.get_command() == "sow":
            self.ids.append(json.loads(m.get_data())["i"])
        elif m.get_command() == "group_end":
            self.done.set()


@pytest.mark.parametrize("read", ["delivery", "sow"])
def test_a_queue_waits_for_a_compressed_segment_without_holding_the_others(tmp_path, monkeypatch,
                                                                           read):
    monkeypatch.setattr(queue_service, "CACHE_RECORDS", 4)  # queue reads go to the journal
    srv = start(tmp_path)
    slow = SlowGunzip()
    try:
        c = client(srv, "publisher")
        for i in range(QUEUED):
            c.publish("work", json.dumps({"i": i}))
        compressed_log(srv, c, N)  # the queued messages are in the oldest, compressed segment
        slow.install(monkeypatch)
        work, query = Collector(take), SowQuery()
        consumer = client(srv, "consumer")
        if read == "delivery":
            consumer.subscribe(work, "work-q")
        else:
            # (the client waits for the query's processed ack: the query runs meanwhile)
            threading.Thread(target=consumer.execute_async, daemon=True,
                             args=(AMPS.Command("sow").set_topic("work-q"), query)).start()
        assert slow.entered.wait(30)  # the first message read reached the compressed segment
        # meanwhile another client publishes and is answered
        for i in range(N + 1, N + 6):
            c.publish("orders", json.dumps({"i": i}))
        c.flush(5000)
        assert not slow.release.is_set() and slow.calls == 1
        assert work.items == [] and query.ids == [] and not query.done.is_set()
        slow.release.set()
        if read == "delivery":
            assert work.wait_until(lambda items: len([i for i in items if i is not None]) >= QUEUED, 20)
            assert [i for i in work.items if i is not None] == list(range(QUEUED))  # all, in order
        else:
            assert query.done.wait(20)
            assert query.ids == list(range(QUEUED))
        consumer.close()
        c.close()
    finally:
        slow.release.set()
        srv.stop()
