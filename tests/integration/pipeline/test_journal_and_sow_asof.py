"""``amps-journal`` and ``sow-asof`` against a journal written by a real server that the
official client drove: the rows equal a bookmark replay from EPOCH, and the SOW state as of
several times equals the server's own historical ``sow`` query (History), and its live ``sow``."""

from __future__ import annotations

import json
import threading
import time

import pytest

AMPS = pytest.importorskip("AMPS")
pytest.importorskip("pyspark")

from tests.support.clients import store_client  # noqa: E402
from tests.support.servers import config_xml, start_server  # noqa: E402

SOW_XML = """<SOW>
  <Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
    <FileName>{d}/sow/%n.sow</FileName><Expiration>enabled</Expiration>
    <History><Window>1d</Window><Granularity>0s</Granularity></History></Topic>
</SOW>"""


def _sow(c, topic, bookmark=None):
    cmd = AMPS.Command("sow").set_topic(topic).set_options("timestamp")
    if bookmark is not None:
        cmd.set_bookmark(bookmark)
    out = []
    for m in c.execute(cmd):
        if m.get_command() == "sow":
            out.append((json.loads(m.get_data()), m.get_timestamp()))
    return out


def _state(rows):
    return sorted((d["id"], json.dumps(d, sort_keys=True)) for d, *_ in rows)


def _completed(c, cmd, on_message):
    done = threading.Event()

    def handler(m):
        if m.get_command() == "ack" and m.get_ack_type() == "completed":
            done.set()
        else:
            on_message(m)

    c.execute_async(cmd.add_ack_type("completed"), handler)
    assert done.wait(20)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A server run: publishes, delta publishes, deletes (by filter, by keys, by data), an
    expiring message, another topic. Returns (journal dir, checkpoints [(time, state)], live
    state, replay [(bookmark, topic, body)])."""
    d = tmp_path_factory.mktemp("pipe")
    srv = start_server(config_xml(d, extra=SOW_XML.format(d=d)))
    try:
        c = store_client(srv.uri, "pipeline-pub")
        checkpoints = []

        def checkpoint():
            c.publish_flush(5000)
            rows = _sow(c, "orders")
            t = max(ts for _, ts in rows) if rows else None
            checkpoints.append((t, _state(rows)))

        for i in range(1, 7):
            c.publish("orders", json.dumps({"id": i, "px": i * 10, "st": "new"}))
        c.publish("trades", json.dumps({"id": 1, "qty": 5}))
        checkpoint()
        c.delta_publish("orders", json.dumps({"id": 2, "st": "filled"}))
        c.delta_publish("orders", json.dumps({"id": 3, "px": 31}))
        c.publish("orders", json.dumps({"id": 4, "px": 44, "st": "amended"}))
        checkpoint()
        c.execute(AMPS.Command("sow_delete").set_topic("orders").set_filter("/px >= 50")
                  .add_ack_type("completed"))
        pub = AMPS.Command("publish").set_topic("orders").set_data(json.dumps({"id": 7, "px": 1})) \
            .set_expiration(1)
        c.execute_async(pub, lambda m: None)
        c.publish("orders", json.dumps({"id": 8, "px": 80, "st": "new"}))
        checkpoint()
        c.execute(AMPS.Command("sow_delete").set_topic("orders").set_data(json.dumps({"id": 1}))
                  .add_ack_type("completed"))
        c.publish("orders", json.dumps({"id": 9, "px": 90, "st": "new"}))
        checkpoint()
        replay = []
        _completed(c, AMPS.Command("subscribe").set_topic(".*").set_bookmark("0"),
                   lambda m: replay.append((m.get_bookmark(), m.get_topic(), m.get_data())))
        live_at = int(time.time() * 1_000_000)
        live = _state(_sow(c, "orders"))
        hist = [(t, _state(_sow(c, "orders", t))) for t, _ in checkpoints]
        c.close()
    finally:
        srv.stop()
    return d / "journal", checkpoints, hist, (live_at, live), replay


def test_journal_rows_equal_a_bookmark_replay_from_epoch(spark, run):
    journal, *_, replay = run
    df = spark.read.format("amps-journal").option("path", str(journal)).load()
    rows = df.where("command in ('publish', 'delta_publish')").orderBy("position") \
        .select("bookmark", "topic", "data").collect()
    assert [tuple(r) for r in rows] == replay
    assert len(replay) == 13
    # every command is there, in log order, with its columns
    all_rows = df.orderBy("position").collect()
    assert {r.command for r in all_rows} == {"publish", "delta_publish", "sow_delete"}
    assert [r.position for r in all_rows] == sorted(r.position for r in all_rows)
    assert all(r.client_name == "pipeline-pub" and r.segment.endswith(".journal") for r in all_rows)
    assert [r.client_seq for r in all_rows if r.command == "publish"] == sorted(
        r.client_seq for r in all_rows if r.command == "publish")
    assert any(r.expiration == 1 for r in all_rows)
    deletes = [r for r in all_rows if r.command == "sow_delete"]
    assert deletes[0].headers == {"filter": "/px >= 50"}


def test_journal_options_topic_regex_and_bounds(spark, run):
    journal, *_, replay = run

    def load(**opts):
        r = spark.read.format("amps-journal").option("path", str(journal))
        for k, v in opts.items():
            r = r.option(k, v)
        return r.load().orderBy("position").select("bookmark", "topic").collect()

    assert [tuple(r) for r in load(topic="^tr")] == [(b, t) for b, t, _ in replay if t == "trades"]
    assert {r.topic for r in load(topic="orders")} == {"orders"}
    third = replay[3][0]
    after = load(startingBookmark=third)
    assert after[0].bookmark == replay[4][0]  # exclusive, as an AMPS replay after a bookmark
    upto = load(endingBookmark=third)
    assert upto[-1].bookmark == third
    ts = spark.read.format("amps-journal").option("path", str(journal)).load() \
        .orderBy("position").select("timestamp").collect()
    mid = ts[5].timestamp.strftime("%Y%m%dT%H%M%S.%f")
    assert len(load(startingTimestamp=mid)) == sum(1 for t in ts if t.timestamp >= ts[5].timestamp)


def test_sow_asof_equals_the_servers_historical_and_live_sow(spark, run, tmp_path):
    from amps_emulator.pipeline.journal_reader import parse_time
    from amps_emulator.pipeline.sow_asof import sow_asof
    from amps_emulator.sow import TopicSpec

    journal, checkpoints, hist, live, _ = run
    spec = TopicSpec("orders", keys=("/id",), expiration="enabled")

    def state(at):
        rows = sow_asof(spark, str(journal), spec, at).collect()
        return sorted((json.loads(r.data)["id"], json.dumps(json.loads(r.data), sort_keys=True))
                      for r in rows)

    for (t, seen_then), (_, historical) in zip(checkpoints, hist):
        assert historical == seen_then  # the server's History agrees with what we saw
        assert state(parse_time(t)) == historical, t
    live_at, live_state = live
    assert state(live_at) == live_state
    assert len(live_state) >= 4


def test_streaming_source_follows_a_running_server_and_resumes_from_its_checkpoint(spark, tmp_path):
    d = tmp_path / "srv"
    srv = start_server(config_xml(d))
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    c = store_client(srv.uri, "streamer")

    def publish(lo, hi):
        for i in range(lo, hi):
            c.publish("ticks", json.dumps({"i": i}))
        c.publish_flush(5000)

    def start():
        return (spark.readStream.format("amps-journal").option("path", str(d / "journal")).load()
                .select("position", "topic", "data").writeStream.format("parquet")
                .option("path", str(out)).option("checkpointLocation", str(ckpt))
                .trigger(processingTime="200 milliseconds").start())

    def seen():
        return sorted(json.loads(r.data)["i"] for r in spark.read.parquet(str(out)).collect())

    try:
        publish(0, 5)
        q = start()
        q.processAllAvailable()
        assert seen() == list(range(5))
        publish(5, 12)  # after the query started
        q.processAllAvailable()
        assert seen() == list(range(12))
        q.stop()
        publish(12, 20)  # while no query runs
        q = start()
        q.processAllAvailable()
        q.stop()
        assert seen() == list(range(20))  # resumed at its checkpoint: nothing twice, nothing lost
    finally:
        c.close()
        srv.stop()


QUEUE_XML = """<SOW><Queue><Name>work</Name><MessageType>json</MessageType><LeasePeriod>60s</LeasePeriod>
  <MaxPerSubscriptionBacklog>100</MaxPerSubscriptionBacklog></Queue></SOW>"""


def test_queue_audit_agrees_with_what_the_consumer_saw(spark, tmp_path):
    from amps_emulator.pipeline.jobs import queue_audit

    srv = start_server(config_xml(tmp_path, extra=QUEUE_XML))
    try:
        c = store_client(srv.uri, "queue-pub")
        for i in range(8):
            c.publish("work", json.dumps({"i": i}))
        c.publish_flush(5000)
        consumer = AMPS.Client("queue-consumer")
        consumer.connect(srv.uri)
        consumer.logon(5000)
        seen, done = {}, threading.Event()

        def on(m):
            i = json.loads(m.get_data())["i"]
            seen[i] = m.get_bookmark()
            if i < 6:
                m.ack()
            elif i < 8:
                m.ack("expire")
            if len(seen) == 8:
                done.set()

        consumer.subscribe(on, "work")
        assert done.wait(20)
        consumer.flush(5000)
        consumer.close()
        for i in (8, 9):  # nobody consumes these
            c.publish("work", json.dumps({"i": i}))
        c.publish("other", json.dumps({"i": 100}))  # not a queue's topic
        c.publish_flush(5000)
        c.close()
    finally:
        srv.stop()
    audit, summary = queue_audit(spark, str(tmp_path / "journal"), [("work", "work", None)])
    rows = {json.loads(r.data)["i"]: r for r in audit.collect()}
    assert {i for i, r in rows.items() if r.state == "acked"} == set(range(6))
    assert {i for i, r in rows.items() if r.state == "expired"} == {6, 7}
    assert {i for i, r in rows.items() if r.state == "queued"} == {8, 9}
    assert all(rows[i].bookmark == seen[i] and rows[i].queue == "work" for i in seen)
    assert all(rows[i].ms_to_ack >= 0 for i in range(6))
    s = summary.collect()[0]
    assert (s.queue, s.acked, s.expired) == ("work", 6, 2)


def test_export_and_stats_with_the_html_report(spark, run, tmp_path):
    from amps_emulator.pipeline import jobs
    from amps_emulator.pipeline.report import stats_page

    journal, *_, replay = run
    n = jobs.export(spark, str(journal), str(tmp_path / "export"), "parquet")
    assert n == 15  # 13 publishes and 2 sow_deletes
    assert sorted(p.name for p in (tmp_path / "export").iterdir() if p.is_dir()) == [
        "topic=orders", "topic=trades"]
    frames = jobs.stats(spark, str(journal))
    by_pub = {(r.topic, r.client_name): r.messages for r in frames["by_publisher"].collect()}
    assert by_pub == {("orders", "pipeline-pub"): 14, ("trades", "pipeline-pub"): 1}
    per_second = frames["per_second"].collect()
    assert sum(r.messages for r in per_second) == 15
    assert frames["gaps"].count() == 0
    html = stats_page("t", frames["by_publisher"].collect(), per_second, [], [])
    assert html.count("<svg") == 1 and "orders" in html and "<polyline" in html


def test_the_command_line_writes_sow_asof_and_the_html_report(spark, run, tmp_path):
    from amps_emulator.pipeline.cli import main

    journal, checkpoints, hist, (live_at, live_state), _ = run
    out = tmp_path / "asof"
    cfg = tmp_path / "amps.xml"
    cfg.write_text(config_xml(tmp_path, extra=SOW_XML.format(d=tmp_path)))
    assert main(["sow-asof", str(journal), str(out), "--topic", "orders", "--config", str(cfg),
                 "--at", str(live_at), "--format", "json"]) == 0
    rows = spark.read.json(str(out)).collect()
    assert sorted(json.loads(r.data)["id"] for r in rows) == [i for i, _ in live_state]
    report = tmp_path / "report.html"
    assert main(["stats", str(journal), str(tmp_path / "stats"), "--html", str(report)]) == 0
    assert "<svg" in report.read_text()
    assert not spark.sparkContext._jsc.sc().isStopped()  # the caller's session is kept
