"""The shapes of 60East's public HA configurations, written here in our own words and run as
separate processes with only their ports (and directories) chosen by the test (issue 20):

* a regional mesh like the positions demo: three single-instance Groups, each with an inbound
  replication transport (bare port, the demo's stray ``<Protocol>``) and two async Destinations
  addressed by Group only, ``Topic .*``, no PassThrough; SOW topics with expiration and a view
  that every instance computes from the records it holds;
* a sync pair like the Flink integration: one Group, Destinations by Name, ``PassThrough .*``,
  literal topics recorded in the transaction log, a distributed queue over one of them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import AMPS
import pytest

from tests.support.clients import Collector
from tests.support.procserver import ProcServer, free_port

REGIONS = {"NY-1": ("AMER", "americas"), "LDN-1": ("EMEA", "europe"), "HK-1": ("APAC", "asia")}


def region_xml(name: str, ports: dict[str, tuple[int, int]]) -> str:
    group = REGIONS[name][0]
    client, repl = ports[name]
    dests = "".join(f"""
    <Destination>
      <Group>{REGIONS[other][0]}</Group>
      <Topic><Name>.*</Name><MessageType>json</MessageType></Topic>
      <SyncType>async</SyncType>
      <Transport><Type>amps-replication</Type><InetAddr>{ports[other][1]}</InetAddr></Transport>
    </Destination>""" for other in REGIONS if other != name)
    return f"""<?xml version="1.0"?>
<AMPSConfig>
  <Name>{name}</Name>
  <Group>{group}</Group>
  <Transports>
    <Transport><Name>clients</Name><Type>tcp</Type><InetAddr>{client}</InetAddr><Protocol>amps</Protocol></Transport>
    <Transport><Name>amps-replication</Name><Type>amps-replication</Type><InetAddr>{repl}</InetAddr>
      <Protocol>amps</Protocol></Transport>
  </Transports>
  <SOW>
    <Topic><Name>accounts</Name><MessageType>json</MessageType><FileName>sow/%n.sow</FileName>
      <Key>/id</Key></Topic>
    <Topic><Name>fills</Name><MessageType>json</MessageType><FileName>sow/%n.sow</FileName>
      <Expiration>3d</Expiration><Key>/id</Key></Topic>
    <View><Name>exposure</Name><MessageType>json</MessageType><UnderlyingTopic>fills</UnderlyingTopic>
      <Projection><Field>/sym</Field><Field>SUM(/qty) AS /qty</Field><Field>COUNT(/id) AS /n</Field></Projection>
      <Grouping><Field>/sym</Field></Grouping></View>
  </SOW>
  <TransactionLog><JournalDirectory>journal</JournalDirectory>
    <Topic><Name>.*</Name><MessageType>json</MessageType></Topic></TransactionLog>
  <Replication>{dests}
  </Replication>
</AMPSConfig>
"""


def pair_xml(name: str, peer: str, ports: dict[str, tuple[int, int]]) -> str:
    client, repl = ports[name]
    topics = ("orders-in", "stamped", "jobs", "jobs-queue", "checkpoints")
    dest_topics = "".join(f"<Topic><MessageType>json</MessageType><Name>{t}</Name></Topic>" for t in topics)
    log_topics = "".join(f"<Topic><Name>{t}</Name><MessageType>json</MessageType></Topic>" for t in topics)
    return f"""<?xml version="1.0"?>
<AMPSConfig>
  <Name>{name}</Name>
  <Group>JobsPair</Group>
  <Transports>
    <Transport><Name>clients</Name><Type>tcp</Type><InetAddr>{client}</InetAddr><Protocol>amps</Protocol></Transport>
    <Transport><Name>amps-replication</Name><Type>amps-replication</Type>
      <InetAddr>localhost:{repl}</InetAddr></Transport>
  </Transports>
  <Replication>
    <Destination>{dest_topics}
      <Name>{peer}</Name><PassThrough>.*</PassThrough><Group>JobsPair</Group><SyncType>sync</SyncType>
      <Transport><InetAddr>localhost:{ports[peer][1]}</InetAddr><Type>amps-replication</Type></Transport>
    </Destination>
  </Replication>
  <TransactionLog><JournalDirectory>./files/{name}/journal</JournalDirectory><JournalSize>1GB</JournalSize>
    {log_topics}</TransactionLog>
  <SOW>
    <Queue><Name>jobs-queue</Name><MessageType>json</MessageType><Semantics>at-most-once</Semantics>
      <UnderlyingTopic>jobs</UnderlyingTopic><MaxBacklog>500</MaxBacklog>
      <MaxPerSubscriptionBacklog>100</MaxPerSubscriptionBacklog></Queue>
  </SOW>
</AMPSConfig>
"""


class Procs:
    def __init__(self) -> None:
        self.procs: list[ProcServer] = []
        self.clients: list[AMPS.Client] = []

    def start(self, tmp_path: Path, name: str, xml: str, client_port: int) -> AMPS.Client:
        d = tmp_path / name
        d.mkdir()
        cfg = d / "amps.xml"
        cfg.write_text(xml)
        proc = ProcServer(d / "data", cfg)
        proc.port = client_port  # --listen names the port the config gives the client transport
        self.procs.append(proc.start())
        c = AMPS.Client(f"pub-{name}")
        c.connect(proc.uri)
        c.logon(5000)
        self.clients.append(c)
        return c

    def close(self) -> None:
        for c in self.clients:
            c.close()
        for p in self.procs:
            p.stop()


@pytest.fixture
def procs() -> Iterator[Procs]:
    p = Procs()
    yield p
    p.close()


def journal(client: AMPS.Client, topic: str, count: int) -> list[tuple[str, str]]:
    got = Collector(lambda m: (m.get_bookmark(), json.loads(m.get_data())["id"]))
    cid = client.bookmark_subscribe(got, topic, AMPS.Client.Bookmarks.EPOCH)
    got.wait_for(count, 20)
    client.unsubscribe(cid)
    return sorted(got.items, key=lambda x: x[1])


def test_regional_mesh_shape_replicates_and_each_instance_computes_its_view(tmp_path, procs):
    ports = {n: (free_port(), free_port()) for n in REGIONS}
    clients = {n: procs.start(tmp_path, n, region_xml(n, ports), ports[n][0]) for n in REGIONS}
    for i, (n, c) in enumerate(clients.items()):
        for k in range(3):
            c.publish("fills", json.dumps({"id": f"{n}-{k}", "sym": "ABC" if k else "XYZ", "qty": 10 * (i + 1)}))
    views = [journal(c, "fills", 9) for c in clients.values()]
    assert len(views[0]) == 9 and views[0] == views[1] == views[2]
    for c in clients.values():  # the view, computed on each instance from the 9 fills it holds
        rows = {r["sym"]: r for r in (json.loads(m.get_data()) for m in c.sow("exposure")
                                      if m.get_command() == "sow")}
        assert rows == {"XYZ": {"sym": "XYZ", "qty": 60, "n": 3}, "ABC": {"sym": "ABC", "qty": 120, "n": 6}}


def test_sync_pair_shape_with_pass_through_and_a_queue_replicates(tmp_path, procs):
    ports = {n: (free_port(), free_port()) for n in ("JOBS-1", "JOBS-2")}
    one = procs.start(tmp_path, "JOBS-1", pair_xml("JOBS-1", "JOBS-2", ports), ports["JOBS-1"][0])
    two = procs.start(tmp_path, "JOBS-2", pair_xml("JOBS-2", "JOBS-1", ports), ports["JOBS-2"][0])
    for k in range(3):
        one.publish("jobs", json.dumps({"id": f"1-{k}"}))
        two.publish("jobs", json.dumps({"id": f"2-{k}"}))
        one.publish("stamped", json.dumps({"id": f"s-{k}"}))
    assert journal(one, "jobs", 6) == journal(two, "jobs", 6)
    assert len(journal(two, "jobs", 6)) == 6
    assert journal(two, "stamped", 3) == journal(one, "stamped", 3)
