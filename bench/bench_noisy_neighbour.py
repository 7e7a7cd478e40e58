"""Noisy neighbour: how long one client's expensive command keeps another client waiting.

    python bench/bench_noisy_neighbour.py                       # the sizes of issue 36
    python bench/bench_noisy_neighbour.py --baseline /tmp/main  # also another checkout, same run
    python bench/bench_noisy_neighbour.py --records 20000 --replay 30000 --topics 2000 \\
        --clauses 1000 --body-mib 4                             # a quick look

One server subprocess per checkout: a persistent SOW topic ``orders`` keyed on ``/id``
(``--records`` 200-byte records), a recorded topic ``ticks`` (``--replay`` messages), a
transient ``Pattern`` SOW container ``^/px/`` with ``--topics`` logical topics of one record
each (transient: a persistent one takes minutes to load), all recorded by the transaction
log. Loading is done before anything is measured.

A ping client in a process of its own sends ``flush`` commands (``a=processed``) one after
the other over a raw socket, stamping each round trip. The bench then runs, from another
raw client, one expensive operation at a time, with a pause between them:

* a ``subscribe`` whose filter has ``--clauses`` clauses (``/id = 0 OR /id = 1 OR ...``),
  until its processed ack;
* the same huge filter's ``subscribe`` (another text), and just after it another client's
  ``subscribe`` with a long but small filter (300 clauses, about 4 KB, compiled aside too):
  the time to that one's processed ack is printed as the operation runs (it queued behind
  the huge one while one worker compiled every client's long filters);
* a regex ``subscribe`` (``^/px/.*7$``), then a regex ``sow_and_subscribe`` (``^/px/``) over
  the ``--topics`` logical topics, until its completed ack;
* a ``sow`` of the whole ``orders`` topic (``batch_size`` 100), every record read;
* a bookmark ``subscribe`` from EPOCH on ``ticks``: the replay of ``--replay`` messages,
  until its completed ack;
* one publish of a ``--body-mib`` MiB body to ``orders``, until a ``flush`` ack;
* ``sow_delete`` with the filter ``1=1`` on ``orders`` (every record), until its stats ack;
* a regex ``sow`` ordered and paged as one result (``orderby``, ``top_n``, ``skip_n``);
* replays of ``ticks`` with a filter, with ``select`` and ``timestamp``, from a timestamp
  bookmark, with a ``rate``, and of the regex topic ``^/px/.*7$``;
* a regex ``sow_delete`` (``1=1``) over the ``--topics`` logical topics.

For each, the ping round trips under way at some point while it ran: their count, worst and
99th percentile, beside the same figures for a quiet period (nothing else running) measured
first. The goal is a worst round trip of at most 100 ms while any of them runs. On a machine
that other work shares, the quiet worst shows what the machine alone adds.
``--only`` runs some of the operations."""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._support import RawPeer, ServerProcess, frame, machine  # noqa: E402
from tests.support.servers import config_xml  # noqa: E402

SOW_XML = """<SOW>
  <Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
    <FileName>{d}/sow/%n.sow</FileName></Topic>
  <Topic><Name>Prices</Name><Pattern>^/px/</Pattern><MessageType>json</MessageType>
    <Key>/id</Key><Durability>transient</Durability></Topic>
</SOW>"""

BODY = b'{"id":%d,"sym":"S%03d","px":%d.25,"qty":%d,"note":"'
GAP = 0.3  # seconds between operations: each one's round trips are its own


def body(i: int) -> bytes:
    head = BODY % (i, i % 1000, i % 5000, i % 977)
    return head + b"x" * (198 - len(head)) + b'"}'


# -- the ping client (a process of its own) --------------------------------------------------
def _ping(port: int, stop: Any, ready: Any, out: Any) -> None:
    peer = RawPeer(port, "ping")
    times: list[tuple[float, float]] = []
    ready.set()
    n = 0
    while not stop.is_set():
        n += 1
        cid = f"f{n}"
        t0 = time.monotonic()
        peer.s.sendall(frame({"c": "flush", "cid": cid, "a": "processed"}))
        peer.wait_ack(cid, "processed")
        times.append((t0, time.monotonic() - t0))
    peer.close()
    out.put(times)


class Pinger:
    def __init__(self, port: int) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.stop, ready = ctx.Event(), ctx.Event()
        self.out: Any = ctx.Queue()
        self.proc = ctx.Process(target=_ping, args=(port, self.stop, ready, self.out),
                                daemon=True)
        self.proc.start()
        if not ready.wait(60):
            raise RuntimeError("the ping client did not log on")

    def finish(self) -> list[tuple[float, float]]:
        self.stop.set()
        times = self.out.get(timeout=60)
        self.proc.join(10)
        return times


# -- loading ---------------------------------------------------------------------------------
def send_all(peer: RawPeer, payloads: Any, batch: int = 2000) -> None:
    parts: list[bytes] = []
    for p in payloads:
        parts.append(len(p).to_bytes(4, "big") + p)
        if len(parts) == batch:
            peer.s.sendall(b"".join(parts))
            parts = []
    if parts:
        peer.s.sendall(b"".join(parts))


def flush(peer: RawPeer, cid: str) -> None:
    peer.s.sendall(frame({"c": "flush", "cid": cid, "a": "processed"}))
    peer.wait_ack(cid, "processed")


def load(port: int, records: int, replay: int, topics: int) -> None:
    peer = RawPeer(port, "loader")
    head = frame({"c": "p", "t": "orders"})[4:]
    send_all(peer, (head + body(i) for i in range(records)))
    tick = frame({"c": "p", "t": "ticks"})[4:]
    send_all(peer, (tick + body(i) for i in range(replay)))
    send_all(peer, (frame({"c": "p", "t": f"/px/{i}"})[4:] + body(i) for i in range(topics)))
    flush(peer, "loaded")
    peer.close()


# -- the operations --------------------------------------------------------------------------
class Worker(RawPeer):
    """The noisy client: each method runs one expensive operation to its end."""

    def __init__(self, port: int, args: argparse.Namespace) -> None:
        super().__init__(port, "noisy")
        self.port = port
        self.args = args
        self.n = 0

    def cid(self) -> str:
        self.n += 1
        return f"w{self.n}"

    def command(self, header: dict[str, Any], ack: str, payload: bytes = b"") -> dict:
        cid = header["cid"] = self.cid()
        self.s.sendall(frame(header, payload))
        return self.wait_ack(cid, ack)

    def unsubscribe(self, sub_id: str) -> None:
        self.command({"c": "unsubscribe", "sub_id": sub_id, "a": "processed"}, "processed")

    def filter_subscribe(self) -> None:
        text = " OR ".join(f"/id = {i}" for i in range(self.args.clauses))
        self.command({"c": "subscribe", "t": "orders", "sub_id": "f", "filter": text,
                      "a": "processed"}, "processed")

    def filter_beside_huge(self) -> None:
        huge = " OR ".join(f"/id = {i}" for i in range(self.args.clauses)) + " OR /id = -2"
        small = " OR ".join(f"/qty = {i}" for i in range(300))
        neighbour = RawPeer(self.port, "neighbour")
        cid = self.cid()
        self.s.sendall(frame({"c": "subscribe", "t": "orders", "sub_id": "fh", "filter": huge,
                              "cid": cid, "a": "processed"}))
        time.sleep(0.05)  # (the huge one is read first)
        t0 = time.monotonic()
        neighbour.s.sendall(frame({"c": "subscribe", "t": "orders", "sub_id": "fs",
                                   "filter": small, "cid": "n1", "a": "processed"}))
        neighbour.wait_ack("n1", "processed")
        waited = time.monotonic() - t0
        self.wait_ack(cid, "processed")
        print(f"  a {len(small):,}-character filter beside a {len(huge):,}-character one: "
              f"acked in {waited * 1000:.0f} ms (the huge one in "
              f"{time.monotonic() - t0 + 0.05:.2f} s)", flush=True)
        neighbour.close()

    def regex_subscribe(self) -> None:
        self.command({"c": "subscribe", "t": "^/px/.*7$", "sub_id": "rx", "a": "processed"},
                     "processed")

    def regex_sow_and_subscribe(self) -> None:
        h = self.command({"c": "sow_and_subscribe", "t": "^/px/", "sub_id": "rs",
                          "batch_size": 100, "a": "processed,completed"}, "completed")
        assert int(h["records_returned"]) == self.args.topics, h

    def sow(self) -> None:
        h = self.command({"c": "sow", "t": "orders", "query_id": "q", "batch_size": 100,
                          "a": "processed,completed"}, "completed")
        assert int(h["records_returned"]) == self.args.records, h

    def replay(self) -> None:
        got = [0]

        def count(_payload: bytes) -> None:
            got[0] += 1

        cid = self.cid()
        self.s.sendall(frame({"c": "subscribe", "t": "ticks", "sub_id": "r", "bm": "0",
                              "cid": cid, "a": "processed,completed"}))
        self.wait_ack(cid, "completed", count)
        assert got[0] == self.args.replay, got

    def _replay_with(self, label: str, extra: dict[str, Any], expect: int | None) -> None:
        got = [0]

        def count(_payload: bytes) -> None:
            got[0] += 1

        cid = self.cid()
        self.s.sendall(frame({"c": "subscribe", "t": "ticks", "sub_id": label, "bm": "0",
                              "cid": cid, "a": "processed,completed", **extra}))
        self.wait_ack(cid, "completed", count)
        assert expect is None or got[0] == expect, (label, got)

    def replay_filter(self) -> None:
        self._replay_with("rf", {"filter": "/qty > 488"}, None)

    def replay_select(self) -> None:
        self._replay_with("rsel", {"opts": "select=[+/id,+/px],timestamp"}, self.args.replay)

    def replay_from_timestamp(self) -> None:
        self._replay_with("rts", {"bm": "20000101T000000"}, self.args.replay)

    def replay_rate(self) -> None:  # (a pace it keeps up with: only the pacing's cost)
        self._replay_with("rrate", {"opts": "rate=100000000"}, self.args.replay)

    def replay_regex(self) -> None:
        got = [0]
        cid = self.cid()
        self.s.sendall(frame({"c": "subscribe", "t": "^/px/.*7$", "sub_id": "rrx", "bm": "0",
                              "cid": cid, "a": "processed,completed"}))
        self.wait_ack(cid, "completed", lambda _p: got.__setitem__(0, got[0] + 1))
        assert got[0] == self.args.topics // 10, got

    def regex_sow_ordered(self) -> None:
        h = self.command({"c": "sow", "t": "^/px/", "query_id": "qo", "batch_size": 100,
                          "orderby": "/px DESC", "top_n": 1000, "skip_n": 10,
                          "a": "processed,completed"}, "completed")
        assert int(h["records_returned"]) == min(1000, self.args.topics - 10), h

    def regex_sow_delete(self) -> None:
        h = self.command({"c": "sow_delete", "t": "^/px/", "filter": "1=1",
                          "a": "processed,stats"}, "stats")
        assert int(h["records_deleted"]) == self.args.topics, h

    def big_publish(self) -> None:
        size = self.args.body_mib << 20
        blob = b'{"id":-1,"blob":"' + b"y" * (size - 20) + b'"}'
        self.s.sendall(frame({"c": "p", "t": "orders"}, blob))
        flush(self, self.cid())

    def sow_delete_all(self) -> None:
        h = self.command({"c": "sow_delete", "t": "orders", "filter": "1=1",
                          "a": "processed,stats"}, "stats")
        assert int(h["records_deleted"]) >= self.args.records, h


OPERATIONS = [
    ("filter subscribe ({clauses:,} clauses)", "filter_subscribe", "f"),
    ("small filter beside a huge one", "filter_beside_huge", "fh"),
    ("regex subscribe ({topics:,} topics)", "regex_subscribe", "rx"),
    ("regex sow_and_subscribe ({topics:,} topics)", "regex_sow_and_subscribe", "rs"),
    ("sow ({records:,} records)", "sow", None),
    ("regex sow orderby top_n skip_n ({topics:,})", "regex_sow_ordered", None),
    ("replay ({replay:,} messages)", "replay", "r"),
    ("replay with a filter", "replay_filter", "rf"),
    ("replay with select and timestamp", "replay_select", "rsel"),
    ("replay from a timestamp bookmark", "replay_from_timestamp", "rts"),
    ("replay with a rate", "replay_rate", "rrate"),
    ("replay of a regex topic ({topics:,} topics)", "replay_regex", "rrx"),
    ("publish ({body_mib} MiB body)", "big_publish", None),
    ("sow_delete 1=1 ({records:,} records)", "sow_delete_all", None),
    ("regex sow_delete 1=1 ({topics:,} topics)", "regex_sow_delete", None),
]


Window = tuple[str, float, float]  # (operation, start, end) on the monotonic clock
Pings = list[tuple[float, float]]  # (start, round trip seconds)


def run(root: Path | None, args: argparse.Namespace) -> tuple[list[Window], Pings]:
    """The operations run on one checkout's server, with the ping client's round trips."""
    with tempfile.TemporaryDirectory(prefix="bench-noisy-") as d:
        cfg = os.path.join(d, "amps.xml")
        with open(cfg, "w") as f:
            f.write(config_xml(d, txlog_topics=("orders", "ticks", "/px/.*"),
                               extra=SOW_XML.format(d=d)))
        with ServerProcess(cfg, root=root) as srv:
            t0 = time.monotonic()
            load(srv.port, args.records, args.replay, args.topics)
            print(f"  loaded in {time.monotonic() - t0:.1f} s", flush=True)
            pinger = Pinger(srv.port)
            worker = Worker(srv.port, args)
            windows: list[Window] = []
            t0 = time.monotonic()
            time.sleep(args.quiet)
            windows.append(("quiet", t0, time.monotonic()))
            for label, method, sub_id in OPERATIONS:
                if args.only and method not in args.only:
                    continue
                time.sleep(GAP)
                t0 = time.monotonic()
                getattr(worker, method)()
                windows.append((label.format(**vars(args)), t0, time.monotonic()))
                if sub_id is not None:
                    worker.unsubscribe(sub_id)
            time.sleep(GAP)
            pings = pinger.finish()
            worker.close()
    return windows, pings


def figures(windows: list[Window], pings: Pings) -> dict[str, tuple[int, float, float, float]]:
    """{operation: (round trips, worst ms, p99 ms, operation seconds)}: the round trips that
    were under way at some point while the operation ran (one that started just before it
    and waited for it counts)."""
    out = {}
    for label, start, end in windows:
        rtts = sorted(dt for t, dt in pings if t <= end and t + dt >= start)
        if not rtts:
            rtts = [0.0]
        p99 = rtts[min(len(rtts) - 1, int(len(rtts) * 0.99))]
        out[label] = (len(rtts), rtts[-1] * 1000, p99 * 1000, end - start)
    return out


def report(name: str, figures: dict[str, tuple[int, float, float, float]]) -> None:
    quiet = figures["quiet"]
    print(f"\n{name}: ping round trips (flush, processed ack) while each operation runs")
    print(f"  {'operation':<44} {'took':>8} {'pings':>6} {'worst':>9} {'p99':>9}  worst/quiet")
    for label, (n, worst, p99, took) in figures.items():
        ratio = worst / quiet[1] if quiet[1] else float("inf")
        mark = "" if worst <= 100 else "   > 100 ms"
        print(f"  {label:<44} {took:7.2f}s {n:6d} {worst:7.1f}ms {p99:7.1f}ms  {ratio:8.1f}x"
              f"{mark}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--replay", type=int, default=300_000)
    ap.add_argument("--topics", type=int, default=20_000)
    ap.add_argument("--clauses", type=int, default=10_000)
    ap.add_argument("--body-mib", type=int, default=32)
    ap.add_argument("--quiet", type=float, default=2.0, help="seconds of the quiet baseline")
    ap.add_argument("--baseline", type=Path, help="another checkout, measured first")
    ap.add_argument("--only", nargs="*", choices=[m for _, m, _ in OPERATIONS],
                    help="run only these operations")
    args = ap.parse_args()
    print(machine(), flush=True)
    if args.baseline is not None:
        print(f"baseline: {args.baseline}", flush=True)
        report(f"baseline ({args.baseline})", figures(*run(args.baseline.resolve(), args)))
    print(f"this checkout: {Path(__file__).resolve().parent.parent}", flush=True)
    report("this checkout", figures(*run(None, args)))


if __name__ == "__main__":
    main()
