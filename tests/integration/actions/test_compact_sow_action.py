"""``amps-action-do-compact-sow`` on a real server, driven by the official Python client: after
most records of a large SOW topic are deleted, the action (run from an ``on-admin`` trigger)
shrinks ``data.mdb`` while a publisher, a subscriber and a querying client go on; nothing
published meanwhile is lost, queries always see the whole SOW, and a restart reads the
compacted file."""

from __future__ import annotations

import json
import logging
import os
import threading

import AMPS

from amps_emulator.config import loads_config
from tests.support.clients import Collector
from tests.support.servers import ServerThread, until

N = 50_000
KEEP_EVERY = 50
LIVE = 200  # records updated while the compaction goes on


def config(d) -> str:
    return f"""<AMPSConfig><Name>compact-test</Name>
<Admin><InetAddr>127.0.0.1:0</InetAddr></Admin>
<Transports><Transport><Name>json-tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
  <MessageType>json</MessageType><Protocol>amps</Protocol></Transport></Transports>
<SOW>
  <Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
    <FileName>{d}/sow/%n.sow</FileName></Topic>
  <Topic><Name>scratch</Name><MessageType>json</MessageType><Key>/id</Key>
    <Durability>transient</Durability></Topic>
</SOW>
<Actions>
  <Action>
    <On><Module>amps-action-on-admin</Module><Options><Path>compact</Path></Options></On>
    <Do><Module>amps-action-do-compact-sow</Module>
      <Options><Topic>orders</Topic><MessageType>json</MessageType></Options></Do>
    <Do><Module>amps-action-do-compact-sow</Module>
      <Options><Topic>scratch</Topic><MessageType>json</MessageType></Options></Do>
    <Do><Module>amps-action-do-publish-message</Module>
      <Options><Topic>compact-done</Topic><MessageType>json</MessageType><Data>{{"done":1}}</Data></Options></Do>
  </Action>
</Actions>
</AMPSConfig>"""


def start(d) -> ServerThread:
    return ServerThread(loads_config(config(d), "compact.xml")).start()


def client(srv, name: str):
    c = AMPS.Client(name)
    c.connect(srv.uri)
    c.logon(5000)
    return c


def sow_ids(c) -> list[int]:
    return sorted(json.loads(m.get_data())["id"]
                  for m in c.sow("orders", timeout=30000, batch_size=500)
                  if m.get_command() == "sow")


def test_compaction_shrinks_the_sow_while_the_server_serves(tmp_path, caplog):
    data = os.path.join(str(tmp_path), "sow", "amps-sow.lmdb", "data.mdb")
    pad = "x" * 200
    srv = start(tmp_path)
    try:
        c = client(srv, "loader")
        for i in range(N):
            c.publish("orders", json.dumps({"id": i, "keep": int(i % KEEP_EVERY == 0), "pad": pad}))
        c.flush(60000)
        c.execute(AMPS.Command("sow_delete").set_topic("orders").set_filter("/keep = 0")
                  .add_ack_type("processed").set_timeout(60000))
        kept = list(range(0, N, KEEP_EVERY))
        assert sow_ids(c) == kept
        before = os.path.getsize(data)

        seen = Collector(lambda m: json.loads(m.get_data())["seq"])
        sub = client(srv, "subscriber")
        sub.subscribe(seen, "orders")
        stop = threading.Event()
        published: list[int] = []
        query_sizes: list[int] = []

        def publish() -> None:  # updates of LIVE records (the SOW does not grow)
            p = client(srv, "publisher")
            seq = 0
            while not stop.is_set() or seq < LIVE:
                p.publish("orders", json.dumps({"id": N + seq % LIVE, "seq": seq, "keep": 1,
                                                "pad": pad}))
                published.append(seq)
                seq += 1
            p.flush(30000)
            p.close()

        def query() -> None:
            q = client(srv, "querier")
            while not stop.is_set():
                query_sizes.append(len(sow_ids(q)))
            q.close()

        workers = [threading.Thread(target=publish), threading.Thread(target=query)]
        for w in workers:
            w.start()
        assert until(lambda: query_sizes and len(published) >= 100, 30)  # both going on
        done = Collector()
        c.subscribe(done, "compact-done")
        with caplog.at_level(logging.INFO, logger="amps_emulator.actions"):
            srv.http("/amps/administrator/actions/compact")
            assert len(done.wait_for(1, 60)) == 1
        stop.set()
        for w in workers:
            w.join(60)
        after = os.path.getsize(data)
        assert after < before // 4, (before, after)
        lines = [r.getMessage() for r in caplog.records if "compact-sow" in r.getMessage()]
        assert any(f"{before} -> " in m for m in lines), lines
        assert any("scratch" in m and "kept in memory" in m for m in lines), lines
        assert sorted(seen.wait_for(len(published), 30)) == published  # no loss, no dup
        assert query_sizes and min(query_sizes) >= len(kept)
        want = sorted(kept + list(range(N, N + LIVE)))
        assert sow_ids(c) == want
        for x in (c, sub):
            x.close()
    finally:
        srv.stop()
    srv = start(tmp_path)  # a restart reads the compacted file
    try:
        c = client(srv, "reader")
        assert sow_ids(c) == want
        c.close()
    finally:
        srv.stop()
