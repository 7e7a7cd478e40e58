"""A plain ``sow`` query of a whole 100,000-record topic, end to end (issue 19: ">= 500,000
records/s").

    python bench/bench_sow_query.py                    # 100,000 records, 5 runs of each
    python bench/bench_sow_query.py --records 200000 --repeat 3
    python bench/bench_sow_query.py --profile /tmp/sow.prof   # the server under cProfile

Config: as ``bench_sow_e2e.py``: a persistent (LMDB) SOW topic keyed on ``/id``, recorded by
a transaction log, loaded with ``--records`` 200-byte records by plain publishes and a flush.

* raw socket: ``sow`` of the whole topic with no filter and with a filter every record
  matches (``/qty >= 0``), ``batch_size`` 10 (what the official client sends by default) and
  10,000; timed from the send of the command to its ``completed`` ack (after ``group_end``),
  every record counted as it arrives; best / median of ``--repeat`` runs in records/s.
  Meanwhile another raw client sends ``flush`` round trips: their median and worst time show
  how long the query keeps other clients waiting.
* official Python client (``import AMPS``): ``client.sow(topic)`` iterated to ``group_end``,
  and ``client.execute_async`` with a handler counting the ``sow`` messages (both with the
  client's default batch size, 10, and with 10,000). The client decodes and hands out every
  record as a Python message object, so this figure is bounded by the client (see the
  ``client-only`` line: the same stream replayed from a socket that is not the server).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import multiprocessing  # noqa: E402

from amps_emulator.protocol.codec import split_frame  # noqa: E402
from bench._support import RawPeer, ServerProcess, frame, machine  # noqa: E402
from bench.bench_sow_e2e import Prober, load, write_config  # noqa: E402

TOPIC = "orders"


class ProfiledServer(ServerProcess):
    """The server under ``cProfile`` (stats written to ``path`` when it is stopped)."""

    def __init__(self, config_path: str, path: str) -> None:
        self.profile_path = path
        super().__init__(config_path)

    def _launch(self) -> None:
        i = self.args.index("-m")
        self.args = [*self.args[:i], "-m", "cProfile", "-o", self.profile_path, *self.args[i:]]
        super()._launch()


class Querier(RawPeer):
    def __init__(self, port: int) -> None:
        super().__init__(port, "querier")
        self.n = 0

    def sow(self, flt: str | None, batch_size: int) -> tuple[float, int]:
        """(seconds from the send to the completed ack, records received)."""
        self.n += 1
        cid = f"q{self.n}"
        h = {"c": "sow", "t": TOPIC, "cid": cid, "query_id": cid, "a": "processed,completed",
             "batch_size": batch_size}
        if flt:
            h["filter"] = flt
        cmd = frame(h)
        records = 0
        t0 = time.perf_counter()
        self.s.sendall(cmd)
        while True:
            payload = self.next_frame()
            if payload.startswith(b'{"c":"sow"'):
                records += payload.count(b'{"k":')
            elif payload.startswith(b'{"c":"ack"'):
                a, _ = split_frame(payload)
                if a.get("status") != "success":
                    raise RuntimeError(a)
                if a.get("a") == "completed":
                    if int(a["records_returned"]) != records:
                        raise RuntimeError(f"{records} records received, {a}")
                    break
        return time.perf_counter() - t0, records


def _probe(port: int, stop, out) -> None:
    """Flush round trips until ``stop`` is set; their times go to ``out`` (another process:
    the bench client's own work does not delay them)."""
    prober = Prober(port)
    prober.start()
    stop.wait()
    out.put(prober.finish())


class ProcessProber:
    """:class:`bench_sow_e2e.Prober` in a process of its own."""

    def __init__(self, port: int) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.stop = ctx.Event()
        self.out: multiprocessing.Queue = ctx.Queue()
        self.proc = ctx.Process(target=_probe, args=(port, self.stop, self.out), daemon=True)

    def start(self) -> None:
        self.proc.start()

    def finish(self) -> tuple[int, float, float]:
        self.stop.set()
        got = self.out.get(timeout=30)
        self.proc.join(10)
        return got


def raw_figures(port: int, n: int, repeat: int) -> None:
    q = Querier(port)
    q.sow(None, 10_000)  # warm up (first-query imports, page cache)
    t, _ = q.sow("/qty >= 0", 10_000)
    line(f"first query with the filter '/qty >= 0': {t * 1000:,.0f} ms (on a topic of at most "
         f"100,000 records the planner builds a memo index on /qty in it, holding the loop)")
    prober = ProcessProber(port)
    prober.start()
    for flt in (None, "/qty >= 0"):
        for bs in (10, 10_000):
            times = []
            for _ in range(repeat):
                t, got = q.sow(flt, bs)
                assert got == n, (got, n)
                times.append(t)
            best, med = min(times), statistics.median(times)
            what = "no filter" if flt is None else f"filter {flt!r} (matches all)"
            line(f"raw sow of {n:,} records, {what}, batch_size {bs:,}: {n / best:,.0f} / "
                 f"{n / med:,.0f} records/s, best / median ({best * 1000:,.0f} / "
                 f"{med * 1000:,.0f} ms of {repeat}; target >= 500,000/s)")
    trips, med, worst = prober.finish()
    line(f"another client's flush round trips during those queries (from another process): "
         f"{trips:,}, median {med * 1000:.1f} ms, max {worst * 1000:.1f} ms")
    q.close()


def client_figures(uri: str, n: int, repeat: int) -> None:
    import AMPS

    c = AMPS.Client("bench-sow-client")
    c.connect(uri)
    c.logon(5000)
    try:
        for bs in (10, 10_000):
            times = []
            for _ in range(repeat):
                got = 0
                t0 = time.perf_counter()
                for m in c.sow(TOPIC, batch_size=bs, timeout=60_000):
                    if m.get_command() == "sow":
                        got += 1
                    elif m.get_command() == "group_end":
                        break
                times.append(time.perf_counter() - t0)
                assert got == n, (got, n)
            best, med = min(times), statistics.median(times)
            line(f"official client, for m in client.sow(topic, batch_size={bs}): "
                 f"{n / best:,.0f} / {n / med:,.0f} records/s, best / median")
        for bs in (10, 10_000):
            times = []
            for _ in range(repeat):
                done = threading.Event()
                count = [0]

                def on_message(m, count=count, done=done) -> None:
                    cmd = m.get_command()
                    if cmd == "sow":
                        count[0] += 1
                    elif cmd == "group_end":
                        done.set()

                t0 = time.perf_counter()
                c.execute_async(AMPS.Command("sow").set_topic(TOPIC).set_batch_size(bs),
                                on_message)
                if not done.wait(120):
                    raise TimeoutError("no group_end")
                times.append(time.perf_counter() - t0)
                assert count[0] == n, (count[0], n)
            best, med = min(times), statistics.median(times)
            line(f"official client, execute_async(Command('sow'), handler), batch_size {bs}: "
                 f"{n / best:,.0f} / {n / med:,.0f} records/s, best / median")
    finally:
        c.close()


def client_only(port: int, n: int) -> None:
    """The official client reading a recorded query result from a plain socket server that
    does nothing but write it: what the client alone can take in."""
    import socket

    import AMPS

    # record the frames a query of batch_size 10 produces
    q = Querier(port)
    q.n += 1
    cid = "rec"
    q.s.sendall(frame({"c": "sow", "t": TOPIC, "cid": cid, "query_id": cid,
                       "a": "processed,completed", "batch_size": 10}))
    frames = []
    while True:
        payload = q.next_frame()
        frames.append(payload)
        if payload.startswith(b'{"c":"ack"') and b'"a":"completed"' in payload:
            break
    q.close()
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(1)
    lport = lsock.getsockname()[1]

    def serve() -> None:
        conn, _ = lsock.accept()
        dec = RawPeer.__new__(RawPeer)
        dec.s = conn
        from collections import deque

        from amps_emulator.protocol.codec import FrameDecoder
        dec.decoder = FrameDecoder(1 << 30)
        dec._ready = deque()
        while True:  # logon, then the sow command: answer with the recorded result
            try:
                payload = dec.next_frame()
            except (ConnectionError, OSError):
                return
            h, _ = split_frame(payload)
            if h.get("c") == "logon":
                conn.sendall(frame({"c": "ack", "cid": h.get("cid"), "a": "processed",
                                    "status": "success", "client_name": "x",
                                    "version": "5.3.4.0"}))
            elif h.get("c") == "sow":
                qid = (h.get("query_id") or h.get("cid")).encode()
                out = []
                for p in frames:
                    p = p.replace(b'"query_id":"rec"', b'"query_id":"%s"' % qid)
                    p = p.replace(b'"cid":"rec"', b'"cid":"%s"' % h["cid"].encode())
                    out.append(len(p).to_bytes(4, "big") + p)
                conn.sendall(b"".join(out))

    threading.Thread(target=serve, daemon=True).start()
    c = AMPS.Client("bench-client-only")
    c.connect(f"tcp://127.0.0.1:{lport}/amps/json")
    c.logon(5000)
    got = 0
    t0 = time.perf_counter()
    for m in c.sow(TOPIC, timeout=60_000):
        if m.get_command() == "sow":
            got += 1
        elif m.get_command() == "group_end":
            break
    dt = time.perf_counter() - t0
    c.close()
    lsock.close()
    line(f"client-only: the official client iterating a recorded batch_size-10 result of "
         f"{got:,} records from a socket that only writes it: {got / dt:,.0f} records/s")


def line(text: str) -> None:
    print(text, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--profile", help="run the server under cProfile, stats to this file")
    ap.add_argument("--no-client", action="store_true", help="raw-socket figures only")
    ap.add_argument("--root", help="run the server of another checkout (an A/B comparison)")
    args = ap.parse_args()
    n = args.records
    with tempfile.TemporaryDirectory(prefix="bench-sow-query-") as d:
        cfg = write_config(d, TOPIC)
        srv = ProfiledServer(cfg, os.path.abspath(args.profile)) if args.profile \
            else ServerProcess(cfg, root=Path(args.root) if args.root else None)
        try:
            dt = load(srv.port, TOPIC, n)
            line(f"load: {n:,} records x 200 B: {dt:.1f} s")
            raw_figures(srv.port, n, args.repeat)
            if not args.no_client:
                client_figures(srv.uri, n, max(1, args.repeat // 2))
                client_only(srv.port, n)
        finally:
            srv.stop()
    line(f"machine: {machine()}; load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
