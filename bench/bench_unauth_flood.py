"""Does a flood of unauthenticated connections slow a client that is logged on? The round trip
of a logged-on client, one publish then a flush waiting for its processed ack, is measured on
a quiet server, then while another process floods it with what an attacker without
credentials can send:

* hundreds of connections to the data port that never log on (reopened when closed);
* WebSocket upgrades trickled a byte a second, never finished;
* connections announcing 60 MiB frames before any logon, over tcp and websocket, sending as
  fast as they can and reconnecting when refused;
* Admin requests trickled a byte a second (slowloris).

The round trip is timed from a raw socket: the official Python client's wait for a flush ack
works in steps of about 10 ms, which would hide what the server adds (an official client,
logged on beside it, is pinged too, to check that it is served throughout). The flooding
process runs at a lower priority (nice 10): an attacker on another machine takes none of the
server's CPU. Rounds alternate quiet and flood so drift on the machine hits both alike.
Prints p50, p99 and max of each beside the quiet baseline and their ratio (the goal: within
2x), the server's resident memory in each phase, and what the flood managed (connections
opened, ended by the server, failed). ``--root DIR`` runs the server from another checkout
(e.g. one of main) in the same way.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Protocol

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._support import RawPeer, ServerProcess, frame, machine  # noqa: E402

CONFIG = """<AMPSConfig><Name>flood</Name>
<Transports>
<Transport><Name>json-tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
<MessageType>json</MessageType><Protocol>amps</Protocol></Transport>
<Transport><Name>json-ws</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
<MessageType>json</MessageType><Protocol>websocket</Protocol></Transport>
</Transports></AMPSConfig>"""

MiB = 1 << 20
UPGRADE = (b"GET /amps/json HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
           b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
           b"Sec-WebSocket-Version: 13\r\n\r\n")
ADMIN_GET = b"GET /amps.json HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"x" * 200 + b"\r\n\r\n"


def _ws_header(n: int) -> bytes:
    return bytes([0x82, 0x80 | 127]) + n.to_bytes(8, "big") + os.urandom(4)


class EventLike(Protocol):
    def is_set(self) -> bool: ...


class Tally:
    def __init__(self) -> None:
        self.opened = 0
        self.closed_by_server = 0
        self.refused = 0  # connect failed


async def _connect(port: int, tally: Tally) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    try:
        r, w = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        tally.refused += 1
        await asyncio.sleep(0.05)
        return None
    tally.opened += 1
    return r, w


async def _gone(reader: asyncio.StreamReader) -> bool:
    """Whether the server closed the connection (without waiting)."""
    if reader.at_eof():
        return True
    try:
        data = await asyncio.wait_for(reader.read(65536), 0.001)
    except TimeoutError:
        return False
    except OSError:
        return True
    return not data


async def idle(port: int, tally: Tally, stop: asyncio.Event) -> None:
    """Connects and sends nothing; reconnects once the server closes it."""
    while not stop.is_set():
        conn = await _connect(port, tally)
        if conn is None:
            continue
        r, w = conn
        try:
            await r.read()  # until the server closes it (the logon timeout, or the cap)
        except OSError:
            pass
        tally.closed_by_server += 1
        w.close()


async def trickle(port: int, request: bytes, tally: Tally, stop: asyncio.Event) -> None:
    """Sends ``request`` a byte a second; reconnects once the server closes it."""
    while not stop.is_set():
        conn = await _connect(port, tally)
        if conn is None:
            continue
        r, w = conn
        try:
            for i in range(len(request) - 1):  # never the last byte
                w.write(request[i:i + 1])
                await w.drain()
                await asyncio.sleep(1.0)
                if stop.is_set() or await _gone(r):
                    break
        except OSError:
            pass
        tally.closed_by_server += 1
        w.close()


async def big_frames(port: int, websocket: bool, tally: Tally, stop: asyncio.Event) -> None:
    """Announces a 60 MiB frame before any logon and sends it as fast as the server takes it;
    reconnects once refused."""
    chunk = b"x" * (256 << 10)
    while not stop.is_set():
        conn = await _connect(port, tally)
        if conn is None:
            continue
        r, w = conn
        try:
            if websocket:
                w.write(UPGRADE)
                await r.readuntil(b"\r\n\r\n")
                w.write(_ws_header(60 * MiB))
            else:
                w.write((60 * MiB).to_bytes(4, "big"))
            for _ in range(240):
                w.write(chunk)
                await w.drain()
                if await _gone(r):
                    break
        except (OSError, asyncio.IncompleteReadError):
            pass
        tally.closed_by_server += 1
        w.close()
        await asyncio.sleep(0.02)


async def _flood(ports: dict[str, int], sizes: dict[str, int], done: EventLike,
                 out: multiprocessing.Queue) -> None:
    stop = asyncio.Event()
    tally = Tally()
    tasks = [asyncio.create_task(idle(ports["tcp"], tally, stop)) for _ in range(sizes["idle"])]
    tasks += [asyncio.create_task(trickle(ports["ws"], UPGRADE, tally, stop))
              for _ in range(sizes["upgrades"])]
    tasks += [asyncio.create_task(big_frames(ports["tcp" if i % 2 else "ws"], bool(i % 2 == 0),
                                             tally, stop)) for i in range(sizes["frames"])]
    tasks += [asyncio.create_task(trickle(ports["admin"], ADMIN_GET, tally, stop))
              for _ in range(sizes["admin"])]
    while not done.is_set():
        await asyncio.sleep(0.1)
    stop.set()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    out.put((tally.opened, tally.closed_by_server, tally.refused))


def flood_process(ports: dict[str, int], sizes: dict[str, int], done: EventLike,
                  out: multiprocessing.Queue) -> None:
    # below the server and the pinger: an attacker elsewhere takes none of their CPU, and on
    # a 2-core machine the flooding process would otherwise be measured as much as the server
    os.nice(10)
    asyncio.run(_flood(ports, sizes, done, out))


def raw_pings(peer: RawPeer, n: int) -> list[float]:
    """Seconds of ``n`` publish+flush round trips from a raw socket."""
    out = []
    for i in range(n):
        cid = str(i)
        t0 = time.perf_counter()
        peer.s.sendall(frame({"c": "p", "t": "ping"}, b'{"i":1}')
                       + frame({"c": "flush", "cid": cid, "a": "processed"}))
        peer.wait_ack(cid, "processed")
        out.append(time.perf_counter() - t0)
    return out


def client_pings(client, n: int) -> None:
    """``n`` publish+flush round trips of the official client (each must be acknowledged
    within 10 s)."""
    for i in range(n):
        client.publish("ping", f"{{\"i\":{i}}}")
        client.publish_flush(10_000)


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return 0.0


def _summary(samples: list[float]) -> tuple[float, float, float]:
    s = sorted(samples)
    return (statistics.median(s) * 1000, s[min(len(s) - 1, int(len(s) * 0.99))] * 1000,
            s[-1] * 1000)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pings", type=int, default=2000, help="round trips per phase and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--idle", type=int, default=300, help="connections that never log on")
    ap.add_argument("--upgrades", type=int, default=100, help="trickled WebSocket upgrades")
    ap.add_argument("--frames", type=int, default=20, help="connections sending 60 MiB frames")
    ap.add_argument("--admin", type=int, default=50, help="trickled Admin requests")
    ap.add_argument("--root", help="run the server from this checkout instead")
    args = ap.parse_args()
    import AMPS

    cfg = tempfile.NamedTemporaryFile("w", suffix=".xml", delete=False)
    cfg.write(CONFIG)
    cfg.close()
    sizes = {"idle": args.idle, "upgrades": args.upgrades, "frames": args.frames,
             "admin": args.admin}
    phases: dict[str, list[float]] = {"quiet": [], "flood": []}
    rss: dict[str, list[float]] = {"quiet": [], "flood": []}
    tallies = []
    root = Path(args.root).resolve() if args.root else None
    failure = None
    # (ERROR: the server's one line per refused connection would bury the figures)
    with ServerProcess(cfg.name, ["--admin", "127.0.0.1:0", "--log-level", "ERROR"],
                       root=root) as srv:
        admin = srv.proc.stdout.readline().split()[1]  # type: ignore[union-attr]
        ports = {"tcp": srv.port, "ws": int(srv.ready_uris[1].split(":")[2].split("/")[0]),
                 "admin": int(admin.rsplit(":", 1)[1].split("/")[0])}
        client = AMPS.Client("bench-pinger")
        client.connect(srv.uri)
        client.logon(5000)
        peer = RawPeer(srv.port, "bench-raw-pinger")
        peer.s.settimeout(30)
        client_pings(client, 100)  # warm-up
        raw_pings(peer, 500)

        def measure(label: str) -> None:
            phases[label] += raw_pings(peer, args.pings)
            client_pings(client, 20)
            rss[label].append(_rss_mb(srv.proc.pid))

        ctx = multiprocessing.get_context("spawn")
        for _ in range(args.rounds):
            measure("quiet")
            out: multiprocessing.Queue = ctx.Queue()
            done = ctx.Event()
            flooder = ctx.Process(target=flood_process, args=(ports, sizes, done, out))
            flooder.start()
            time.sleep(3.0)  # the flood's connections open
            try:
                measure("flood")
            except Exception as exc:  # (a server that stops answering under the flood)
                failure = f"{type(exc).__name__}: {exc}"
            done.set()
            tallies.append(out.get(timeout=60))
            flooder.join()
            if failure is not None:
                break
        client.close()
        peer.close()
    os.unlink(cfg.name)
    print(f"publish+flush round trip of a logged-on client (raw socket), {args.rounds} rounds "
          f"of {args.pings} per phase")
    print(f"{'':6} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}   server RSS")
    base = _summary(phases["quiet"])
    for label in ("quiet", "flood"):
        if phases[label]:
            p50, p99, top = _summary(phases[label])
            print(f"{label:6} {p50:8.3f} {p99:8.3f} {top:8.1f}   {max(rss[label], default=0):.0f} MB")
    if phases["flood"]:
        p50, p99, top = _summary(phases["flood"])
        print(f"{'ratio':6} {p50 / base[0]:7.2f}x {p99 / base[1]:7.2f}x {top / base[2]:7.2f}x"
              "   (goal: p50 and p99 within 2x)")
    opened = sum(t[0] for t in tallies)
    closed = sum(t[1] for t in tallies)
    refused = sum(t[2] for t in tallies)
    print(f"flood per round: {args.idle} idle connections, {args.upgrades} trickled upgrades, "
          f"{args.frames} 60 MiB frame senders, {args.admin} trickled Admin requests; "
          f"{opened} connections opened in all, {closed} ended, {refused} connects failed")
    if failure is not None:
        print(f"the server stopped answering the logged-on client under the flood: {failure}")
    print(f"machine: {machine()}")


if __name__ == "__main__":
    main()
