"""Every message type served through the server, tested with the official Python client.

Per type (beyond-json.md A.3/A.8): pub/sub with a content filter on a typed field, a keyed SOW
(latest per key), delta merge where AMPS offers it, bookmark replay byte-identical, and type
scoping (the same topic name over json is another topic). Bodies are built with the type's
own codec (the codecs have their own unit and property tests); what the server delivers is
compared byte for byte with what was published.
"""

from __future__ import annotations

import queue
import struct
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from amps_emulator.protocol.msgtypes import MessageTypeDecl, build_registry
from tests.integration.conftest import start_server

AMPS = pytest.importorskip("AMPS")

_REG = build_registry([MessageTypeDecl("composite-json-binary", module="composite-local",
                                       parts=("json", "binary"))])


def _composite(tree: dict) -> bytes:
    part = _REG.codec("json").encode(tree)
    blob = bytes(range(7))
    return struct.pack(">I", len(part)) + part + struct.pack(">I", len(blob)) + blob


@dataclass
class Kind:
    name: str
    #: a body with key ``k`` and numeric field ``n`` (and optional extra fields)
    body: Callable[..., bytes]
    key: str  # the SOW Key
    num: str  # the path of ``n`` in a filter
    delta: bool = True


def _flat(name: str) -> Callable[..., bytes]:
    codec = _REG.codec(name)
    return lambda k, n, **more: codec.encode({"k": k, "n": n, **more})


KINDS = [
    Kind("fix", lambda k, n, **more: _REG.codec("fix").encode(
        {"11": k, "38": n, **{str(58 + i): v for i, v in enumerate(more.values())}}), "/11", "/38"),
    Kind("nvfix", _flat("nvfix"), "/k", "/n"),
    Kind("xml", lambda k, n, **more: _REG.codec("xml").encode({"o": {"k": k, "n": n, **more}}),
         "/o/k", "/o/n"),
    Kind("msgpack", _flat("msgpack"), "/k", "/n"),
    Kind("bflat", _flat("bflat"), "/k", "/n"),
    Kind("composite-json-binary", lambda k, n, **more: _composite({"k": k, "n": n, **more}),
         "/0/k", "/0/n"),
]

CONFIG = """<AMPSConfig><Name>msgtypes</Name>
<MessageTypes>
  <MessageType><Name>composite-json-binary</Name><Module>composite-local</Module>
    <MessageType>json</MessageType><MessageType>binary</MessageType></MessageType>
</MessageTypes>
<Transports>
  <Transport><Name>any</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr><Protocol>amps</Protocol></Transport>
  <Transport><Name>json-only</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
    <Protocol>amps</Protocol><MessageType>json</MessageType></Transport>
</Transports>
<TransactionLog><JournalDirectory>{d}/journal</JournalDirectory>
  {txlog}
</TransactionLog>
<SOW>
  <Topic><Name>orders</Name><MessageType>json</MessageType><Key>/k</Key><FileName>{d}/%n.sow</FileName></Topic>
  {sow}
</SOW>
</AMPSConfig>"""


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    d = tmp_path_factory.mktemp("msgtypes")
    txlog = "\n".join(f"<Topic><Name>.*</Name><MessageType>{k.name}</MessageType></Topic>"
                      for k in KINDS) + "<Topic><Name>.*</Name><MessageType>json</MessageType></Topic>"
    sow = "\n".join(f"<Topic><Name>orders</Name><MessageType>{k.name}</MessageType>"
                    f"<Key>{k.key}</Key><FileName>{d}/%n.sow</FileName></Topic>" for k in KINDS)
    s = start_server(CONFIG.format(d=d, txlog=txlog, sow=sow))
    yield s
    s.stop()


def _uri(srv, which: int, mt: str) -> str:
    return f"tcp://127.0.0.1:{srv.server.listeners[which].port}/amps/{mt}"


def _client(srv, name: str, mt: str, which: int = 0):
    c = AMPS.Client(name)
    c.connect(_uri(srv, which, mt))
    c.logon(5000)
    return c


def _sow(c, topic: str, flt: str | None = None) -> list[bytes]:
    cmd = AMPS.Command("sow").set_topic(topic)
    if flt:
        cmd.set_filter(flt)
    return [m.get_data_raw() for m in c.execute(cmd) if m.get_command() == "sow"]


def _raw(m) -> bytes:
    return bytes(m.get_data_raw())


class Box:
    """Messages a subscription received, taken with a deadline (no sleeping)."""

    def __init__(self) -> None:
        self.q: queue.Queue[bytes] = queue.Queue()

    def __call__(self, m) -> None:
        if m.get_command() == "publish":
            self.q.put(_raw(m))

    def take(self, n: int) -> list[bytes]:
        return [self.q.get(timeout=5) for _ in range(n)]

    def empty(self) -> bool:
        return self.q.empty()


@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
def test_type(srv, kind: Kind) -> None:
    topic = "orders"
    c = _client(srv, f"pub-{kind.name}", kind.name)
    js = _client(srv, f"json-{kind.name}", "json")
    try:
        filtered, alljs = Box(), Box()
        c.subscribe(filtered, topic, f"{kind.num} > 100")
        js.subscribe(alljs, topic)
        a1, b1, a2 = kind.body("A", 150), kind.body("B", 99), kind.body("A", 200)
        for body in (a1, b1, a2):
            c.publish(topic, body)
        c.publish_flush()
        # filter on a typed field: 150 and 200 pass, 99 does not; bytes as published
        assert filtered.take(2) == [a1, a2]
        # keyed SOW: the latest per key, byte-identical
        assert sorted(map(bytes, _sow(c, topic))) == sorted([a2, b1])
        assert [bytes(b) for b in _sow(c, topic, f"{kind.num} > 100")] == [a2]
        # type scoping: the json topic of the same name saw none of it
        js.publish(topic, '{"k":"A","n":1}')
        js.publish_flush()
        assert alljs.take(1) == [b'{"k":"A","n":1}']
        assert filtered.empty()
        assert [bytes(b) for b in _sow(js, topic)] == [b'{"k":"A","n":1}']
        # bookmark replay from the start: every publish of this type, byte-identical
        replay = Box()
        c.bookmark_subscribe(replay, topic, "0")
        assert replay.take(3) == [a1, b1, a2]
        # delta merge: the stored record keeps its fields and takes the delta's
        if kind.delta:
            c.delta_publish(topic, kind.body("A", 300, x="y"))
            c.publish_flush()
            (merged,) = _sow(c, topic, f"{kind.num} = 300")
            tree = _REG.codec(kind.name).decode(bytes(merged))
            assert "y" in repr(tree)
    finally:
        c.close()
        js.close()


def test_fixed_type_transport_refuses_another_type(srv) -> None:
    c = AMPS.Client("fixed-nvfix")
    c.connect(_uri(srv, 1, "nvfix"))
    with pytest.raises(AMPS.AMPSException, match="message type"):
        c.logon(5000)
    c.close()
    ok = _client(srv, "fixed-json", "json", 1)
    ok.close()


def test_unknown_type_is_refused(srv) -> None:
    c = AMPS.Client("nosuch")
    c.connect(_uri(srv, 0, "nosuch"))
    with pytest.raises(AMPS.AMPSException, match="message type"):
        c.logon(5000)
    c.close()
