"""Non-JSON message types through the Spark sources: the ``amps-journal`` and ``amps`` sources
give each record's exact body bytes (``data_binary``) and the fields its type's codec reads
(``fields``, JSON text); a declared type (composite) reads with the ``config`` option."""

from __future__ import annotations

import json
import struct

import pytest

AMPS = pytest.importorskip("AMPS")
pytest.importorskip("pyspark")

from tests.support.servers import start_server  # noqa: E402

CONFIG = """<AMPSConfig><Name>typed-spark</Name>
<MessageTypes>
  <MessageType><Name>composite-json-binary</Name><Module>composite-local</Module>
    <MessageType>json</MessageType><MessageType>binary</MessageType></MessageType>
</MessageTypes>
<Transports><Transport><Name>any</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
  <Protocol>amps</Protocol></Transport></Transports>
<TransactionLog><JournalDirectory>{d}/journal</JournalDirectory>
  <Topic><Name>.*</Name><MessageType>fix</MessageType></Topic>
  <Topic><Name>.*</Name><MessageType>msgpack</MessageType></Topic>
  <Topic><Name>.*</Name><MessageType>composite-json-binary</MessageType></Topic>
</TransactionLog>
<SOW><Topic><Name>orders</Name><MessageType>fix</MessageType><Key>/11</Key>
  <FileName>{d}/%n.sow</FileName></Topic></SOW>
</AMPSConfig>"""

FIX = [b"35=D\x0111=A\x0138=150\x01", b"35=D\x0111=B\x0138=99\x01"]
MSGPACK = b"\x82\xa1k\xa1A\xa1n\x05"  # {"k": "A", "n": 5}
COMPOSITE = struct.pack(">I", 8) + b'{"id":1}' + struct.pack(">I", 3) + b"\x00\xff\x01"


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    d = tmp_path_factory.mktemp("typed-spark")
    cfg = d / "amps.xml"
    cfg.write_text(CONFIG.format(d=d))
    srv = start_server(CONFIG.format(d=d))
    port = srv.server.listeners[0].port
    try:
        for mt, topic, bodies in (("fix", "orders", FIX), ("msgpack", "mp", [MSGPACK]),
                                  ("composite-json-binary", "comp", [COMPOSITE])):
            c = AMPS.Client(f"spark-pub-{mt}")
            c.connect(f"tcp://127.0.0.1:{port}/amps/{mt}")
            c.logon(5000)
            for b in bodies:
                c.publish(topic, b)
            c.flush(5000)
            c.close()
        yield srv, d, cfg, port
    finally:
        srv.stop()


def _journal(spark, d, topic, **opts):
    r = spark.read.format("amps-journal").option("path", str(d / "journal")).option("topic", topic)
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load().orderBy("position").select("message_type", "data", "data_binary",
                                               "fields").collect()


def test_journal_source_gives_bytes_and_fields(spark, published):
    _, d, cfg, _ = published
    rows = _journal(spark, d, "orders")
    assert [bytes(r.data_binary) for r in rows] == FIX
    assert [r.message_type for r in rows] == ["fix", "fix"]
    assert [json.loads(r.fields) for r in rows] == [{"35": "D", "11": "A", "38": 150},
                                                    {"35": "D", "11": "B", "38": 99}]
    (mp,) = _journal(spark, d, "mp")
    assert bytes(mp.data_binary) == MSGPACK and json.loads(mp.fields) == {"k": "A", "n": 5}
    # a declared type: no fields without the config, its parts with it
    (comp,) = _journal(spark, d, "comp")
    assert bytes(comp.data_binary) == COMPOSITE and comp.fields is None
    (comp,) = _journal(spark, d, "comp", config=str(cfg))
    assert json.loads(comp.fields)["0"] == {"id": 1}


def test_amps_source_gives_bytes_and_fields(spark, published):
    _, _, _, port = published
    rows = (spark.read.format("amps").option("uri", f"tcp://127.0.0.1:{port}/amps/fix")
            .option("topic", "orders").option("filter", "/38 > 100").load().collect())
    assert [bytes(r.data_binary) for r in rows] == [FIX[0]]
    assert json.loads(rows[0].fields) == {"35": "D", "11": "A", "38": 150}
