"""bson and protobuf topics through the server, tested with the official Python client.

As for the other types (test_msgtypes_server.py): pub/sub with a filter on a typed field, a
keyed SOW (latest per key), delta merge (bson; proto2 protobuf), bookmark replay
byte-identical, type scoping; and a protobuf type whose .proto does not compile stops the
start-up with the config position and protoc's file:line.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import bson
import pytest

from amps_emulator.config import ConfigError, loads_config
from amps_emulator.protocol.msgtypes import MessageCodec, MessageTypeDecl, build_registry
from tests.integration.msgtypes.test_msgtypes_server import Box, _sow
from tests.support.clients import client_for
from tests.support.servers import start_server

AMPS = pytest.importorskip("AMPS")
pytest.importorskip("grpc_tools")

PROTO = """syntax = "proto2";
package emu;
message Row { required string k = 1; optional int64 n = 2; optional string x = 3;
              optional Inner inner = 4; }
message Inner { optional string tag = 1; }
"""

CONFIG = """<AMPSConfig><Name>typed2</Name>
<MessageTypes>
  <MessageType><Name>rows-pb</Name><Module>protobuf</Module>
    <ProtoPath>defs;{d}</ProtoPath><ProtoFile>defs/row.proto</ProtoFile><Type>emu.Row</Type>
  </MessageType>
</MessageTypes>
<Transports>
  <Transport><Name>any</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr><Protocol>amps</Protocol></Transport>
</Transports>
<TransactionLog><JournalDirectory>{d}/journal</JournalDirectory>
  <Topic><Name>.*</Name><MessageType>bson</MessageType></Topic>
  <Topic><Name>.*</Name><MessageType>rows-pb</MessageType></Topic>
  <Topic><Name>.*</Name><MessageType>json</MessageType></Topic>
</TransactionLog>
<SOW>
  <Topic><Name>orders</Name><MessageType>json</MessageType><Key>/k</Key><FileName>{d}/%n.sow</FileName></Topic>
  <Topic><Name>orders</Name><MessageType>bson</MessageType><Key>/k</Key><FileName>{d}/%n.sow</FileName></Topic>
  <Topic><Name>orders</Name><MessageType>rows-pb</MessageType><Key>/k</Key><FileName>{d}/%n.sow</FileName></Topic>
</SOW>
</AMPSConfig>"""


@pytest.fixture(scope="module")
def proto_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("typed2")
    (d / "row.proto").write_text(PROTO)
    return d


@pytest.fixture(scope="module")
def proto_srv(proto_dir):
    s = start_server(CONFIG.format(d=proto_dir))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def codecs(proto_dir) -> dict[str, MessageCodec]:
    reg = build_registry([MessageTypeDecl("rows-pb", module="protobuf",
                                          proto_paths=(f"defs;{proto_dir}",),
                                          proto_file="defs/row.proto", proto_type="emu.Row")])
    return {"bson": reg.codec("bson"), "rows-pb": reg.codec("rows-pb")}


def _bodies(codec: MessageCodec) -> Callable[..., bytes]:
    return lambda k, n, **more: codec.encode({"k": k, "n": n, **more})


@pytest.mark.parametrize("mt", ["bson", "rows-pb"])
def test_type(proto_srv, codecs, mt: str) -> None:
    codec = codecs[mt]
    body = _bodies(codec)
    topic = "orders"
    c = client_for(proto_srv, f"pub-{mt}", mt)
    js = client_for(proto_srv, f"json-{mt}", "json")
    try:
        filtered, alljs = Box(), Box()
        c.subscribe(filtered, topic, "/n > 100")
        js.subscribe(alljs, topic)
        a1, b1, a2 = body("A", 150), body("B", 99), body("A", 200)
        for b in (a1, b1, a2):
            c.publish(topic, b)
        c.publish_flush()
        assert filtered.take(2) == [a1, a2]
        assert sorted(map(bytes, _sow(c, topic))) == sorted([a2, b1])
        assert [bytes(b) for b in _sow(c, topic, "/n > 100")] == [a2]
        js.publish(topic, '{"k":"A","n":1}')
        js.publish_flush()
        assert alljs.take(1) == [b'{"k":"A","n":1}']
        assert filtered.empty()
        replay = Box()
        c.bookmark_subscribe(replay, topic, "0")
        assert replay.take(3) == [a1, b1, a2]
        deltas = Box()
        c.delta_subscribe(deltas, topic)
        c.delta_publish(topic, body("A", 200, x="y"))
        c.publish_flush()
        (merged,) = _sow(c, topic, "/n = 200")
        assert codec.decode(bytes(merged)) == {"k": "A", "n": 200, "x": "y"}
        (got,) = deltas.take(1)
        assert codec.decode(got) == {"k": "A", "x": "y"}
    finally:
        c.close()
        js.close()


def test_bson_nested_typed_filter(proto_srv) -> None:
    c = client_for(proto_srv, "bson-nested", "bson")
    try:
        got = Box()
        c.subscribe(got, "nested", "/o/p >= 2.5 AND /o/tags = 'b'")
        hit = bson.encode({"o": {"p": 2.5, "tags": ["a", "b"]}})
        c.publish("nested", bson.encode({"o": {"p": 2.4, "tags": ["b"]}}))
        c.publish("nested", hit)
        c.publish_flush()
        assert got.take(1) == [hit]
    finally:
        c.close()


def test_a_proto_that_does_not_compile_stops_the_start(proto_dir, tmp_path) -> None:
    (tmp_path / "bad.proto").write_text('syntax = "proto2";\nmessage Row {\n  oops k = 1;\n}\n')
    text = CONFIG.format(d=tmp_path).replace("<ProtoFile>defs/row.proto", "<ProtoFile>defs/bad.proto")
    with pytest.raises(ConfigError) as e:
        loads_config(text, "typed2.xml")
    msg = str(e.value)
    assert "typed2.xml:3" in msg and "bad.proto:3:3: Expected" in msg
