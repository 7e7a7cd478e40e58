"""Enrichment on replicated topics: the instance that takes a publish enriches it, and the
enriched message is what it journals and replicates; the destination stores it as it comes
(AMPS does not enrich a replicated message again), even with the same Enrichment configured.
Driven by the official Python client on two emulators (A replicates to B)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from amps_emulator.config import loads_config
from tests.support.clients import Collector, logged_on
from tests.support.procserver import free_port
from tests.support.servers import ServerThread, until

AMPS = pytest.importorskip("AMPS")


def _node(name: str, data: Path, *, listen: int | None = None, dest: int | None = None) -> str:
    listener = "" if listen is None else (
        f"<Transport><Name>repl</Name><Type>amps-replication</Type>"
        f"<InetAddr>127.0.0.1:{listen}</InetAddr></Transport>")
    replication = "" if dest is None else f"""<Replication><Destination>
        <Name>B</Name><Group>B</Group><SyncType>async</SyncType>
        <Topic><Name>.*</Name><MessageType>json</MessageType>
          <ExcludeValidation>replicate</ExcludeValidation></Topic>
        <Transport><Type>amps-replication</Type><InetAddr>127.0.0.1:{dest}</InetAddr>
          <ReconnectTimeout>0.05</ReconnectTimeout></Transport></Destination></Replication>"""
    return f"""<AMPSConfig><Name>{name}</Name>
  <Transports>
    <Transport><Name>json-tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
      <MessageType>json</MessageType><Protocol>amps</Protocol></Transport>
    {listener}
  </Transports>
  <TransactionLog><JournalDirectory>{data}/journal</JournalDirectory>
    <Topic><Name>.*</Name><MessageType>json</MessageType></Topic></TransactionLog>
  <SOW><Topic><Name>inventory</Name><MessageType>json</MessageType><Key>/sku</Key>
    <FileName>{data}/sow/%n.sow</FileName>
    <Enrichment>
      <Field>AMPS_INSTANCE_NAME() AS /recordedBy</Field>
      <Field>COALESCE(/count OF CURRENT, /count OF PREVIOUS, 0) AS /count</Field>
      <Field>COALESCE(/changes OF PREVIOUS, 0) + 1 AS /changes</Field>
    </Enrichment></Topic></SOW>
  {replication}
</AMPSConfig>"""


@pytest.fixture
def pair(tmp_path):
    port = free_port()
    b = ServerThread(loads_config(_node("B", tmp_path / "b", listen=port), "b.xml")).start()
    a = ServerThread(loads_config(_node("A", tmp_path / "a", dest=port), "a.xml")).start()
    yield a, b
    a.stop()
    b.stop()


def _records(srv: ServerThread) -> list[dict]:
    c = logged_on(srv.uri, "reader")
    try:
        return [json.loads(m.get_data()) for m in c.sow("inventory") if m.get_command() == "sow"]
    finally:
        c.close()


def test_the_destination_keeps_the_source_s_enrichment(pair):
    a, b = pair
    on_b = logged_on(b.uri, "watcher")
    live = Collector(lambda m: json.loads(m.get_data()))
    on_b.subscribe(live, "inventory")
    pub = logged_on(a.uri, "stocker")
    try:
        pub.publish("inventory", json.dumps({"sku": "X1", "count": 5}))
        pub.delta_publish("inventory", json.dumps({"sku": "X1", "note": "recounted"}))
        pub.publish("inventory", json.dumps({"sku": "X2"}))
        pub.flush()
        got = live.wait_for(3)
        assert [(m["sku"], m["recordedBy"], m["changes"]) for m in got] == [
            ("X1", "A", 1), ("X1", "A", 2), ("X2", "A", 1)]
        want = [{"sku": "X1", "count": 5, "recordedBy": "A", "changes": 2, "note": "recounted"},
                {"sku": "X2", "recordedBy": "A", "count": 0, "changes": 1}]
        assert sorted(_records(a), key=lambda r: r["sku"]) == want
        assert until(lambda: sorted(_records(b), key=lambda r: r["sku"]) == want)
    finally:
        pub.close()
        on_b.close()
