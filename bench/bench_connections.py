"""Many connections: 10,000 logged-on clients with heartbeats, against the do-nothing sink.

A client process opens ``--clients`` raw connections (at most :data:`IN_FLIGHT` logons
awaiting their ack at a time), each of which logs on and starts
heartbeating (``{"c":"heartbeat","o":"start,N"}``, ``--interval`` seconds) and answers every
heartbeat the server sends; it raises its own open-files limit (``resource.setrlimit``) to
the hard limit. Measured, per target:

* logons/s: from the first connect to the last logon ack (and the server's CPU time a logon,
  steadier on a shared machine);
* RSS per connection: the server process's resident memory once every client is logged on,
  less before the first connected, over the number of clients (``/proc/PID/status``);
* ping round trips while they are all connected (and heartbeating): a separate client sends
  ``flush`` commands ``--pings`` times, paced ``--ping-gap`` seconds apart, and times each
  to its ack: p50, p99, max.

Targets, in interleaved rounds: the sink (``bench/sink.py``: answers logon and flush, ignores
heartbeats), the emulator's built-in config, and with ``--baseline DIR`` another checkout's.
The issue's goal: at most 16 KiB per connection and ping p99 at or below 20 ms.

    python bench/bench_connections.py [--clients 10000] [--interval 4] [--pings 1000]
                                      [--rounds 1] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import json
import resource
import selectors
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._support import (  # noqa: E402
    RawPeer,
    cpu_seconds,
    frame,
    interleaved,
    launch,
    machine,
    percentiles,
    side_by_side,
    target_labels,
)

#: logons awaiting their ack at a time: a client connecting faster than the server accepts
#: overflows its listen backlog, and the kernel then retries the connect a second later
IN_FLIGHT = 64


def _raise_nofile() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def _clients_main(port: int, n: int, interval: float) -> None:
    """``--connect``: open ``n`` clients, log them on, start heartbeats; say how long the
    logons took; answer heartbeats until stdin closes."""
    limit = _raise_nofile()
    if limit < n + 64:
        print(json.dumps({"error": f"open-files limit {limit} is below {n + 64}"}), flush=True)
        return
    sel = selectors.DefaultSelector()
    pending: dict[int, bytes] = {}
    logged_on = 0
    beat = frame({"c": "heartbeat", "o": "beat"})

    def read(sock: socket.socket) -> None:
        nonlocal logged_on
        try:
            data = sock.recv(65536)
        except BlockingIOError:
            return
        if not data:
            sel.unregister(sock)
            return
        buf = pending.pop(sock.fileno(), b"") + data
        pos = 0
        while len(buf) - pos >= 4:
            size = int.from_bytes(buf[pos:pos + 4], "big")
            if len(buf) - pos - 4 < size:
                break
            payload = buf[pos + 4:pos + 4 + size]
            pos += 4 + size
            if payload.startswith(b'{"c":"heartbeat"'):
                sock.send(beat)
            elif b'"cid":"l"' in payload:
                logged_on += 1
        if pos < len(buf):
            pending[sock.fileno()] = buf[pos:]

    def poll(timeout: float) -> None:
        for key, _ in sel.select(timeout):
            read(key.fileobj)  # type: ignore[arg-type]

    start = frame({"c": "heartbeat", "o": f"start,{interval:g}"})
    socks = []
    t0 = time.perf_counter()
    for i in range(n):
        while i - logged_on >= IN_FLIGHT:  # (more would overflow the listen backlog)
            poll(0.01)
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(frame({"c": "logon", "cid": "l", "client_name": f"conn-{i}", "a": "processed"})
                  + start)
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
        socks.append(s)
        poll(0)
    while logged_on < n and time.perf_counter() - t0 < 300:
        poll(0.5)
    dt = time.perf_counter() - t0
    print(json.dumps({"logged_on": logged_on, "seconds": dt}), flush=True)
    stop = selectors.DefaultSelector()
    stop.register(sys.stdin, selectors.EVENT_READ)
    while not stop.select(0):
        poll(0.05)
    for s in socks:
        s.close()


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def _pings(port: int, n: int, gap: float) -> list[float]:
    peer = RawPeer(port, "pinger")
    times = []
    try:
        for i in range(n):
            t0 = time.perf_counter()
            peer.s.sendall(frame({"c": "flush", "cid": f"p{i}", "a": "processed"}))
            peer.wait_ack(f"p{i}", "processed")
            times.append(time.perf_counter() - t0)
            time.sleep(gap)
    finally:
        peer.close()
    return times


def _round(target: str, args: argparse.Namespace) -> dict[str, float]:
    with launch(target, args.baseline) as srv:
        pid = srv.proc.pid
        _pings(srv.port, 20, 0)  # warm: the ping path, and the server's first allocations
        before = _rss(pid)
        cpu0 = cpu_seconds(pid)
        clients = subprocess.Popen(
            [sys.executable, __file__, "--connect", str(srv.port), "--clients", str(args.clients),
             "--interval", str(args.interval)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True)
        assert clients.stdout is not None and clients.stdin is not None
        got = json.loads(clients.stdout.readline())
        if "error" in got or got["logged_on"] < args.clients:
            clients.kill()
            raise RuntimeError(f"{target}: {got}")
        cpu = (cpu_seconds(pid) - cpu0) / args.clients
        time.sleep(args.interval)  # a heartbeat round at least
        rss = (_rss(pid) - before) / args.clients
        pings = sorted(_pings(srv.port, args.pings, args.ping_gap))
        clients.stdin.close()
        clients.wait(60)
    return {"logons": args.clients / got["seconds"], "cpu": cpu, "rss": rss, **percentiles(pings)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=10_000)
    ap.add_argument("--interval", type=float, default=4.0, help="heartbeat interval, seconds")
    ap.add_argument("--pings", type=int, default=1000)
    ap.add_argument("--ping-gap", type=float, default=0.005)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--baseline", type=Path, metavar="DIR",
                    help="also run the emulator of this checkout (before/after)")
    ap.add_argument("--connect", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.connect is not None:
        _clients_main(args.connect, args.clients, args.interval)
        return
    _raise_nofile()
    targets = side_by_side(args.baseline)
    results: dict[str, list[dict[str, float]]] = {}
    for r, t in interleaved(targets, args.rounds):
        res = _round(t, args)
        results.setdefault(t, []).append(res)
        print(f"round {r + 1}: {t}: {res['logons']:,.0f} logons/s "
              f"({res['cpu'] * 1e6:.0f} us of server CPU each), "
              f"{res['rss'] / 1024:.1f} KiB/connection, ping p50 {res['p50'] * 1e3:.2f} ms "
              f"p99 {res['p99'] * 1e3:.2f} ms max {res['max'] * 1e3:.2f} ms", flush=True)
    print(f"\n{args.clients:,} logged-on clients heartbeating every {args.interval:g} s; "
          f"{args.pings} flush pings {args.ping_gap * 1e3:g} ms apart while connected "
          f"(median of {args.rounds} round(s))")
    print(f"{'target':34} {'logons/s':>9} {'CPU us':>7} {'KiB/conn':>9} {'p50 ms':>7} "
          f"{'p99 ms':>7} {'max ms':>7} {'p99 vs sink':>11}")
    labels = target_labels(args.baseline, sink="do-nothing sink")
    med = {t: {k: statistics.median(r[k] for r in rs) for k in rs[0]}
           for t, rs in results.items()}
    for t in targets:
        m = med[t]
        print(f"{labels[t]:34} {m['logons']:>9,.0f} {m['cpu'] * 1e6:>7.0f} {m['rss'] / 1024:>9.1f} "
              f"{m['p50'] * 1e3:>7.2f} {m['p99'] * 1e3:>7.2f} {m['max'] * 1e3:>7.2f} "
              f"{m['p99'] / med['sink']['p99']:>10.2f}x")
    print("goal: at most 16 KiB per connection, ping p99 at or below 20 ms")
    print(f"machine: {machine()}")


if __name__ == "__main__":
    main()
