"""The official client's stores across client restarts and server SIGKILLs."""

from __future__ import annotations

import json
import random
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import AMPS
import pytest

from tests.support.clients import ha_client
from tests.support.procserver import ProcServer

HERE = Path(__file__).resolve().parent


def replay_all(uri: str, topic: str, name: str = "auditor") -> list[int]:
    """Every ``i`` the log holds for ``topic``, in log order (replay from EPOCH)."""
    c = AMPS.Client(name)
    c.connect(uri)
    c.logon(5000)
    done = threading.Event()
    got: list[int] = []

    def on(m) -> None:
        if m.get_command() == "ack":
            if m.get_ack_type() == "completed":
                done.set()
        else:
            got.append(json.loads(m.get_data())["i"])

    c.execute_async(AMPS.Command("subscribe").set_topic(topic).set_bookmark("0")
                    .add_ack_type("completed"), on)
    assert done.wait(30), "replay did not complete"
    c.close()
    return got


def test_mmap_bookmark_store_resumes_in_a_new_process(server, client_factory, tmp_path):
    pub = client_factory("mmap-publisher")
    for i in range(100):
        pub.publish("work", json.dumps({"i": i}))
    pub.flush(5000)
    store = tmp_path / "worker.mmap"

    def run_worker(discard: int, stop: int) -> list[int]:
        out = subprocess.run(
            [sys.executable, str(HERE / "bookmark_worker.py"), server.uri, str(store), "work",
             str(discard), str(stop)], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        result = json.loads(out.stdout.strip().splitlines()[-1])
        assert result["ok"], result
        return result["got"]

    assert run_worker(discard=40, stop=45) == list(range(45))
    # The new process resumes right after the last discarded message (39), not after 44.
    assert run_worker(discard=10, stop=20) == list(range(40, 60))
    assert run_worker(discard=0, stop=5) == list(range(50, 55))


@pytest.fixture
def proc_server(tmp_path):
    srv = ProcServer(tmp_path / "data").start()
    yield srv
    srv.stop()


def test_ha_subscriber_gets_every_message_once_across_a_server_kill(proc_server):
    srv = proc_server
    total = 3000
    sub = ha_client("ha-subscriber", srv.uri)
    store = AMPS.MemoryBookmarkStore()
    sub.set_bookmark_store(store)
    sub.connect_and_logon()
    got: list[int] = []
    all_in = threading.Event()

    def on_message(m) -> None:
        got.append(json.loads(m.get_data())["i"])
        store.discard_message(m)
        if len(got) >= total:
            all_in.set()

    sub.bookmark_subscribe(on_message, "ha-topic", "0", sub_id="ha-sub", timeout=5000)
    pub = ha_client("ha-publisher", srv.uri)
    pub.connect_and_logon()
    killed = threading.Event()

    def killer() -> None:
        while len(got) < total // 3:
            time.sleep(0.005)
        srv.kill()
        srv.start()
        killed.set()

    k = threading.Thread(target=killer)
    k.start()
    for i in range(total):
        pub.publish("ha-topic", json.dumps({"i": i}))
        if i % 200 == 0:
            time.sleep(0.01)  # keep messages flowing across the kill
    k.join()
    assert killed.is_set()
    publish_flush_through_reconnect(pub)
    assert all_in.wait(30), f"subscriber has {len(got)} of {total}"
    assert got == list(range(total))
    pub.close()
    sub.close()


def publish_flush_through_reconnect(client, timeout: float = 30.0) -> None:
    """``publish_flush``, retried while the HAClient is still reconnecting."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            client.publish_flush(int(max(1.0, deadline - time.monotonic()) * 1000))
            return
        except AMPS.DisconnectedException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_ha_publish_store_survives_kill_and_journal_holds_each_message_once(proc_server, tmp_path):
    srv = proc_server
    total = 4000
    pub = ha_client("ha-store-publisher", srv.uri)
    pub.set_publish_store(AMPS.HybridPublishStore(str(tmp_path / "pubstore"), 10000))
    pub.connect_and_logon()
    published = [0]
    restarted = threading.Event()

    def killer() -> None:
        while published[0] < total // 3:
            time.sleep(0.002)
        srv.kill()
        srv.start()
        restarted.set()

    k = threading.Thread(target=killer)
    k.start()
    for i in range(total):
        pub.publish("stored-topic", json.dumps({"i": i}))
        published[0] = i + 1
        if i % 100 == 0:
            time.sleep(0.005)  # keep publishing across the kill
    k.join()
    publish_flush_through_reconnect(pub)
    assert pub.get_unpersisted_count() == 0
    pub.close()
    assert restarted.is_set()
    assert replay_all(srv.uri, "stored-topic") == list(range(total))


class RawPublisher:
    """Publishes with sequence numbers and reads persisted acks on a plain socket."""

    def __init__(self, port: int, name: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = b""
        self.acked = 0
        self._send({"c": "logon", "cid": "l", "client_name": name, "a": "processed"})
        self._read_until(lambda h: h.get("cid") == "l")

    def _send(self, header: dict, body: bytes = b"") -> None:
        h = json.dumps(header, separators=(",", ":")).encode()
        self.sock.sendall((len(h) + len(body)).to_bytes(4, "big") + h + body)

    def _read_until(self, pred, timeout: float = 10.0) -> bool:
        from amps_emulator.protocol.codec import split_frame

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            while len(self.buf) >= 4 and len(self.buf) >= 4 + int.from_bytes(self.buf[:4], "big"):
                n = int.from_bytes(self.buf[:4], "big")
                header, _ = split_frame(self.buf[4:4 + n])
                self.buf = self.buf[4 + n:]
                if header.get("a") == "persisted" and header.get("status") == "success":
                    self.acked = max(self.acked, int(header["s"]))
                if pred(header):
                    return True
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        return False

    def publish(self, topic: str, seq: int, body: bytes) -> None:
        self._send({"c": "p", "t": topic, "a": "persisted", "s": seq}, body)

    def poll_acks(self) -> None:
        try:
            self._read_until(lambda h: False, timeout=0.001)
        except TimeoutError:
            pass


def test_kill_loop_every_persisted_ack_is_kept_exactly_once(proc_server):
    srv = proc_server
    rnd = random.Random(7)
    acked_total: set[int] = set()
    seq = 0
    for _ in range(20):
        pub = RawPublisher(srv.port, "kill-loop-publisher")
        first = seq + 1
        deadline = time.monotonic() + rnd.uniform(0.05, 0.3)
        try:
            while time.monotonic() < deadline:
                seq += 1
                pub.publish("kill-topic", seq, json.dumps({"i": seq}).encode())
                if seq % 20 == 0:
                    pub.poll_acks()
            pub.poll_acks()
        except (ConnectionError, OSError):
            pass
        srv.kill()  # SIGKILL at a random moment under load
        acked_total.update(range(first, pub.acked + 1))
        pub.sock.close()
        srv.start()
    assert len(acked_total) > 100, "too few acks to mean anything"
    present = replay_all(srv.uri, "kill-topic")
    assert len(present) == len(set(present)), "a message is in the log twice"
    assert acked_total <= set(present), f"lost acked messages: {sorted(acked_total - set(present))[:10]}"


def test_damaged_journal_tail_is_truncated_and_middle_damage_refused(tmp_path):
    srv = ProcServer(tmp_path / "data").start()
    c = AMPS.Client("damage")
    c.connect(srv.uri)
    c.logon(5000)
    for i in range(500):
        c.publish("dmg", json.dumps({"i": i, "pad": "x" * 100}))
    c.flush(5000)
    c.close()
    srv.stop()
    segments = sorted((tmp_path / "data" / "journal").glob("*.journal"))
    assert segments
    seg = segments[-1]
    data = seg.read_bytes()
    seg.write_bytes(data[:-37])  # a torn tail: the last record is cut mid-way
    srv.start()
    assert replay_all(srv.uri, "dmg") == list(range(499))
    srv.stop()
    assert "truncat" in srv.stderr_path.read_text().lower()

    data = seg.read_bytes()
    mid = len(data) // 2
    seg.write_bytes(data[:mid] + bytes([data[mid] ^ 0xFF]) + data[mid + 1:])
    refused = srv.run_to_exit()
    assert refused.returncode != 0
    assert seg.name in refused.stderr and "--keep-readable-journal" in refused.stderr
    kept = ProcServer(tmp_path / "data", None, "--keep-readable-journal")
    kept.port = srv.port
    kept.start()
    survivors = replay_all(kept.uri, "dmg")
    kept.stop()
    assert 0 < len(survivors) < 499 and survivors == sorted(set(survivors))
