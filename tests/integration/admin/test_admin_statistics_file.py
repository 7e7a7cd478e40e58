"""``Admin/FileName`` naming a file: the statistics database on disk, read with sqlite3 as
the User Guide's queries read it (STATIC joined with DYNAMIC on ``static_id``), the history
surviving a restart for the ``t0``/``t1`` queries, old samples removed by
``amps-action-do-truncate-statistics`` on the server's (test) clock, and a file that cannot
be the database refused at start-up in one located line."""

from __future__ import annotations

import json
import sqlite3
import time

import pytest

from amps_emulator.config import ConfigError, loads_config
from amps_emulator.server.core.clock import TestClock
from tests.support.clients import client_for
from tests.support.servers import ServerThread, config_xml, until

HOUR = 3600.0


def _extra(db) -> str:
    # an Interval longer than any test: every sample here is one the test takes
    return f"""<Admin><InetAddr>127.0.0.1:0</InetAddr><Interval>1h</Interval>
  <FileName>{db}</FileName></Admin>
<SOW><Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
  <Durability>transient</Durability></Topic></SOW>
<Actions><Action>
  <On><Module>amps-action-on-admin</Module><Options><Path>truncate</Path></Options></On>
  <Do><Module>amps-action-do-truncate-statistics</Module><Options><Age>1h</Age></Options></Do>
</Action></Actions>"""


def _start(tmp_path, clock: TestClock | None = None) -> ServerThread:
    db = tmp_path / "stats" / "stats.db"  # (its directory is made)
    cfg = loads_config(config_xml(tmp_path, extra=_extra(db)), "stats.xml")
    return ServerThread(cfg, **({"timebase": clock} if clock else {})).start()


@pytest.fixture
def made(tmp_path):
    servers: list[ServerThread] = []

    def make(clock: TestClock | None = None) -> ServerThread:
        s = _start(tmp_path, clock)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.stop()


def sample(srv) -> None:
    """A sample now (as the Interval timer takes one), and wait until it is in the file."""
    sampler = srv.server.admin.sampler

    def take():
        sampler.sample()
        sampler.record()
        return sampler.writer.barrier()

    assert srv.call(take).wait(10)


def query(tmp_path, sql: str) -> list[tuple]:
    db = sqlite3.connect(str(tmp_path / "stats" / "stats.db"))
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def stamps(srv) -> list[str]:
    text = srv.http("/amps/instance/timestamp.csv?t0=19700101T0")
    return [line.split(",")[0] for line in text.splitlines()]


def _iso(amps_time: int) -> str:
    """A statistics timestamp as the ISO-8601 time the Admin interface writes (the
    conversion the User Guide gives for amps-sqlite3, in integers: milliseconds since
    the epoch it subtracts)."""
    unix, ms = divmod(amps_time - 210866803200 * 1000, 1000)
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(unix)) + f".{ms:03d}000Z"


def test_each_sample_is_in_the_file_as_amps_lays_it_out(made, tmp_path):
    srv = made()
    pub = client_for(srv, "publisher")
    for i in range(3):
        pub.publish("orders", json.dumps({"id": i}))
    pub.flush(5000)
    sample(srv)
    sample(srv)
    # the User Guide's query of the clients' statistics
    got = query(tmp_path, "SELECT s.client_name, MAX(d.messages_in), COUNT(*) "
                          "FROM ICLIENTS_DYNAMIC d JOIN ICLIENTS_STATIC s "
                          "ON (s.static_id = d.static_id) GROUP BY s.client_name")
    assert len(got) == 1 and got[0][0] == "publisher" and got[0][1] >= 3 and got[0][2] == 2
    assert query(tmp_path, "SELECT COUNT(*) FROM ICLIENTS_STATIC") == [(1,)]  # one object
    assert query(tmp_path, "SELECT s.topic, d.insert_count FROM ISOW_DYNAMIC d "
                           "JOIN ISOW_STATIC s USING (static_id)") == [("orders", 3)] * 2
    # the samples' times, in the file and on the Admin interface, are the same instants
    times = [t for (t,) in query(tmp_path, "SELECT timestamp FROM ISTATISTICS_DYNAMIC "
                                           "ORDER BY timestamp")]
    assert [_iso(t) for t in times] == stamps(srv)
    stats = srv.http("/amps/instance/statistics.json")["amps"]["instance"]["statistics"]
    assert stats["file_name"].endswith("stats.db") and int(stats["file_size"]) > 0
    pub.close()


def test_the_history_survives_a_restart(made, tmp_path):
    srv = made()
    pub = client_for(srv, "publisher")
    for batch in range(2):
        pub.publish("orders", json.dumps({"id": batch}))
        pub.flush(5000)
        sample(srv)
    before = stamps(srv)
    leaf = "/amps/instance/sow/orders!json/insert_count.csv?t0=19700101T0"
    series = srv.http(leaf)
    assert [line.split(",")[1] for line in series.splitlines()] == ["1", "2"]
    client_leaf = "/amps/instance/clients/publisher/messages_in.csv?t0=19700101T0"
    clients = srv.http(client_leaf)
    pub.close()
    srv.stop()

    again = made()  # the file's samples are read back in the background
    sample(again)  # (taken while they are, or after: either way it follows them)
    assert until(lambda: again.server.admin.sampler.reading.done())
    assert stamps(again)[:2] == before and len(stamps(again)) == 3
    assert again.http(leaf).startswith(series)  # read back from the file
    assert again.http(client_leaf) == clients  # a client of the last run
    node = again.http(f"/amps/instance/sow/orders!json.json?t0={before[0]}&t1={before[0]}")
    assert node["amps"]["instance"]["sow"][0]["insert_count"] == "1"
    assert query(tmp_path, "SELECT COUNT(DISTINCT timestamp) FROM ISTATISTICS_DYNAMIC") == [(3,)]


def test_truncate_statistics_removes_what_is_older_than_its_age(made, tmp_path):
    clock = TestClock()
    srv = made(clock)
    sample(srv)
    sample(srv)
    srv.call(lambda: clock.advance(2 * HOUR))
    sample(srv)
    old, _, new = stamps(srv)
    srv.http("/amps/administrator/actions/truncate")
    srv.call(lambda: None)  # (the action ran on the loop)
    sample(srv)  # (the removal was queued before this sample: done once it is written)
    kept = query(tmp_path, "SELECT DISTINCT timestamp FROM ISTATISTICS_DYNAMIC ORDER BY 1")
    assert [_iso(t) for (t,) in kept][0] == new and len(kept) == 2
    assert stamps(srv)[0] == new  # the history forgot them too
    assert query(tmp_path, "SELECT COUNT(*) FROM HCPUS_DYNAMIC WHERE timestamp < "
                           f"{kept[0][0]}") == [(0,)]
    assert old not in stamps(srv)


def test_a_file_that_is_not_a_statistics_database_stops_the_start_up(tmp_path):
    from tests.support.procserver import ProcServer

    db = tmp_path / "stats" / "stats.db"
    db.parent.mkdir()
    db.write_bytes(b"not sqlite\n" * 200)
    with pytest.raises(ConfigError) as exc:
        _start(tmp_path)
    assert str(exc.value).startswith("stats.xml:") and str(db) in str(exc.value)
    # the command line: one located line, no traceback, the file left as it was
    cfg = tmp_path / "amps.xml"
    cfg.write_text(config_xml(tmp_path / "data", extra=_extra(db)))
    refused = ProcServer(tmp_path / "data", cfg).run_to_exit()
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    line = refused.stderr.strip().splitlines()[-1]
    assert line.startswith(f"{cfg}:") and f"{db}: not a statistics database" in line
    assert db.read_bytes() == b"not sqlite\n" * 200
