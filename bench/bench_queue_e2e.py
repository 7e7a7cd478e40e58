"""Message queue end to end through the server subprocess: throughput and restart.

    python bench/bench_queue_e2e.py                      # 200,000 messages, 1,000,000 queued
    python bench/bench_queue_e2e.py --messages 50000 --restart-messages 200000
    python bench/bench_queue_e2e.py --workers client     # official-client workers instead

Config: one at-least-once queue (``MaxPerSubscriptionBacklog`` 1000, ``LeasePeriod`` 60s so
no lease runs out during a run) recorded by a transaction log (group durability, fsync).

* throughput: four worker connections subscribe with ``max_backlog=100`` and acknowledge in
  batches of 10 bookmarks per ``sow_delete`` frame (what the official client sends with
  ``set_ack_batch_size(10)``). A raw-socket publisher sends ``--messages`` 200-byte plain
  publishes, in batches of 1,000. Figure: messages/s from the first publish to the moment the
  last acknowledgement is known to be processed (each worker sends its last acks, then a
  ``flush`` whose ``processed`` ack comes back in order). Checked: deliveries == messages, no
  bookmark delivered twice, and a final ``sow`` query on the queue returns 0 records. Two
  runs: the publisher paced to keep at most ``--depth`` messages queued (well under the
  server's cache of 65,536 recent records, so deliveries never read the journal), and the
  publisher unthrottled (the queue grows as deep as the publisher gets ahead).
  Workers (``--workers``): ``raw`` (default) = raw sockets served by one selector thread;
  ``client`` = four official ``AMPS.Client`` objects with ``set_ack_batch_size(10)`` and
  ``set_ack_timeout(50)`` acking in the message handler (the run waits 60 ms for the last
  partial batches). Both are server-bound here; on the 2-core test machine the official
  client measured ~7% lower (its callbacks share the cores with the server), so raw is the
  default.
* restart: ``--restart-messages`` publishes with no subscriber (the last one waits for its
  persisted ack), SIGKILL, start again on the same journal and time the ready line (includes
  interpreter start-up and rebuilding the queue from the transaction log); then one worker
  subscribes and the time to its first delivery and the first 10,000 messages are printed.

Target (from the issue): at least 50,000 messages/s through the queue.
"""

from __future__ import annotations

import argparse
import os
import selectors
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from amps_emulator.protocol.codec import split_frame  # noqa: E402
from bench._support import RawPeer, ServerProcess, frame, machine  # noqa: E402
from tests.support.servers import config_xml  # noqa: E402

QUEUE = "work"
QUEUE_XML = f"""<SOW>
  <Queue><Name>{QUEUE}</Name><MessageType>json</MessageType><Semantics>at-least-once</Semantics>
    <LeasePeriod>60s</LeasePeriod>
    <MaxPerSubscriptionBacklog>1000</MaxPerSubscriptionBacklog></Queue>
</SOW>"""

BODY_HEAD = b'{"id":%d,"sym":"IBM","qty":100,"px":123.45,"note":"'


def body(i: int) -> bytes:
    head = BODY_HEAD % i
    return head + b"x" * (198 - len(head)) + b'"}'


def write_config(d: str) -> str:
    path = os.path.join(d, "amps.xml")
    with open(path, "w") as f:
        f.write(config_xml(d, txlog_topics=(QUEUE,), extra=QUEUE_XML))
    return path


def line(text: str) -> None:
    print(text, flush=True)


# -- raw peers -------------------------------------------------------------------------------
Raw = RawPeer  # logon, frames, next_frame, wait_ack: shared with the other benches


ACK_HEAD = (b'{"c":"sow_delete","t":"' + QUEUE.encode() + b'","cid":"AMPS-queue-ack","bookmark":"')


class RawWorker(Raw):
    def __init__(self, port: int, name: str, max_backlog: int, ack_batch: int) -> None:
        super().__init__(port, name)
        self.ack_batch = ack_batch
        self.pending: list[bytes] = []
        self.bookmarks: list[bytes] = []
        self.t_first: float | None = None
        self.s.sendall(frame({"c": "subscribe", "cid": "s", "sub_id": "s", "t": QUEUE,
                              "o": f"max_backlog={max_backlog}", "a": "processed"}))
        self.wait_ack("s", "processed", self.on_frame)
        for payload in self.frames(b""):  # deliveries that came with the ack
            self.on_frame(payload)

    def on_frame(self, payload: bytes) -> None:
        if payload.startswith(b'{"c":"p"'):
            i = payload.find(b'"bm":"') + 6
            bm = payload[i:payload.find(b'"', i)]
            if self.t_first is None:
                self.t_first = time.perf_counter()
            self.bookmarks.append(bm)
            self.pending.append(bm)
            if len(self.pending) >= self.ack_batch:
                self.send_acks()

    def send_acks(self) -> None:
        if self.pending:
            self.s.sendall(frame_raw(ACK_HEAD + b",".join(self.pending) + b'"}'))
            self.pending = []

    def on_readable(self) -> int:
        """Handle what arrived; returns the number of deliveries."""
        chunk = self.s.recv(1 << 20)
        if not chunk:
            raise ConnectionError("server closed a worker connection")
        before = len(self.bookmarks)
        for payload in self.frames(chunk):
            self.on_frame(payload)
        return len(self.bookmarks) - before

    def finish(self) -> None:
        """Send the last acks, then wait for a flush's processed ack (acks processed)."""
        self.send_acks()
        self.s.sendall(frame({"c": "flush", "cid": "f", "a": "processed"}))
        self.wait_ack("f", "processed", self.on_frame)


def frame_raw(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


def publisher(port: int, n: int, batch: int = 1000, persisted_last: bool = False,
              delivered=None, depth: int | None = None) -> float:
    """Plain publishes of ``n`` messages; returns the time the last one was sent (or, with
    ``persisted_last``, persisted-acked). With ``depth``, a batch is only sent while fewer
    than ``depth`` published messages are not yet ``delivered()``."""
    p = Raw(port, "publisher")
    head = b'{"c":"p","t":"' + QUEUE.encode() + b'"}'
    last_head = b'{"c":"p","t":"' + QUEUE.encode() + b'","s":1,"a":"persisted"}'
    for start in range(0, n, batch):
        if depth is not None:
            while start - delivered() > depth - batch:
                time.sleep(0.0005)
        parts = []
        for i in range(start, min(n, start + batch)):
            h = last_head if (persisted_last and i == n - 1) else head
            parts.append(frame_raw(h + body(i)))
        p.s.sendall(b"".join(parts))
    if persisted_last:
        while True:
            payload = p.next_frame()
            h, _ = split_frame(payload)
            if h.get("a") == "persisted":
                assert h.get("status", "success") == "success", h
                break
    t = time.perf_counter()
    p.close()
    return t


def final_query(port: int) -> tuple[int, int]:
    q = Raw(port, "checker")
    q.s.sendall(frame({"c": "sow", "t": QUEUE, "cid": "q", "query_id": "q", "a": "completed",
                       "batch_size": 10000}))
    h = q.wait_ack("q", "completed")
    q.close()
    return int(h["records_returned"]), int(h["topic_matches"])


# -- throughput ------------------------------------------------------------------------------
def run_raw(port: int, m: int, workers: int, max_backlog: int, ack_batch: int,
            timeout: float, depth: int | None) -> tuple[float, list[int], int]:
    ws = [RawWorker(port, f"worker-{i}", max_backlog, ack_batch) for i in range(workers)]
    sel = selectors.DefaultSelector()
    for w in ws:
        sel.register(w.s, selectors.EVENT_READ, w)
    t0 = time.perf_counter()
    pub = threading.Thread(target=publisher, args=(port, m), daemon=True, kwargs=dict(
        delivered=lambda: sum(len(w.bookmarks) for w in ws), depth=depth))
    pub.start()
    total = sum(len(w.bookmarks) for w in ws)
    deadline = time.monotonic() + timeout
    while total < m:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{total:,} of {m:,} delivered")
        for key, _ in sel.select(0.5):
            total += key.data.on_readable()
    for w in ws:
        w.finish()
    dt = time.perf_counter() - t0
    pub.join()
    sel.close()
    bms = [b for w in ws for b in w.bookmarks]
    per = [len(w.bookmarks) for w in ws]
    for w in ws:
        w.close()
    return dt, per, len(bms) - len(set(bms))


def run_client(uri: str, port: int, m: int, workers: int, max_backlog: int, ack_batch: int,
               timeout: float, depth: int | None) -> tuple[float, list[int], int]:
    import AMPS

    done = threading.Event()
    lock = threading.Lock()
    counts = [0] * workers
    seen: list[list[str]] = [[] for _ in range(workers)]
    state = {"total": 0}
    clients = []

    def handler_for(i: int):
        mine = seen[i]

        def on_message(msg) -> None:
            mine.append(msg.get_bookmark())
            msg.ack()
            with lock:
                state["total"] += 1
                if state["total"] >= m:
                    done.set()
        return on_message

    for i in range(workers):
        c = AMPS.Client(f"worker-{i}")
        c.connect(uri)
        c.logon(5000)
        c.set_ack_batch_size(ack_batch)
        c.set_ack_timeout(50)
        c.subscribe(handler_for(i), QUEUE, options=f"max_backlog={max_backlog}", timeout=5000)
        clients.append(c)
    t0 = time.perf_counter()
    pub = threading.Thread(target=publisher, args=(port, m), daemon=True, kwargs=dict(
        delivered=lambda: state["total"], depth=depth))
    pub.start()
    if not done.wait(timeout):
        raise TimeoutError(f"{state['total']:,} of {m:,} delivered")
    time.sleep(0.06)  # the last partial ack batches go out after the 50 ms ack timeout
    for c in clients:
        c.flush(5000)  # processed in order after the acks the client sent before it
    dt = time.perf_counter() - t0
    pub.join()
    for i, c in enumerate(clients):
        counts[i] = len(seen[i])
        c.close()
    bms = [b for s in seen for b in s]
    return dt, counts, len(bms) - len(set(bms))


def bench_throughput(m: int, impl: str, workers: int, max_backlog: int, ack_batch: int,
                     depth: int | None) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-queue-e2e-") as d:
        with ServerProcess(write_config(d)) as srv:
            if impl == "raw":
                dt, per, dups = run_raw(srv.port, m, workers, max_backlog, ack_batch, 120, depth)
            else:
                dt, per, dups = run_client(srv.uri, srv.port, m, workers, max_backlog,
                                           ack_batch, 120, depth)
            left, available = final_query(srv.port)
    assert sum(per) == m and dups == 0, (per, dups)
    assert left == 0, left
    what = ("raw sockets, one selector thread" if impl == "raw" else
            "official AMPS.Client, ack_timeout 50 ms")
    how = ("publisher unthrottled" if depth is None else
           f"publisher keeps at most {depth:,} messages queued")
    line(f"queue throughput, {how}: {m / dt:,.0f} messages/s ({m:,} x 200 B published, "
         f"delivered and acked in {dt:.2f} s; {workers} workers ({what}), max_backlog={max_backlog}, "
         f"{ack_batch} acks per sow_delete; per worker {', '.join(f'{x:,}' for x in per)}; "
         f"0 redeliveries; final sow on the queue: {left} records; target >= 50,000/s)")


# -- restart with a deep queue ------------------------------------------------------------------
def bench_restart(n: int, max_backlog: int, ack_batch: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-queue-e2e-") as d:
        cfg = write_config(d)
        t0 = time.perf_counter()
        srv = ServerProcess(cfg)
        empty = time.perf_counter() - t0
        try:
            t0 = time.perf_counter()
            t1 = publisher(srv.port, n, batch=2000, persisted_last=True)
            fill = t1 - t0
            startup = srv.kill_and_restart()
            want = min(10_000, n)
            t0 = time.perf_counter()
            w = RawWorker(srv.port, "after-restart", max_backlog, ack_batch)
            got = len(w.bookmarks)
            w.s.settimeout(30)
            while got < want:
                got += w.on_readable()
            t_all = time.perf_counter() - t0
            w.finish()
            first = w.t_first - t0  # type: ignore[operator]
            w.close()
        finally:
            srv.stop()
    line(f"queue fill with no subscriber: {n / fill:,.0f} messages/s ({n:,} x 200 B, last one "
         f"persisted-acked)")
    line(f"restart after SIGKILL with {n:,} unacked messages queued: {startup:.2f} s to the "
         f"ready line (includes interpreter start-up and rebuilding the queue from the "
         f"transaction log; {empty:.2f} s with no data); then a worker's first delivery "
         f"{first * 1000:.0f} ms after connecting, {want:,} delivered and acked in {t_all:.2f} s "
         f"({want / t_all:,.0f} messages/s, one worker)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=200_000, help="throughput run size")
    ap.add_argument("--restart-messages", type=int, default=1_000_000,
                    help="unacked messages queued before the restart (0: skip)")
    ap.add_argument("--depth", type=int, default=10_000,
                    help="queue depth the paced run keeps to (0: only the unthrottled run)")
    ap.add_argument("--workers", choices=("raw", "client"), default="raw")
    ap.add_argument("--worker-count", type=int, default=4)
    ap.add_argument("--max-backlog", type=int, default=100)
    ap.add_argument("--ack-batch", type=int, default=10)
    args = ap.parse_args()
    if args.messages:
        for depth in (args.depth, None) if args.depth else (None,):
            bench_throughput(args.messages, args.workers, args.worker_count, args.max_backlog,
                             args.ack_batch, depth)
    if args.restart_messages:
        bench_restart(args.restart_messages, args.max_backlog, args.ack_batch)
    line(f"machine: {machine()}")


if __name__ == "__main__":
    main()
