"""Historical SOW queries over a compressed transaction log, on a real server driven by the
official Python client and the test clock: when the query must read the log in a compressed
segment (when the message its bookmark names was logged; where a historical
``sow_and_subscribe`` replays from), the segment is decompressed in the journal cache's worker
thread, never on the event loop: other clients are served meanwhile, and the query's results
and its subscription's messages are what they are over an uncompressed log, each message
once."""

from __future__ import annotations

import json
import threading

import AMPS
import pytest

from amps_emulator.config import loads_config
from amps_emulator.protocol.bookmarks import format_timestamp
from amps_emulator.server.core.clock import TestClock
from tests.support.clients import Collector
from tests.support.journals import SlowGunzip, compressing_config
from tests.support.servers import ServerThread, until

N = 1500  # ~300 KB of journal: several 64 KB segments
KEYS = 20
PAD = "x" * 150


def config(d) -> str:
    return compressing_config(d, "sow-history-compressed", f"""
<SOW><Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
  <FileName>{d}/sow/%n.sow</FileName>
  <History><Window>1d</Window><Granularity>0s</Granularity></History></Topic></SOW>""")


def client(srv, name: str):
    c = AMPS.Client(name)
    c.connect(srv.uri)
    c.logon(5000)
    return c


def publish(c, i: int) -> None:
    c.publish("orders", json.dumps({"id": i % KEYS, "i": i, "pad": PAD}))


def history(srv, c) -> tuple[str, str]:
    """Messages ``i`` 0..99 logged at one instant, 100..N-1 a minute later, N two hours
    later. Returns a timestamp bookmark between the first 100 and the others, and the
    bookmark of message 99 (both name the state of messages 0..99)."""
    for i in range(100):
        publish(c, i)
    c.flush(5000)
    srv.http("/emulator/clock/advance?seconds=30", "POST")
    since = format_timestamp(int(srv.call(srv.server.timebase.time) * 1_000_000))
    srv.http("/emulator/clock/advance?seconds=30", "POST")
    for i in range(100, N):
        publish(c, i)
    c.flush(5000)
    srv.http("/emulator/clock/advance?seconds=7200", "POST")
    publish(c, N)
    c.flush(5000)
    replayed = Query()
    c.execute_async(AMPS.Command("subscribe").set_topic("orders").set_bookmark("0")
                    .add_ack_type("completed").set_timeout(10000), replayed)
    assert replayed.completed.wait(30)
    c.unsubscribe()
    bookmarks = {json.loads(d)["i"]: bm for kind, d, bm in replayed.got if kind == "p"}
    return since, bookmarks[99]


def compress(srv, c) -> None:
    """Archive and compress every segment but the active one (message 100 is in the first)."""
    journal = srv.server.txlog.journal
    assert until(lambda: srv.call(lambda: all(s.fd < 0 for s in journal.segments[:-1])
                                  and not journal._summq.pending))
    done = Collector()
    c.subscribe(done, "housekeeping-done")
    srv.http("/amps/administrator/actions/housekeep")
    assert len(done.wait_for(1, 30)) == 1
    assert srv.call(lambda: journal.segments[0].path.endswith(".journal.gz")
                    and journal.segments[0].last_position > 100)


class Query:
    """What a query or subscription got, in order: (command, data, bookmark), and its
    ``completed`` ack and ``group_end``."""

    def __init__(self) -> None:
        self.got: list[tuple[str, str, str]] = []
        self.completed = threading.Event()
        self.group_end = threading.Event()

    def __call__(self, m) -> None:
        kind = m.get_command()
        if kind == "ack" and m.get_ack_type() == "completed":
            self.completed.set()
        elif kind == "group_end":
            self.group_end.set()
        elif kind in ("sow", "p", "publish"):
            self.got.append(("p" if kind == "publish" else kind, m.get_data(), m.get_bookmark()))

    def ids(self, kind: str) -> list[int]:
        return [json.loads(d)["i"] for k, d, _ in self.got if k == kind]


def run(c, command: str, bookmark: str, sub_id: str, options: str | None = None) -> Query:
    q = Query()
    cmd = AMPS.Command(command).set_topic("orders").set_bookmark(bookmark).set_batch_size(10) \
        .add_ack_type("completed")
    if options:
        cmd.set_options(options)
    if command == "sow_and_subscribe":
        cmd.set_sub_id(sub_id)
    # (the client waits for the processed ack: the query may wait meanwhile)
    threading.Thread(target=c.execute_async, args=(cmd, q), daemon=True).start()
    return q


STATE = sorted(range(100 - KEYS, 100))  # messages 0..99: the last one of each key
#: an aggregated query with the same result
LAST_OF_EACH = "grouping=[/id],projection=[/id,MAX(/i) AS /i]"


@pytest.mark.parametrize(("command", "by", "options"), [
    ("sow", "bookmark", None),
    ("sow", "bookmark", LAST_OF_EACH),
    ("sow_and_subscribe", "time", None),
    ("sow_and_subscribe", "bookmark", None),
])
def test_a_historical_query_waits_for_a_compressed_segment_off_the_loop(tmp_path, monkeypatch,
                                                                       command, by, options):
    srv = ServerThread(loads_config(config(tmp_path), "sow.xml"), timebase=TestClock()).start()
    slow = SlowGunzip()
    try:
        c = client(srv, "publisher")
        since, bm99 = history(srv, c)
        bookmark = since if by == "time" else bm99
        other = client(srv, "before")
        before = run(other, "sow", bookmark, "", options)
        assert before.completed.wait(30)
        assert sorted(before.ids("sow")) == STATE  # (the state as of the bookmark)
        other.close()
        compress(srv, c)
        slow.install(monkeypatch)
        querier = client(srv, "querier")
        q = run(querier, command, bookmark, "s1", options)
        # the query reached the compressed segment (when message 99 was logged; where the
        # subscription replays from)
        assert slow.entered.wait(30)
        # meanwhile another client publishes and is answered
        for i in range(N + 1, N + 6):
            publish(c, i)
        c.flush(5000)
        assert not slow.release.is_set() and slow.calls == 1
        assert q.ids("p") == []
        if by == "bookmark":  # nothing of the query yet: it waits for the instant it reads
            assert q.got == [] and not q.group_end.is_set()
        slow.release.set()
        assert q.group_end.wait(30) and q.completed.wait(30)
        loop_thread = srv.call(threading.current_thread)
        assert slow.threads and loop_thread not in slow.threads  # decompressed off the loop
        assert sorted(q.ids("sow")) == STATE  # the same results as before
        if command == "sow_and_subscribe":
            # every message logged since, then those published while it waited: each once,
            # in order, after the query's results
            assert until(lambda: len(q.ids("p")) >= N + 6 - 100)
            assert q.ids("p") == list(range(100, N + 6))
            kinds = [k for k, _, _ in q.got]
            assert kinds == ["sow"] * kinds.count("sow") + ["p"] * kinds.count("p")
        querier.close()
        c.close()
    finally:
        slow.release.set()
        srv.stop()
