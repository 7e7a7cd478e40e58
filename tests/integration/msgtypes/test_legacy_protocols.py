"""The legacy fix, nvfix and xml protocols, with the official Python client and a raw socket.

The official client speaks them when the URI's path names the protocol (``tcp://h:p/fix``);
the connection's type is the transport's ``MessageType``. Per protocol: pub/sub with a filter
on a typed field, a keyed SOW (a batch of several records), delta merge, bookmark replay
byte-identical. A raw socket checks the documented header format itself, and that a payload
that is not a header closes only that connection.
"""

from __future__ import annotations

import socket

import pytest

from amps_emulator.config import ConfigError, loads_config
from amps_emulator.protocol.msgtypes import build_registry
from tests.integration.msgtypes.test_msgtypes_server import Box, _sow
from tests.support.clients import client_for
from tests.support.servers import start_server

AMPS = pytest.importorskip("AMPS")

CONFIG = """<AMPSConfig><Name>legacy</Name>
<Transports>
  <Transport><Name>fix</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
    <Protocol>fix</Protocol><MessageType>fix</MessageType></Transport>
  <Transport><Name>nvfix</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
    <Protocol>nvfix</Protocol><MessageType>nvfix</MessageType></Transport>
  <Transport><Name>xml</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
    <Protocol>xml</Protocol><MessageType>xml</MessageType></Transport>
  <Transport><Name>any</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
    <Protocol>amps</Protocol></Transport>
</Transports>
<TransactionLog><JournalDirectory>{d}/journal</JournalDirectory>
  <Topic><Name>.*</Name><MessageType>fix</MessageType></Topic>
  <Topic><Name>.*</Name><MessageType>nvfix</MessageType></Topic>
  <Topic><Name>.*</Name><MessageType>xml</MessageType></Topic>
</TransactionLog>
<SOW>
  <Topic><Name>orders</Name><MessageType>fix</MessageType><Key>/11</Key><FileName>{d}/%n.sow</FileName></Topic>
  <Topic><Name>orders</Name><MessageType>nvfix</MessageType><Key>/k</Key><FileName>{d}/%n.sow</FileName></Topic>
  <Topic><Name>orders</Name><MessageType>xml</MessageType><Key>/o/k</Key><FileName>{d}/%n.sow</FileName></Topic>
</SOW>
</AMPSConfig>"""

_REG = build_registry()
_fix, _nvfix, _xml = _REG.codec("fix"), _REG.codec("nvfix"), _REG.codec("xml")

# protocol: (listener index, body(k, n, **more), the path of n)
KINDS = {
    "fix": (0, lambda k, n, **m: _fix.encode({"11": k, "38": n, **({"58": m["x"]} if m else {})}),
            "/38"),
    "nvfix": (1, lambda k, n, **m: _nvfix.encode({"k": k, "n": n, **m}), "/n"),
    "xml": (2, lambda k, n, **m: _xml.encode({"o": {"k": k, "n": n, **m}}), "/o/n"),
}


@pytest.fixture(scope="module")
def legacy_srv(tmp_path_factory):
    s = start_server(CONFIG.format(d=tmp_path_factory.mktemp("legacy")))
    yield s
    s.stop()


def test_listener_uri_names_the_protocol(legacy_srv) -> None:
    assert [lst.uri.rsplit("/", 1)[1] for lst in legacy_srv.server.listeners[:3]] == ["fix", "nvfix",
                                                                               "xml"]


@pytest.mark.parametrize("proto", list(KINDS))
def test_official_client_over_legacy_protocol(legacy_srv, proto: str) -> None:
    which, body, num = KINDS[proto]
    codec = _REG.codec(proto)
    c = client_for(legacy_srv, f"legacy-{proto}", which=which)
    other = AMPS.Client(f"amps-{proto}")
    other.connect(f"tcp://127.0.0.1:{legacy_srv.server.listeners[3].port}/amps/{proto}")
    other.logon(5000)
    try:
        filtered = Box()
        c.subscribe(filtered, "orders", f"{num} > 100")
        a1, b1, a2 = body("A", 150), body("B", 99), body("A", 200)
        for b in (a1, b1, a2):
            c.publish("orders", b)
        c.publish_flush()
        assert filtered.take(2) == [a1, a2]
        # a SOW batch of two records, byte-identical, and a filtered query
        assert sorted(map(bytes, _sow(c, "orders"))) == sorted([a2, b1])
        assert [bytes(b) for b in _sow(c, "orders", f"{num} < 100")] == [b1]
        # the same topic over the amps protocol with the same type is the same topic
        assert sorted(map(bytes, _sow(other, "orders"))) == sorted([a2, b1])
        replay = Box()
        c.bookmark_subscribe(replay, "orders", "0")
        assert replay.take(3) == [a1, b1, a2]
        c.delta_publish("orders", body("A", 200, x="y"))
        c.publish_flush()
        (merged,) = _sow(c, "orders", f"{num} = 200")
        assert "'y'" in repr(codec.decode(bytes(merged)))
    finally:
        c.close()
        other.close()


def _frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


def _read_frame(sock: socket.socket) -> bytes:
    def exact(n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return buf

    return exact(int.from_bytes(exact(4), "big"))


def _tags(payload: bytes) -> tuple[dict[str, str], bytes]:
    head, _, body = payload.partition(b"\x02")
    fields = dict(f.decode().split("=", 1) for f in head.split(b"\x01") if f)
    return fields, body


def test_raw_fix_header_format(legacy_srv) -> None:
    port = legacy_srv.server.listeners[0].port
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(_frame(b"20000=logon\x0120001=1\x0120002=raw-fix\x0120008=processed\x01\x02"))
        ack, _ = _tags(_read_frame(s))
        assert ack["20000"] == "ack" and ack["20001"] == "1" and ack["20018"] == "success"
        s.sendall(_frame(b"20000=subscribe\x0120001=2\x0120005=raw\x0120008=processed\x01"
                         b"20006=/55 = 'IBM'\x01\x02"))
        assert _tags(_read_frame(s))[0]["20018"] == "success"
        for sym in (b"MSFT", b"IBM"):
            s.sendall(_frame(b"20000=p\x0120005=raw\x01\x0235=D\x0155=" + sym + b"\x01"))
        fields, body = _tags(_read_frame(s))
        assert fields["20000"] == "publish" and fields["20005"] == "raw"
        assert body == b"35=D\x0155=IBM\x01" and fields["20058"] == str(len(body))


def test_raw_xml_header_format(legacy_srv) -> None:
    port = legacy_srv.server.listeners[2].port
    env = (b"<SOAP-ENV:Envelope><SOAP-ENV:Header>%s</SOAP-ENV:Header>"
           b"<SOAP-ENV:Body>%s</SOAP-ENV:Body></SOAP-ENV:Envelope>")
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(_frame(env % (b"<Cmd>logon</Cmd><CmdId><![CDATA[1]]></CmdId>"
                                b"<ClntName><![CDATA[raw&xml]]></ClntName>"
                                b"<AckTyp>processed</AckTyp>", b"")))
        ack = _read_frame(s)
        assert ack.startswith(b"<SOAP-ENV:Envelope><SOAP-ENV:Header><Cmd>ack</Cmd>")
        assert b"<Status>success</Status>" in ack and b"<CmdId>1</CmdId>" in ack
        s.sendall(_frame(env % (b"<Cmd>subscribe</Cmd><CmdId>2</CmdId><Tpc>raw</Tpc>"
                                b"<AckTyp>processed</AckTyp>", b"")))
        assert b"<Status>success</Status>" in _read_frame(s)
        s.sendall(_frame(env % (b"<Cmd>p</Cmd><Tpc>raw</Tpc>", b"<a><b>1</b></a>")))
        msg = _read_frame(s)
        assert b"<Cmd>publish</Cmd>" in msg and b"<Tpc>raw</Tpc>" in msg
        assert msg.endswith(b"<SOAP-ENV:Body><a><b>1</b></a></SOAP-ENV:Body>"
                            b"</SOAP-ENV:Envelope>")


@pytest.mark.parametrize("junk", [b"{\"c\":\"logon\"}", b"\x00\x01\x02", b"20000=\xff\x01\x02",
                                  b"c=logon\x01\x02"])
def test_a_payload_that_is_no_header_closes_only_that_connection(legacy_srv, junk: bytes) -> None:
    port = legacy_srv.server.listeners[0].port
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(_frame(junk))
        with pytest.raises((ConnectionError, OSError)):
            _read_frame(s)
    c = client_for(legacy_srv, "still-served", which=0)
    c.close()


def test_legacy_transport_needs_a_message_type(tmp_path) -> None:
    text = """<AMPSConfig><Name>x</Name><Transports>
  <Transport><Name>f</Name><Type>tcp</Type><InetAddr>1234</InetAddr><Protocol>fix</Protocol>
  </Transport></Transports></AMPSConfig>"""
    with pytest.raises(ConfigError) as e:
        loads_config(text, "legacy.xml")
    assert "legacy.xml:2" in str(e.value) and "needs a <MessageType>" in str(e.value)
