"""A sync HA pair against one instance, in the same run: persisted publish ingest (and the
ratio of the two) and persisted-ack latency.

Each set-up runs in subprocesses on the same config (a file journal recording every JSON
topic, group commit + fsync): "single" is one instance without replication; "sync pair" is
instance A replicating to B and B to A, both ``sync``, so A acks a publish only once it is
durable on A *and* B acknowledged it (B's own fsync included). All three run throughout.

Each round publishes ``--messages`` to the single instance and to A, interleaved (the order
alternates round by round, so a drift of the machine's load weighs on both alike), with each
``--client``: ``official``, the official Python client with a publish store, awaiting the
persisted acks (``publish_flush``) every ``--flush-every`` messages; ``raw``, the raw
publisher of ``bench_persisted_publish``, as fast as acks come (``--window`` in flight). It
prints each round's messages/s, the CPU per message (user + system, all threads, from /proc
and ``os.times``) of the servers and of the publishing client, and the pair's ratio to the
single instance; then per client the median ratio and the best round of each (best pair over
best single), with the load average before and after. Last, paced at ``--rate`` for the
p50/p99 of the persisted ack. On a machine other work shares, the rounds differ: the median
says more than any one of them; the best-of rounds is the figure nearest a quiet machine.
``--profile DIR`` samples S, A and B with py-spy (on PATH, e.g. ``pip install --user py-spy``)
during the ingest rounds, as collapsed stacks in ``DIR/<name>.txt``: where each server's CPU
per message goes (the compiled sync thread and the kernel's side of a syscall are not seen)."""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from amps_emulator.pair import free_port, pair_config  # noqa: E402
from bench._support import BODY, PersistedPublisher, ServerProcess, machine  # noqa: E402
from bench.bench_persisted_publish import Publisher  # noqa: E402


class NamedPublisher(Publisher):
    """The persisted-publish bench's publisher under a name of its own (a publisher's ``s``
    starts at 1: another name each round, or the server takes them for republished ones)."""

    def __init__(self, port: int, name: str) -> None:
        PersistedPublisher.__init__(self, port, name)
        self.send_times = []


def cpu_seconds(pid: int) -> float:
    """User + system CPU of process ``pid`` so far (Linux; 0 elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ingest(port: int, name: str, n: int, window: int, batch: int,
           pids: list[int]) -> tuple[float, list[float]]:
    """(messages/s, CPU microseconds per message of each of ``pids`` then of this process) of
    ``n`` persisted publishes to ``port`` by the raw publisher, at most ``window``
    unacknowledged."""
    pub = NamedPublisher(port, name)
    pub.send_batch(1)  # warm-up: also waits for the pair's link, which gates the first ack
    pub.wait_acked(1)
    cpu0 = [cpu_seconds(p) for p in pids]
    me0 = os.times()
    t0 = time.perf_counter()
    start = pub.seq
    while pub.seq < start + n:
        pub.wait_window(window)
        pub.send_batch(min(batch, start + n - pub.seq))
    pub.wait_acked(pub.seq)
    dt = time.perf_counter() - t0
    pub.s.close()
    return n / dt, _cpu(pids, cpu0, me0, n)


def _cpu(pids: list[int], cpu0: list[float], me0: os.times_result, n: int) -> list[float]:
    """CPU microseconds per message since ``cpu0``/``me0`` of each of ``pids``, then of this
    process (the client)."""
    me = os.times()
    mine = me.user - me0.user + me.system - me0.system
    return [(cpu_seconds(p) - c) / n * 1e6 for p, c in zip(pids, cpu0, strict=True)] + [mine / n * 1e6]


def ingest_official(port: int, name: str, n: int, every: int,
                    pids: list[int]) -> tuple[float, list[float]]:
    """:func:`ingest` by the official Python client with a publish store, awaiting the
    persisted acks of what it published every ``every`` messages."""
    import AMPS

    client = AMPS.Client(name)
    client.set_publish_store(AMPS.MemoryPublishStore())
    client.connect(f"tcp://127.0.0.1:{port}/amps/json")
    client.logon()
    client.publish("persisted", BODY % 0)  # warm-up: also waits for the pair's link
    client.publish_flush()
    cpu0 = [cpu_seconds(p) for p in pids]
    me0 = os.times()
    t0 = time.perf_counter()
    publish = client.publish
    for i in range(1, n + 1):
        publish("persisted", BODY % i)
        if i % every == 0:
            client.publish_flush()
    client.publish_flush()
    dt = time.perf_counter() - t0
    cpu = _cpu(pids, cpu0, me0, n)
    client.close()
    return n / dt, cpu


def latency(port: int, name: str, rate: int, seconds: float) -> tuple[float, float]:
    """(p50, p99) milliseconds of the persisted ack, publishing at ``rate`` for ``seconds``."""
    pub = NamedPublisher(port, name)
    pub.send_batch(1)
    pub.wait_acked(1)
    paced_from = pub.seq
    per_batch = 50
    interval = per_batch / rate
    t1 = next_send = time.perf_counter()
    while time.perf_counter() - t1 < seconds:
        now = time.perf_counter()
        if now < next_send:
            time.sleep(next_send - now)
        pub.send_batch(per_batch)
        next_send += interval
    pub.wait_acked(pub.seq)
    lat = pub.latencies(paced_from)
    pub.s.close()
    return lat[len(lat) // 2] * 1000, lat[int(len(lat) * 0.99)] * 1000


def profilers(where: str | None, procs: dict[str, int]) -> list[subprocess.Popen[bytes]]:
    """With ``--profile DIR``: one py-spy sampler per server (``DIR/<name>.txt``, collapsed
    stacks, idle samples left out) for the ingest rounds; py-spy must be on PATH."""
    if not where:
        return []
    spy = shutil.which("py-spy")
    if spy is None:
        raise SystemExit("--profile needs py-spy on PATH (pip install --user py-spy)")
    os.makedirs(where, exist_ok=True)
    return [subprocess.Popen([spy, "record", "--pid", str(pid), "--format", "raw", "--rate", "250",
                              "--nonblocking", "-o", os.path.join(where, f"{name}.txt")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for name, pid in procs.items()]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--client", choices=("official", "raw", "both"), default="both")
    ap.add_argument("--flush-every", type=int, default=1000,
                    help="official client: await the persisted acks every this many messages")
    ap.add_argument("--batch", type=int, default=200, help="raw publisher: messages per write")
    ap.add_argument("--window", type=int, default=20_000,
                    help="raw publisher: max unacked messages in flight")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--rate", type=int, default=10_000, help="latency phase: messages/s")
    ap.add_argument("--seconds", type=float, default=3.0, help="latency phase: duration")
    ap.add_argument("--profile", metavar="DIR",
                    help="sample S, A and B with py-spy during the ingest rounds into DIR/<name>.txt")
    args = ap.parse_args()
    n = args.messages
    clients = ("official", "raw") if args.client == "both" else (args.client,)
    with tempfile.TemporaryDirectory(prefix="amps-bench-pair-") as tmp:
        base = Path(tmp)
        single = base / "single.xml"
        single.write_text(pair_config("S", None, repl_port=0, peer_repl_port=0, data_dir=base / "s",
                                      admin_addr=None))
        ports = free_port(), free_port()
        paths = []
        for i, (name, peer) in enumerate((("A", "B"), ("B", "A"))):
            path = base / f"{name}.xml"
            path.write_text(pair_config(name, peer, repl_port=ports[i], peer_repl_port=ports[1 - i],
                                        data_dir=base / name.lower(), admin_addr=None))
            paths.append(path)
        with ServerProcess(str(single)) as s, ServerProcess(str(paths[1])) as b, \
                ServerProcess(str(paths[0])) as a:
            load0 = os.getloadavg()
            print(f"{n:,} persisted publishes of 200 B a round to each; {os.cpu_count()} CPUs, "
                  f"load average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}")
            print("clients: " + "; ".join(
                {"official": f"official: official Python client, publish store, persisted acks "
                             f"awaited every {args.flush_every:,}",
                 "raw": f"raw: raw publisher, {args.window:,} in flight"}[c] for c in clients))
            rates: dict[str, dict[str, list[float]]] = {c: {"single": [], "pair": []} for c in clients}
            spies = profilers(args.profile, {"S": s.proc.pid, "A": a.proc.pid, "B": b.proc.pid})
            for r in range(1, args.rounds + 1):
                for client in clients:
                    got = {}
                    order = ("single", "pair") if r % 2 else ("pair", "single")
                    for what in order:
                        port, pids = (s.port, [s.proc.pid]) if what == "single" else \
                            (a.port, [a.proc.pid, b.proc.pid])
                        name = f"{client}-{what}-{r}"
                        got[what] = ingest_official(port, name, n, args.flush_every, pids) \
                            if client == "official" else ingest(port, name, n, args.window, args.batch, pids)
                        rates[client][what].append(got[what][0])
                    one, (cpu_s, cpu_c1) = got["single"]
                    two, (cpu_a, cpu_b, cpu_c2) = got["pair"]
                    print(f"round {r} {client:>8}: single {one:8,.0f}/s (S {cpu_s:.2f}, client "
                          f"{cpu_c1:.2f} us CPU/msg); pair {two:8,.0f}/s (A {cpu_a:.2f}, B {cpu_b:.2f}, "
                          f"client {cpu_c2:.2f} us CPU/msg); pair/single {two / one:.2f}")
            load1 = os.getloadavg()
            for spy in spies:
                spy.send_signal(2)  # py-spy writes its file on SIGINT
                spy.wait(30)
            for client in clients:
                ones, twos = rates[client]["single"], rates[client]["pair"]
                ratios = [t / o for o, t in zip(ones, twos, strict=True)]
                print(f"{client:>8}: pair/single median of {args.rounds} rounds "
                      f"{statistics.median(ratios):.2f} "
                      f"(rounds {min(ratios):.2f}..{max(ratios):.2f}); best-of rounds: single "
                      f"{max(ones):,.0f}/s, pair {max(twos):,.0f}/s, ratio {max(twos) / max(ones):.2f}")
            print(f"load average before {load0[0]:.2f}, after {load1[0]:.2f} (1 min)")
            for what, port in (("single", s.port), ("sync pair", a.port)):
                p50, p99 = latency(port, f"paced-{what}", args.rate, args.seconds)
                print(f"{what:>9}: persisted-ack latency at {args.rate:,}/s: p50 {p50:.2f} ms, "
                      f"p99 {p99:.2f} ms")
    print(f"machine: {machine()}")


if __name__ == "__main__":
    main()
