"""Runs of plain publishes (server.publish_run) against the general path, frame for frame.

Two servers on the same config: one as it runs, one with the runs switched off (every frame
dispatched as a command). The same scripts of frames, each sent in one write so that the runs
meet everything that can end them (other commands, SOW topics, a queue's topic, republished
``s``, subscriptions made in the middle, acks other than ``persisted``), must leave each with
the same output to every client, the same journal and the same SOW.
"""

from __future__ import annotations

import json
import random
import socket

import pytest

from amps_emulator.protocol.codec import parse_publish_header_py, split_frame
from amps_emulator.server.messaging import publish_runs as publish_run
from tests.support.servers import start_server

CONFIG = """<AMPSConfig><Name>runs</Name>
<Transports><Transport><Name>json-tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
<MessageType>json</MessageType><Protocol>amps</Protocol></Transport></Transports>
<TransactionLog><JournalDirectory>{d}/journal</JournalDirectory><JournalSize>64KB</JournalSize>
<Topic><Name>^(a|b|qt|sow-t)$</Name><MessageType>json</MessageType></Topic></TransactionLog>
<SOW><Topic><Name>sow-t</Name><MessageType>json</MessageType><Key>/id</Key>
<FileName>{d}/sow/%n.sow</FileName></Topic>
<Queue><Name>work</Name><MessageType>json</MessageType><UnderlyingTopic>qt</UnderlyingTopic></Queue>
</SOW></AMPSConfig>"""

TOPICS = ["a", "a", "a", "b", "qt", "sow-t", "c/not-journalled"]


def _frame(header: dict, body: bytes = b"") -> bytes:
    h = json.dumps(header, separators=(",", ":")).encode()
    return (len(h) + len(body)).to_bytes(4, "big") + h + body


class Peer:
    def __init__(self, port: int, name: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=20)
        self.buf = b""
        self.got: list[tuple[dict, bytes]] = []
        self.sock.sendall(_frame({"c": "logon", "cid": "l", "client_name": name, "a": "processed"}))
        self.until_ack("l")

    def until_ack(self, cid: str) -> None:
        """Read (keeping every frame) up to the ack of ``cid``."""
        while True:
            while len(self.buf) < 4 or len(self.buf) < 4 + int.from_bytes(self.buf[:4], "big"):
                chunk = self.sock.recv(1 << 16)
                assert chunk, "the server closed the connection"
                self.buf += chunk
            n = int.from_bytes(self.buf[:4], "big")
            header, body = split_frame(self.buf[4:4 + n])
            self.buf = self.buf[4 + n:]
            self.got.append((header, body))
            if header.get("c") == "ack" and header.get("cid") == cid:
                return

    def output(self) -> tuple:
        """What the client received, less what depends on timing: the time of a message, and
        where the persisted acks fall (each follows an fsync; a publish's are conflated per
        turn): those are compared as the highest ``s`` acked, the refused ``s`` and the
        acked flushes, the rest in order."""
        frames, acked, refused, flushes = [], 0, set(), set()
        for h, b in self.got:
            if h.get("c") == "ack" and h.get("a") == "persisted":
                if h.get("cid") is not None:
                    flushes.add((h["cid"], h.get("status")))
                elif h.get("status") == "success":
                    acked = max(acked, h["s"])
                else:
                    refused.add((h["s"], h.get("reason")))
                continue
            frames.append(({k: v for k, v in h.items() if k not in ("ts", "timestamp")}, b))
        return frames, acked, refused, flushes


def _script(rng: random.Random) -> list[bytes]:
    frames = []
    s = 0
    for i in range(rng.randint(50, 400)):
        roll = rng.random()
        topic = rng.choice(TOPICS)
        body = json.dumps({"id": rng.randint(1, 30), "i": i, "pad": "x" * rng.randint(0, 300)}).encode()
        if roll < 0.75:  # a plain publish, as the clients write it
            header: dict = {"c": "p", "t": topic}
            if rng.random() < 0.5:
                s = s + 1 if rng.random() < 0.95 else max(0, s - rng.randint(0, 3))  # a republish
                header["s"] = s if rng.random() < 0.7 else str(s)  # (the JavaScript client's "s")
                if rng.random() < 0.8:
                    header["a"] = "persisted"
            if rng.random() < 0.3:
                header["cid"] = f"c{i}"
            if rng.random() < 0.3:
                header = {"c": "publish", **{k: v for k, v in header.items() if k != "c"}}
            frames.append(_frame(header, body))
        elif roll < 0.80:  # acks a run does not take
            frames.append(_frame({"c": "p", "t": topic, "cid": f"c{i}", "a": "processed"}, body))
        elif roll < 0.84:
            frames.append(_frame({"c": "p", "t": topic, "cid": f"c{i}", "a": "persisted"}, body))
        elif roll < 0.88:
            frames.append(_frame({"c": "delta_publish", "t": "sow-t"}, body))
        elif roll < 0.91:
            frames.append(_frame({"c": "subscribe", "t": rng.choice(TOPICS), "sub_id": f"s{i}",
                                  "cid": f"s{i}", "a": "processed"}))
        elif roll < 0.94:
            frames.append(_frame({"c": "sow", "t": "sow-t", "query_id": f"q{i}", "cid": f"q{i}",
                                  "a": "completed"}))
        elif roll < 0.97:
            frames.append(_frame({"c": "flush", "cid": f"f{i}", "a": "persisted"}))
        else:
            frames.append(_frame({"c": "p", "t": topic, "x": 1}, body))  # a header not plain
    return frames


def _run_script(srv, frames: list[bytes]) -> tuple:
    watcher = Peer(srv.port, "watcher")
    watcher.sock.sendall(_frame({"c": "subscribe", "t": "a", "sub_id": "w", "cid": "w",
                                 "a": "processed", "filter": "/id > 10"}))
    watcher.until_ack("w")
    worker = Peer(srv.port, "worker")
    worker.sock.sendall(_frame({"c": "subscribe", "t": "work", "sub_id": "q", "cid": "q",
                                "a": "processed"}))
    worker.until_ack("q")
    pub = Peer(srv.port, "pub")
    pub.sock.sendall(b"".join(frames) + _frame({"c": "flush", "cid": "end", "a": "completed"}))
    pub.until_ack("end")
    # the publishes' persisted acks follow their fsync, which on a busy machine can come after
    # the completed flush: a persisted flush is answered after them
    pub.sock.sendall(_frame({"c": "flush", "cid": "durable", "a": "persisted"}))
    pub.until_ack("durable")
    for peer in (watcher, worker):
        peer.sock.sendall(_frame({"c": "flush", "cid": "end", "a": "completed"}))
        peer.until_ack("end")
    journal = srv.call(lambda: [(r.topic, r.kind, r.sequence, r.client_seq, r.client_name, r.body)
                                for r in srv.server.broker.txlog.journal.read(1)])
    sow = srv.call(lambda: sorted((r.sow_key, r.data) for r in
                                  srv.server.broker.sow_service.get("sow-t").query().records))
    out = (pub.output(), watcher.output(), worker.output(), journal, sow)
    for peer in (pub, watcher, worker):
        peer.sock.close()
    return out


@pytest.mark.parametrize("reader", ["as built", "pure"])
@pytest.mark.parametrize("seed", range(8))
def test_runs_give_what_the_general_path_gives(tmp_path, monkeypatch, seed: int,
                                               reader: str) -> None:
    """``reader``: the plain-publish header reader the runs use, compiled when the extension is
    built, or its pure-Python twin."""
    if reader == "pure":
        monkeypatch.setattr(publish_run, "plain_run", publish_run.plain_run_py)
        monkeypatch.setattr(publish_run, "plain_publish", parse_publish_header_py)
    frames = _script(random.Random(seed + (100 if reader == "pure" else 0)))
    results = []
    for name, runs in (("general", False), ("runs", True)):
        d = tmp_path / name
        srv = start_server(CONFIG.format(d=d))
        try:
            if not runs:
                srv.call(lambda s=srv: setattr(s.server, "publish_runs", lambda conn, p, i: i))
            results.append(_run_script(srv, frames))
        finally:
            srv.stop()
    general, runs_result = results
    names = ["publisher's frames", "subscriber's frames", "queue subscriber's frames", "journal",
             "SOW"]
    for what, a, b in zip(names, general, runs_result, strict=True):
        assert b == a, what
    assert len(general[3]) > 20  # (the script journalled something)
