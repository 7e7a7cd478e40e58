"""The ``amps`` data source against a running server: the writer's load survives a SIGKILL of
the server with nothing lost and nothing twice; the reader (sow query, bookmark replay split
by time) gives the same rows as the journal reader and as the official client."""

from __future__ import annotations

import json
import threading
import time

import pytest

AMPS = pytest.importorskip("AMPS")
pytest.importorskip("pyspark")

from tests.support.servers import config_xml, start_server  # noqa: E402

SOW_XML = """<SOW><Topic><Name>items</Name><MessageType>json</MessageType><Key>/id</Key>
  <FileName>{d}/sow/%n.sow</FileName></Topic></SOW>"""


def _journal_rows(spark, journal, topic):
    return (spark.read.format("amps-journal").option("path", str(journal)).option("topic", topic)
            .load().orderBy("position").select("bookmark", "topic", "data").collect())


def test_load_survives_a_server_sigkill_without_loss_or_duplicate(spark, tmp_path):
    from tests.support.procserver import ProcServer

    n = 20_000
    srv = ProcServer.with_config(tmp_path, lambda d: config_xml(d))
    journal = srv.data_dir / "journal"
    df = spark.range(0, n, numPartitions=2).selectExpr("id", "concat('item-', id) AS name")
    killed = threading.Event()
    load_done = threading.Event()

    def kill_mid_load():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not load_done.is_set():
            size = sum(p.stat().st_size for p in journal.glob("*.journal")) if journal.exists() else 0
            if size > 300_000:  # about a sixth of the load is in the log
                srv.kill()
                killed.set()
                srv.start()
                return
            time.sleep(0.02)  # polling the journal's size with a deadline

    # (the write runs in the main thread: Spark finds Python data sources for writes only
    # in the thread that registered them)
    killer = threading.Thread(target=kill_mid_load)
    killer.start()
    try:
        (df.write.format("amps").option("uri", srv.uri).option("topic", "load")
         .option("reconnectTimeout", "60").option("maxInFlight", "256").mode("append").save())
        load_done.set()
        killer.join(60)
        assert killed.is_set(), "the load finished before the server could be killed"
    finally:
        load_done.set()
        killer.join(60)
        srv.stop()
    rows = spark.read.format("amps-journal").option("path", str(journal)).option("topic", "load") \
        .load().where("command = 'publish'").select("data", "client_name", "client_seq").collect()
    ids = sorted(json.loads(r.data)["id"] for r in rows)
    assert ids == list(range(n))  # every row once: none lost, none twice
    # each partition published under one name with sequences 1..count, in row order
    by_client: dict[str, list[int]] = {}
    for r in rows:
        by_client.setdefault(r.client_name, []).append(r.client_seq)
    assert len(by_client) == 2
    assert sorted(len(v) for v in by_client.values()) == [n // 2, n // 2]
    assert all(sorted(v) == list(range(1, n // 2 + 1)) for v in by_client.values())


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("ampssrc")
    srv = start_server(config_xml(d, extra=SOW_XML.format(d=d)))
    yield srv, d / "journal"
    srv.stop()


def test_reader_matches_journal_and_official_client(spark, server):
    srv, journal = server
    df = spark.range(0, 300, numPartitions=3).selectExpr("id", "id % 7 AS g")
    df.write.format("amps").option("uri", srv.uri).option("topic", "items").mode("append").save()
    c = AMPS.Client("checker")
    c.connect(srv.uri)
    c.logon(5000)
    try:
        c.publish("items", json.dumps({"id": 5, "g": 99}))  # an update: the SOW keeps the last
        c.flush(5000)
        expected_sow = sorted(m.get_data() for m in c.sow("items", "/g > 3") if m.get_command() == "sow")
        # the sow query through the amps source
        got = spark.read.format("amps").option("uri", srv.uri).option("topic", "items") \
            .option("filter", "/g > 3").load().collect()
        assert sorted(r.data for r in got) == expected_sow
        assert all(r.sow_key and r.bookmark for r in got)
        # a replay over the whole log, split in 4 time ranges, equals the journal's rows
        jrows = _journal_rows(spark, journal, "items")
        first = spark.read.format("amps-journal").option("path", str(journal)).load() \
            .selectExpr("min(timestamp) AS t").first().t
        replay = spark.read.format("amps").option("uri", srv.uri).option("topic", "items") \
            .option("startingTimestamp", first.strftime("%Y%m%dT%H%M%S.%f")) \
            .option("numPartitions", 4).load()
        assert replay.rdd.getNumPartitions() == 4
        # a bookmark's sequence is its publisher's s, not the log position: compare as sets of rows
        got = replay.select("bookmark", "topic", "data").collect()
        assert sorted(tuple(r) for r in got) == sorted(tuple(r) for r in jrows)
        assert len(jrows) == 301
    finally:
        c.close()
