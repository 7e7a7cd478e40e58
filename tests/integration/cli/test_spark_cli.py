"""``amps-spark`` against a running server: 60East's spark examples from the User Guide
(chapter "Spark", examples 32.1-32.11), each option at least once, checked by output shape
and with the official client; and ``amps-emulator-client`` refusing spark's syntax."""

from __future__ import annotations

import io
import json
import os
import queue
import re
import socket
import subprocess
import sys
import threading
import time
import zipfile

import pytest

from amps_emulator.protocol import client_cli, spark_cli
from tests.support.clients import clients_for
from tests.support.paths import ROOT
from tests.support.servers import config_xml, start_server, until

CONFIG = """<SOW>
  <Topic><Name>order</Name><MessageType>json</MessageType><Key>/id</Key>
    <Durability>transient</Durability></Topic>
  <Topic><Name>disorder</Name><MessageType>json</MessageType><Key>/id</Key>
    <Durability>transient</Durability></Topic>
  <Topic><Name>chaos</Name><MessageType>json</MessageType><Key>/name</Key>
    <Durability>transient</Durability></Topic>
  <Queue><Name>work</Name><MessageType>json</MessageType><LeasePeriod>60s</LeasePeriod>
    <MaxPerSubscriptionBacklog>10</MaxPerSubscriptionBacklog></Queue>
  <Queue><Name>jobs</Name><MessageType>json</MessageType><LeasePeriod>60s</LeasePeriod>
    <MaxPerSubscriptionBacklog>10</MaxPerSubscriptionBacklog></Queue>
</SOW>"""
PUBLISHED = re.compile(r"total messages published: (\d+) \((\d+\.\d\d|Infinity)/s\)")
RECEIVED = re.compile(r"Total messages received: (\d+) \((\d+\.\d\d|Infinity|NaN)/s\)")
DELETED = re.compile(r"Deleted (\d+) records in \d+ms\.")


@pytest.fixture
def spark_srv(tmp_path):
    s = start_server(config_xml(tmp_path, extra=CONFIG))
    yield s
    s.stop()


@pytest.fixture
def official(spark_srv):
    make = clients_for(spark_srv.uri)
    yield next(make)("checker")
    make.close()


def server_of(srv) -> str:
    """The ``-server`` value spark takes: host:port."""
    return srv.uri.split("//", 1)[1].split("/", 1)[0]


def spark(*argv: str, stdin: bytes = b"") -> tuple[int, list[str], list[str]]:
    out, err = io.StringIO(), io.StringIO()
    rc = spark_cli.main(list(argv), stdin=io.BytesIO(stdin), out=out, err=err)
    return rc, out.getvalue().splitlines(), err.getvalue().splitlines()


def sow_of(official, topic: str) -> list[dict]:
    return [json.loads(m.get_data()) for m in official.sow(topic) if m.get_command() == "sow"]


class Streaming:
    """``amps-spark`` as a subprocess (subscriptions run until stopped); ``line()`` is its
    next line of standard output."""

    def __init__(self, *argv: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "amps_emulator.protocol.spark_cli", *argv], cwd=ROOT,
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for ln in self.proc.stdout:
            self.lines.put(ln.rstrip("\n"))

    def line(self, timeout: float = 10.0) -> str:
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            self.proc.kill()
            _, err = self.proc.communicate()
            raise AssertionError(f"no line from amps-spark; stderr: {err}") from None

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.communicate(timeout=10)


def subscribed(srv, count: int = 1) -> bool:
    """True once ``count`` subscriptions are in place on the server."""
    return until(lambda: srv.call(
        lambda: sum(len(c.subs) for c in srv.server.broker.by_name.values()) >= count))


# -- help (Examples 32.1 and 32.2) --------------------------------------------------------
def test_help_screens():
    rc, out, _ = spark()
    assert rc == 1 and out[1] == "- Spark - AMPS client utility -"
    rc, out, _ = spark("help")
    assert rc == 0 and "    spark help [command]" in out
    listed = out[out.index("Supported Commands:") + 2:out.index("Example:") - 1]
    assert [x.strip() for x in listed] == ["help", "ping", "publish", "sow",
                                           "sow_and_subscribe", "sow_delete", "subscribe"]
    rc, out, _ = spark("help", "publish")
    assert rc == 0 and "  spark publish [options]" in out
    text = "\n".join(out)
    required = text.split("Required Parameters:")[1].split("Options:")[0]
    assert re.findall(r"^  (\w+)\s+--", required, re.M) == ["server", "topic"]
    options = text.split("Options:")[1].split("Example:")[0]
    assert re.findall(r"^  (\w+)\s+--", options, re.M) == ["delimiter", "delta", "file",
                                                           "proto", "rate"]
    for name in ("ping", "sow", "subscribe", "sow_and_subscribe", "sow_delete"):
        assert spark("help", name)[0] == 0
    rc, out, err = spark("help", "nope")
    assert rc == 1 and "unknown command 'nope'" in err[0]


# -- ping (Examples 32.10 and 32.11) -------------------------------------------------------
def test_ping(spark_srv):
    hp = server_of(spark_srv)
    rc, out, _ = spark("ping", "-server", hp, "-type", "json")
    assert rc == 0
    assert re.fullmatch(rf"Successfully connected to tcp://[^@:/]+@{re.escape(hp)}/amps/json",
                        out[0])
    # credentials in -server; the password is not shown; -proto amps means the default type;
    # the en dash of the guide's typeset example is read as a dash
    rc, out, _ = spark("ping", "\u2013server", f"alice:secret@{hp}", "-proto", "amps")
    assert rc == 0 and out == [f"Successfully connected to tcp://alice@{hp}/amps/json"]
    rc, out, _ = spark("ping", "-server", hp, "-prot", "json")
    assert rc == 0 and out[0].endswith("/amps/json")

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rc, out, err = spark("ping", "-server", f"localhost:{port}")
    assert rc == 1 and out == []
    assert err == ["Unable to connect to AMPS",
                   f"(ConnectionRefusedException: Unable to connect to AMPS at localhost:{port})."]


def test_type_is_passed_through_at_logon(spark_srv):
    # the server's transport takes json only: another type is the server's refusal, so it
    # did reach the logon
    rc, _, err = spark("ping", "-server", server_of(spark_srv), "-type", "nvfix")
    assert rc == 1 and err == ["Unable to connect to AMPS",
                               "(ConnectionException: invalid message type)."]


# -- publish, sow, sow_delete (Examples 32.3, 32.5, 32.6, 32.9) -------------------------
def test_guide_publish_sow_delete(spark_srv, official, tmp_path):
    hp = server_of(spark_srv)
    rc, out, err = spark("publish", "-server", hp, "-type", "json", "-topic", "order",
                         stdin=b'{ "id" : 1, "data": "hello, world!" }\n')
    assert rc == 0 and out == [] and (m := PUBLISHED.fullmatch(err[0])) and m[1] == "1"
    assert sow_of(official, "order") == [{"id": 1, "data": "hello, world!"}]

    rc, out, err = spark("sow", "-server", hp, "-type", "json", "-topic", "order",
                         "-filter", "/id = '1'")
    assert rc == 0 and out == ['{ "id" : 1, "data": "hello, world!" }']
    assert (m := RECEIVED.fullmatch(err[0])) and m[1] == "1"

    data = tmp_path / "data.json"
    data.write_text("".join(json.dumps({"name": f"thing{i}", "place": "shelf"}) + "\n"
                            for i in range(49)) + '{"name": "cup", "place": "cupboard"}\r\n\n')
    rc, _, err = spark("publish", "-server", hp, "-type", "json", "-topic", "chaos",
                       "-file", str(data))
    assert rc == 0 and (m := PUBLISHED.fullmatch(err[0])) and m[1] == "50"
    assert len(sow_of(official, "chaos")) == 50

    rc, out, err = spark("sow_delete", "-server", hp, "-topic", "chaos", "-type", "json",
                         "-filter", "/name = 'cup'")
    assert rc == 0 and out == [] and (m := DELETED.fullmatch(err[0])) and m[1] == "1"
    assert "cup" not in {r["name"] for r in sow_of(official, "chaos")}
    rc, _, err = spark("sow", "-server", hp, "-type", "json", "-topic", "chaos",
                       "-filter", "/name = 'cup'")
    assert rc == 0 and (m := RECEIVED.fullmatch(err[0])) and m[1] == "0"


def test_sow_query_options_and_format(spark_srv, official):
    hp = server_of(spark_srv)
    for i in range(1, 6):
        official.publish("order", json.dumps({"id": i, "qty": i * 10}))
    official.flush(5000)
    rc, out, _ = spark("sow", "-server", hp, "-type", "json", "-topic", "order",
                       "-filter", "/qty >= 20", "-orderby", "/qty DESC", "-topn", "3",
                       "-batchsize", "2")
    assert rc == 0 and [json.loads(x)["id"] for x in out] == [5, 4, 3]
    rc, out, _ = spark("sow", "-server", hp, "-type", "json", "-topic", "order",
                       "-filter", "/id = 2", "-format",
                       "{command}|{topic}|{sowkey}|{length}|{timestamp}|{data}")
    command, topic, key, length, stamp, data = out[0].split("|", 5)
    assert (command, topic, data, int(length)) == ("sow", "order", '{"id": 2, "qty": 20}',
                                                   len('{"id": 2, "qty": 20}'))
    assert key.isdigit() and re.fullmatch(r"\d{8}T\d{6}\.\d+Z", stamp)
    rc, _, err = spark("sow", "-server", hp, "-topic", "order", "-format", "{nope}")
    assert rc == 1 and "unknown tag {nope}" in err[0]


def test_sow_delete_by_data(spark_srv, official, tmp_path):
    hp = server_of(spark_srv)
    for i in range(1, 5):
        official.publish("order", json.dumps({"id": i}))
    official.flush(5000)
    rc, _, err = spark("sow_delete", "-server", hp, "-type", "json", "-topic", "order",
                       stdin=b'{"id": 1}\n{"id": 3}\n{"id": 99}\n')
    assert rc == 0 and (m := DELETED.fullmatch(err[0])) and m[1] == "2"
    f = tmp_path / "gone.txt"
    f.write_bytes(b'{"id": 2}')
    rc, _, err = spark("sow_delete", "-server", hp, "-type", "json", "-topic", "order",
                       "-file", str(f))
    assert rc == 0 and (m := DELETED.fullmatch(err[0])) and m[1] == "1"
    assert sow_of(official, "order") == [{"id": 4}]


def test_publish_zip_delimiter_and_delta(spark_srv, official, tmp_path):
    hp = server_of(spark_srv)
    archive = tmp_path / "data.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("part1.json", "".join(f'{{"id":{i}}}\n' for i in range(3)))
        z.writestr("dir/", "")
        z.writestr("dir/part2.json", '{"id":3}\n{"id":4}')
    rc, _, err = spark("publish", "-server", hp, "-type", "json", "-topic", "disorder",
                       "-file", str(archive))
    assert rc == 0 and (m := PUBLISHED.fullmatch(err[0])) and m[1] == "5"
    assert sorted(r["id"] for r in sow_of(official, "disorder")) == [0, 1, 2, 3, 4]

    rc, _, err = spark("publish", "-server", hp, "-type", "json", "-topic", "order",
                       "-delimiter", "124", stdin=b'{"id":1,"qty":5}|{"id":2,"qty":6}|')
    assert rc == 0 and (m := PUBLISHED.fullmatch(err[0])) and m[1] == "2"
    rc, _, _ = spark("publish", "-server", hp, "-type", "json", "-topic", "order", "-delta",
                     stdin=b'{"id":1,"note":"merged"}\n')
    assert rc == 0
    assert {r["id"]: r for r in sow_of(official, "order")}[1] == {"id": 1, "qty": 5,
                                                                 "note": "merged"}


def test_publish_rate(spark_srv, official):
    """Example 32.4: 100 messages at -rate 50 take about two seconds."""
    body = "".join(f'{{"id":{n}}}\n' for n in range(100)).encode()
    t0 = time.monotonic()
    rc, _, err = spark("publish", "-topic", "disorder", "-type", "json", "-rate", "50",
                       "-server", server_of(spark_srv), stdin=body)
    took = time.monotonic() - t0
    assert rc == 0 and (m := PUBLISHED.fullmatch(err[0])) and m[1] == "100"
    assert took >= 99 / 50  # the 100th message is due 1.98 s after the first
    # 100 messages over at least 1.98 s: at most 50.51/s as printed, and well above half
    assert 25.0 <= float(m[2]) <= round(100 / (99 / 50), 2)
    assert len(sow_of(official, "disorder")) == 100


# -- subscribe and sow_and_subscribe (Examples 32.7 and 32.8) -----------------------------
def test_subscribe_with_filter(spark_srv, official):
    sub = Streaming("subscribe", "-server", server_of(spark_srv), "-topic", "chaos",
                    "-type", "json", "-filter", "/name = 'cup'")
    try:
        assert subscribed(spark_srv)
        official.publish("chaos", '{ "name" : "plate", "place" : "rack" }')
        official.publish("chaos", '{ "name" : "cup", "place" : "cupboard" }')
        assert sub.line() == '{ "name" : "cup", "place" : "cupboard" }'
    finally:
        sub.stop()


def test_sow_and_subscribe_delta_format(spark_srv, official):
    official.publish("chaos", '{ "name" : "cup", "place" : "cupboard" }')
    official.publish("chaos", '{ "name" : "plate", "place" : "rack" }')
    official.flush(5000)
    sub = Streaming("sow_and_subscribe", "-server", server_of(spark_srv), "-type", "json",
                    "-topic", "chaos", "-filter", "/name = 'cup'", "-delta",
                    "-format", "{command}:{data}")
    try:
        assert sub.line() == 'sow:{ "name" : "cup", "place" : "cupboard" }'
        assert subscribed(spark_srv)
        official.publish("chaos", '{"name":"cup","place":"drawer"}')
        kind, data = sub.line().split(":", 1)
        assert kind == "publish" and json.loads(data)["place"] == "drawer"
    finally:
        sub.stop()


def test_queue_backlog_and_ack(spark_srv, official):
    hp = server_of(spark_srv)
    # -backlog 2, no -ack: two messages leased to spark, the third waits for someone else
    sub = Streaming("subscribe", "-server", hp, "-type", "json", "-topic", "work",
                    "-backlog", "2")
    try:
        assert subscribed(spark_srv)
        for i in range(3):
            official.publish("work", json.dumps({"job": i}))
        assert [json.loads(sub.line())["job"] for _ in range(2)] == [0, 1]
        got: queue.Queue[dict] = queue.Queue()
        official.subscribe(lambda m: got.put(json.loads(m.get_data())), "work")
        assert got.get(timeout=10) == {"job": 2}
    finally:
        sub.stop()
    # -ack: each message acknowledged once printed, so a backlog of 1 still lets all through
    sub = Streaming("subscribe", "-server", hp, "-type", "json", "-topic", "jobs", "-ack",
                    "-backlog", "1")
    try:
        assert subscribed(spark_srv, 2)
        for i in range(3):
            official.publish("jobs", json.dumps({"job": i}))
        assert [json.loads(sub.line())["job"] for _ in range(3)] == [0, 1, 2]
    finally:
        sub.stop()


# -- command-line errors ----------------------------------------------------------------------
def test_spark_command_line_errors(spark_srv):
    hp = server_of(spark_srv)
    rc, _, err = spark("sow", "-server", hp)
    assert rc == 1 and err == ["spark: sow: -topic is required"]
    rc, _, err = spark("sow", "-server", hp, "-topic", "order", "-bogus", "1")
    assert rc == 1 and "unknown option -bogus" in err[0] and "help sow" in err[0]
    rc, _, err = spark("publish", "-server", hp, "-topic", "order", '{"id":1}')
    assert rc == 1 and "unexpected argument" in err[0]
    rc, _, err = spark("sow", "-server", hp, "-topic")
    assert rc == 1 and "-topic needs a value" in err[0]
    rc, _, err = spark("subscribe", "-server", hp, "-topic", "t", "-authenticator", "x.Y")
    assert rc == 1 and "user:password@host:port" in err[0]
    rc, _, err = spark("ping", "-server", "localhost")
    assert rc == 1 and "host:port" in err[0]
    rc, _, err = spark("publish", "-server", hp, "-topic", "t", "-rate", "fast")
    assert rc == 1 and "-rate wants a number" in err[0]
    rc, _, err = spark("sow", "-server", hp, "-type", "json", "-topic", "no-such-topic")
    assert rc == 1 and "invalid topic" in err[0]
    rc, out, err = spark("frobnicate")
    assert rc == 1 and "unknown command 'frobnicate'" in err[0] and "Supported Commands:" in out


def test_spark_as_a_program(spark_srv):
    """The module runs as a program, as the ``amps-spark`` script does, reading stdin."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "amps_emulator.protocol.spark_cli", "publish", "-server",
         server_of(spark_srv), "-type", "json", "-topic", "order"],
        input='{"id":7}\n', capture_output=True, text=True, cwd=ROOT, env=env, timeout=60)
    assert done.returncode == 0 and PUBLISHED.fullmatch(done.stderr.strip())


# -- amps-emulator-client: spark's syntax is an error there, never a misparse ----------------
@pytest.mark.parametrize("argv", [
    ["publish", "-topic", "orders", '{"id":1}'],
    ["sow", "-server", "tcp://127.0.0.1:1/amps/json", "-t", "orders"],
    ["ping", "-server=localhost:9007"],
])
def test_client_cli_refuses_single_dash_words(argv, capsys):
    with pytest.raises(SystemExit) as stop:
        client_cli.main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    word = next(a for a in argv if re.match(r"-[a-z]{2}", a)).split("=")[0]
    assert f"'{word}" in err and f"-{word}" in err and "amps-spark" in err


def test_client_cli_short_options_still_work(spark_srv, capsys):
    assert client_cli.main(["publish", "-s", spark_srv.uri, "-t", "orders", '{"id":1}',
                            "--count", "2"]) == 0
    assert "published 2 messages" in capsys.readouterr().err
    # a message after "--" is a message, whatever it looks like
    assert client_cli.main(["publish", "-s", spark_srv.uri, "-t", "raw", "--", "-abc"]) == 0
    assert "published 1 messages" in capsys.readouterr().err
    # a short option with a number attached is not a spark word
    client_cli.refuse_single_dash_words(client_cli._parser(), ["subscribe", "-n5", "-t", "x"])
