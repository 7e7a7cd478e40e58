"""Non-JSON message types in the tools: the inspection API and the web console show them
readably, ``amps-emulator-client --type`` and ``amps-spark -type`` publish and query them."""

from __future__ import annotations

import base64
import io
import json

import bson
import pytest

from amps_emulator.protocol import client_cli, spark_cli
from tests.support.servers import start_server

AMPS = pytest.importorskip("AMPS")

CONFIG = """<AMPSConfig><Name>typed-tools</Name>
<Admin><InetAddr>127.0.0.1:0</InetAddr><Interval>1s</Interval></Admin>
<Transports><Transport><Name>any</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
  <Protocol>amps</Protocol></Transport></Transports>
<TransactionLog><JournalDirectory>{d}/journal</JournalDirectory>
  <Topic><Name>orders</Name><MessageType>fix</MessageType></Topic></TransactionLog>
<SOW>
  <Topic><Name>orders</Name><MessageType>fix</MessageType><Key>/11</Key><FileName>{d}/%n.sow</FileName></Topic>
  <Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key><FileName>{d}/%n.sow</FileName></Topic>
  <Topic><Name>jobs</Name><MessageType>bson</MessageType><Key>/job</Key><FileName>{d}/%n.sow</FileName></Topic>
  <Topic><Name>nv</Name><MessageType>nvfix</MessageType><Key>/id</Key><FileName>{d}/%n.sow</FileName></Topic>
</SOW>
</AMPSConfig>"""

FIX = b"35=D\x0111=A\x0138=150\x01"
BSON = bson.encode({"job": 7, "state": "done"})


@pytest.fixture(scope="module")
def typed_srv(tmp_path_factory):
    s = start_server(CONFIG.format(d=tmp_path_factory.mktemp("typed-tools")))
    port = s.server.listeners[0].port
    for mt, topic, body in (("fix", "orders", FIX), ("json", "orders", b'{"id":1,"q":2}'),
                            ("bson", "jobs", BSON)):
        c = AMPS.Client(f"tools-{mt}")
        c.connect(f"tcp://127.0.0.1:{port}/amps/{mt}")
        c.logon(5000)
        c.publish(topic, body)
        c.flush(5000)
        c.close()
    yield s
    s.stop()


def _uri(srv, mt: str = "json") -> str:
    return f"tcp://127.0.0.1:{srv.server.listeners[0].port}/amps/{mt}"


def test_inspection_api_shows_typed_records_readably(typed_srv) -> None:
    fix = typed_srv.http("/emulator/sow/orders?type=fix")
    assert fix["topic"] == "orders" and fix["message_type"] == "fix" and fix["count"] == 1
    (rec,) = fix["records"]
    assert rec["body"] == "35=D|11=A|38=150|" and rec["data"] == {"35": "D", "11": "A", "38": 150}
    (js,) = typed_srv.http("/emulator/sow/orders")["records"]  # the json topic of the same name
    assert js["data"] == {"id": 1, "q": 2} and "body" not in js
    (job,) = typed_srv.http("/emulator/sow/jobs?type=bson")["records"]
    assert job["data"] == {"job": 7, "state": "done"}
    assert base64.b64decode(job["body"].removeprefix("base64:")) == BSON
    topics = typed_srv.http("/emulator/sow")["topics"]
    listing = {(t["topic"].split("\x1f")[0], t["message_type"]) for t in topics}
    assert {("orders", "fix"), ("orders", "json"), ("jobs", "bson")} <= listing


def test_inspection_api_shows_typed_journal_records_readably(typed_srv) -> None:
    (rec,) = typed_srv.http("/emulator/journal?topic=orders")["records"]
    assert rec["message_type"] == "fix" and rec["body"] == "35=D|11=A|38=150|"
    assert rec["data"] == {"35": "D", "11": "A", "38": 150}


def test_console_lists_typed_topics_by_name_and_type(typed_srv) -> None:
    page = typed_srv.http("/")
    assert "\x1f" not in page
    assert "<option value='orders' data-type='fix'>orders (fix)</option>" in page
    assert "<option value='jobs' data-type='bson'>jobs (bson)</option>" in page


def test_emulator_client_with_type(typed_srv, capsys) -> None:
    rc = client_cli.main(["publish", "-s", _uri(typed_srv), "--type", "nvfix", "-t", "nv",
                          "id=1\x01px=2.5\x01", "id=2\x01px=9\x01"])
    assert rc == 0
    capsys.readouterr()
    rc = client_cli.main(["sow", "-s", _uri(typed_srv), "--type", "nvfix", "-t", "nv",
                          "--filter", "/px > 5"])
    out = capsys.readouterr().out.splitlines()
    assert rc == 0 and len(out) == 1
    line = json.loads(out[0])
    assert line["data"] == "id=2|px=9|" and line["fields"] == {"id": 2, "px": 9}
    rc = client_cli.main(["sow", "-s", _uri(typed_srv, "bson"), "-t", "jobs", "--format", "table"])
    table = capsys.readouterr().out
    assert rc == 0 and "state" in table and "done" in table


def _spark(*argv: str, stdin: bytes = b"") -> tuple[int, list[str], list[str]]:
    out, err = io.StringIO(), io.StringIO()
    rc = spark_cli.main(list(argv), stdin=io.BytesIO(stdin), out=out, err=err)
    return rc, out.getvalue().splitlines(), err.getvalue().splitlines()


def test_amps_spark_with_type(typed_srv) -> None:
    server = f"127.0.0.1:{typed_srv.server.listeners[0].port}"
    rc, _, err = _spark("publish", "-server", server, "-type", "fix", "-topic", "orders",
                        stdin=b"35=D\x0111=B\x0138=99\x01\n35=D\x0111=C\x0138=300\x01\n")
    assert rc == 0 and err == ["total messages published: 2 (" + err[0].split("(")[1]]
    rc, out, _ = _spark("sow", "-server", server, "-type", "fix", "-topic", "orders",
                        "-filter", "/38 > 100", "-orderby", "/38 DESC")
    assert rc == 0 and out == ["35=D\x0111=C\x0138=300\x01", "35=D\x0111=A\x0138=150\x01"]
    rc, out, _ = _spark("sow", "-server", server, "-type", "json", "-topic", "orders")
    assert rc == 0 and out == ['{"id":1,"q":2}']
