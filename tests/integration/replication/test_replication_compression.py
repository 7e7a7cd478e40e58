"""``Destination/Compression``: instance A replicates to B through a proxy that counts the
bytes on the wire. With Compression enabled (``zlib``, the default, or ``zstd``) B still gets
every message, and the link carries a fraction of the bytes of the frames A sent (the
Destination's ``bytes_out``); with it disabled the wire carries at least those bytes."""

from __future__ import annotations

import json
from pathlib import Path

import AMPS
import pytest

from amps_emulator.config import loads_config
from amps_emulator.pair import free_port, pair_config
from tests.support.faultproxy import Proxies
from tests.support.servers import ServerThread, until

MESSAGES = 300


def _config(name: str, peer: str, port: int, peer_port: int, data: Path, compression: str | None) -> str:
    xml = pair_config(name, peer, repl_port=port, peer_repl_port=peer_port, data_dir=data,
                      sync_type="async", reconnect_timeout=0.05, sow_topics=[("orders", "/id")])
    if compression is not None:
        setting = "<Compression>enabled</Compression>" + (
            "" if compression == "default" else f"<CompressionType>{compression}</CompressionType>")
        assert "<SyncType>async</SyncType>" in xml
        xml = xml.replace("<SyncType>async</SyncType>", "<SyncType>async</SyncType>" + setting, 1)
    return xml


def replicate(tmp_path: Path, compression: str | None) -> tuple[int, int, list[dict]]:
    """(bytes A's Destination sent as frames, bytes on the wire from A to B, B's SOW)."""
    a_port, b_port = free_port(), free_port()
    b = ServerThread(loads_config(_config("B", "A", b_port, a_port, tmp_path / "b", None), "b.xml")).start()
    proxies = Proxies()
    proxy = proxies.add("A>B", b_port)
    a = ServerThread(loads_config(_config("A", "B", a_port, proxy.port, tmp_path / "a", compression),
                                  "a.xml")).start()
    clients: list[AMPS.Client] = []
    try:
        pub = AMPS.Client("compression-pub")
        clients.append(pub)
        pub.connect(a.uri)
        pub.logon(5000)
        for i in range(MESSAGES):
            pub.publish("orders", json.dumps({"id": i, "symbol": ["MSFT", "IBM", "AAPL"][i % 3],
                                              "side": "buy" if i % 2 else "sell", "qty": 100 + i,
                                              "trader": f"desk-{i % 7}", "note": "replicated order"}))
        pub.publish_flush(5000)
        reader = AMPS.Client("compression-read")
        clients.append(reader)
        reader.connect(b.uri)
        reader.logon(5000)

        def sow() -> list[dict]:
            return [json.loads(m.get_data()) for m in reader.sow("orders", timeout=5000)
                    if m.get_command() == "sow"]

        assert until(lambda: len(sow()) == MESSAGES, timeout=20)
        st = a.call(lambda: a.server.replication.state("B"))
        assert a.call(lambda: st.messages_out) == MESSAGES
        return a.call(lambda: st.bytes_out), proxy.bytes_up, sow()
    finally:
        for c in clients:
            c.close()
        a.stop()
        proxies.close()
        b.stop()


@pytest.mark.parametrize("codec", ["default", "zstd"])
def test_a_compressed_link_carries_fewer_bytes(tmp_path, codec):
    sent, wire, sow = replicate(tmp_path / "compressed", codec)
    assert sorted(r["id"] for r in sow) == list(range(MESSAGES))
    assert {r["trader"] for r in sow} == {f"desk-{i}" for i in range(7)}
    assert wire * 3 < sent, f"{codec}: {wire} bytes on the wire for {sent} bytes of frames"
    plain_sent, plain_wire, _ = replicate(tmp_path / "plain", None)
    assert plain_wire >= plain_sent  # uncompressed: the frames, the hello and the acks' peer


def test_a_passive_destination_compresses_over_the_connection_it_was_given(tmp_path):
    """B's Destination to A is passive (no InetAddr) and compressed with zstd: A connects to B
    (plain: A's own Destination does not compress), and B's records come back over that
    connection compressed, while A's go out plain on it."""
    a_port, b_port = free_port(), free_port()
    b_xml = _config("B", "A", b_port, a_port, tmp_path / "b", "zstd")
    b_xml = b_xml.replace(f"<InetAddr>127.0.0.1:{a_port}</InetAddr>", "", 1)
    assert f":{a_port}<" not in b_xml
    b = ServerThread(loads_config(b_xml, "b.xml")).start()
    proxies = Proxies()
    proxy = proxies.add("A>B", b_port)
    a = ServerThread(loads_config(_config("A", "B", a_port, proxy.port, tmp_path / "a", None), "a.xml")).start()
    clients: list[AMPS.Client] = []
    try:
        for srv, name in ((a, "on-a"), (b, "on-b")):
            c = AMPS.Client(f"compression-{name}")
            clients.append(c)
            c.connect(srv.uri)
            c.logon(5000)
            for i in range(MESSAGES):
                c.publish("orders", json.dumps({"id": f"{name}-{i}", "qty": i, "note": "both ways"}))
            c.publish_flush(5000)

        def records(client: AMPS.Client) -> int:
            return sum(m.get_command() == "sow" for m in client.sow("orders", timeout=5000))

        assert until(lambda: [records(c) for c in clients] == [2 * MESSAGES] * 2, timeout=20)
        a_sent = a.call(lambda: a.server.replication.state("B").bytes_out)
        b_sent = b.call(lambda: b.server.replication.state("A").bytes_out)
        assert proxy.bytes_up >= a_sent  # A to B: plain
        assert proxy.bytes_down * 3 < b_sent, (proxy.bytes_down, b_sent)  # B to A: zstd
    finally:
        for c in clients:
            c.close()
        a.stop()
        proxies.close()
        b.stop()
