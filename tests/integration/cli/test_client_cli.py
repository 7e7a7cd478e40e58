"""``amps-emulator-client`` against a running server, checked with the official client."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading

import pytest

from amps_emulator.protocol.client import Client
from amps_emulator.protocol.client_cli import main
from tests.support.clients import clients_for
from tests.support.paths import ROOT
from tests.support.servers import config_xml, start_server, until

SOW = """<SOW><Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
  <Durability>transient</Durability></Topic></SOW>"""


@pytest.fixture
def sow_srv(tmp_path):
    s = start_server(config_xml(tmp_path, extra=SOW))
    yield s
    s.stop()


def run(capsys, *argv: str) -> tuple[int, list[str], str]:
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out.splitlines(), out.err


def test_publish_query_delete_ping(sow_srv, capsys, tmp_path):
    u = ("-s", sow_srv.uri)
    rc, _, err = run(capsys, "publish", *u, "-t", "orders", '{"id":1,"qty":5}',
                     '{"id":2,"qty":7}', "--count", "2")
    assert rc == 0 and "published 4 messages" in err
    f = tmp_path / "msgs.jsonl"
    f.write_text('{"id":3,"qty":1}\n\n{"id":4,"qty":9}\n')
    assert run(capsys, "publish", *u, "-t", "orders", "-f", str(f), "--rate", "1000")[0] == 0

    make = clients_for(sow_srv.uri)
    official = next(make)("checker")
    assert sorted(json.loads(m.get_data())["id"] for m in official.sow("orders")
                  if m.get_command() == "sow") == [1, 2, 3, 4]

    rc, lines, _ = run(capsys, "sow", *u, "-t", "orders", "--filter", "/qty > 4",
                       "--orderby", "/qty DESC", "--top-n", "2")
    assert [json.loads(x)["data"]["qty"] for x in lines] == [9, 7]
    rc, lines, _ = run(capsys, "sow", *u, "-t", "orders", "--format", "table",
                       "--orderby", "/id")
    assert lines[0].split() == ["SowKey", "id", "qty"] and len(lines) == 6
    assert lines[2].split()[1:] == ["1", "5"]

    rc, lines, _ = run(capsys, "sow_delete", *u, "-t", "orders", "--filter", "/qty < 6")
    assert json.loads(lines[0])["records_deleted"] == 2
    assert sorted(json.loads(m.get_data())["id"] for m in official.sow("orders")
                  if m.get_command() == "sow") == [2, 4]

    rc, lines, _ = run(capsys, "ping", *u)
    assert rc == 0 and json.loads(lines[0])["version"]
    rc, _, err = run(capsys, "sow", *u, "-t", "no-such-topic")
    assert rc == 1 and "invalid topic" in err
    make.close()


def test_subscribe_prints_json_lines(sow_srv, capsys):
    make = clients_for(sow_srv.uri)
    pub = next(make)("pub")
    pub.publish("orders", '{"id":1,"qty":1}')
    pub.flush(5000)
    done = threading.Event()
    result: list = []

    def subscriber() -> None:
        result.append(main(["sow_and_subscribe", "-s", sow_srv.uri, "-t", "orders",
                            "--options", "oof", "-n", "3", "--name", "cli-sub"]))
        done.set()

    t = threading.Thread(target=subscriber)
    t.start()
    # the CLI's subscription is in place once the server lists it
    assert until(lambda: sow_srv.call(lambda: bool(
        (c := sow_srv.server.broker.by_name.get("cli-sub")) is not None and c.subs)))
    pub.publish("orders", '{"id":2,"qty":2}')
    pub.sow_delete("orders", "/id = 1")
    assert done.wait(10)
    t.join()
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert result == [0]
    assert [(x["c"], x["data"]["id"]) for x in lines] == [("sow", 1), ("p", 2), ("oof", 1)]
    assert lines[2]["reason"] == "deleted"
    make.close()


def _subscribed(sow_srv, name: str) -> bool:
    """Whether the client ``name`` holds a subscription on ``sow_srv`` (polled with a deadline)."""
    return bool(until(lambda: sow_srv.call(lambda: bool(
        (c := sow_srv.server.broker.by_name.get(name)) is not None and c.subs))))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_subscribe_runs_until_interrupted_and_exits_cleanly(sow_srv, sig):
    root = ROOT
    proc = subprocess.Popen(
        [sys.executable, "-m", "amps_emulator.protocol.client_cli", "subscribe", "-s", sow_srv.uri,
         "-t", "orders", "--name", "cli-forever"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(root)})
    try:
        assert _subscribed(sow_srv, "cli-forever")
        make = clients_for(sow_srv.uri)
        pub = next(make)("pub")
        pub.publish("orders", '{"id":1,"qty":1}')
        pub.flush(5000)
        assert json.loads(proc.stdout.readline())["data"] == {"id": 1, "qty": 1}
        make.close()
        assert proc.poll() is None  # still subscribed
        proc.send_signal(sig)
        assert proc.wait(10) == 0
        err = proc.stderr.read()
        assert "Traceback" not in err
        assert "subscribe orders: stopped after 1 messages: " in err
        assert ("SIGTERM" if sig == signal.SIGTERM else "SIGINT") in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_subscribe_waits_for_messages_without_a_deadline_by_default(sow_srv, capsys, monkeypatch):
    """No idle limit unless --timeout gives one: every wait for a delivery is open-ended."""
    waits: list = []
    receive = Client.receive

    def spy(self, timeout=None):
        waits.append(timeout)
        return receive(self, timeout)

    monkeypatch.setattr(Client, "receive", spy)
    result: list = []
    t = threading.Thread(target=lambda: result.append(main(
        ["subscribe", "-s", sow_srv.uri, "-t", "orders", "-n", "1", "--name", "cli-patient"])))
    t.start()
    assert _subscribed(sow_srv, "cli-patient")
    make = clients_for(sow_srv.uri)
    pub = next(make)("pub")
    pub.publish("orders", '{"id":1,"qty":1}')
    pub.flush(5000)
    t.join(10)
    make.close()
    assert result == [0]
    stream_waits = [w for w in waits if w is not None]  # None: the logon's ack wait
    assert stream_waits and all(w == math.inf for w in stream_waits)
    err = capsys.readouterr().err
    assert "subscribe orders: stopped after 1 messages: -n 1 reached" in err


def test_subscribe_timeout_stops_after_that_long_idle_and_says_so(sow_srv, capsys):
    assert main(["subscribe", "-s", sow_srv.uri, "-t", "orders", "--timeout", "0.2"]) == 0
    out = capsys.readouterr()
    assert out.out == ""
    assert "subscribe orders: stopped after 0 messages: no message for 0.2s (--timeout 0.2)" \
        in out.err
