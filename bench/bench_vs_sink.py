"""Publish ingest against the do-nothing sink, side by side in one run.

The official Python client publishes ``--messages`` 200-byte JSON messages (``BODY``) and
flushes, against: the sink (``bench/sink.py``: frames, answers logon and flush, discards),
the emulator with no transaction log, the emulator's built-in config with ``--memory``, and
the built-in config (every topic journalled, group fsync). Rounds are interleaved so a
noisy neighbour hits every target alike; each figure is the best of its rounds, and the
ratio is to the sink's best. Also a keyed SOW target (``--sow``): inserts then updates to a
topic keyed on ``/id``, journalled; the bench checks afterwards that the topic holds every key.

Persisted-ack latency under the ingest load (the built-in config's rounds): while the client
publishes, a second process (``--probe``) sends paced ``a=persisted`` publishes with sequence
numbers (``--probe-rate`` messages/s in batches of 5) and times each to the cumulative
persisted ack that covers it (so: journal write, group fsync and the ack, while the server is
saturated). Printed as p50/p99 over all rounds; the issue's goal is p99 <= 5 ms. The probe
runs in the ``--memory`` rounds too, where a persisted ack needs no disk (it goes out at the
end of the turn): the same load with no write or fsync under it, so its latency is the floor
the machine sets (the server's scheduling among the busy processes), as the sink is the
ceiling of ingest; what the built-in config adds over it is the journal's. Twice: as the
probe's reader thread read each ack, and (Linux) as the ack reached the probe's socket, by
the kernel's receive time. On a machine with fewer cores than busy processes (the client at
full speed, the server, the probe) the probe can wait for a CPU tens of milliseconds, and
measured on loopback even the socket's receive time followed that wait; so where it may
(root), the probe runs at real-time priority (SCHED_FIFO) and the output says whether it did.

The disk's own floor under that ack, after each built-in config round, with no server: a
thread appends what the round wrote to its journal, at the round's byte rate, in one write per
``FLOOR_TURN`` (as the loop writes once per turn), while a second thread runs the group
fdatasync as the journal's sync thread does (one at a time, each covering what was written
before it began); printed as the p50/p99 from each write to the end of the fdatasync that covers it.
A persisted ack cannot come sooner than that: a p99 goal below it is not the server's to meet
on that disk. The same floor once more *under load*: in a process of its own, while the
client of each ``--memory`` round publishes its messages a second time, untimed (the client
saturating the machine, a server that writes nothing; the round's own figures are taken
before), at the last journal round's byte rate (100 MB/s before the first). On a machine with
few cores the load slows the fdatasync itself (the kernel's writeback and journal threads and
the syncing thread wait for a CPU): that floor is what the built-in config's p99 should be read
against.

Before and after in one run: ``--baseline DIR`` also runs every emulator target from another
checkout (``git worktree add DIR main``, or ``git archive main | tar -x -C DIR``), labelled
``[baseline]``; ``--pure`` also runs them with ``AMPS_EMULATOR_PURE=1`` (the pure-Python hot path
instead of the compiled extension), labelled ``[pure]``.

``--raw`` publishes from a plain socket with the frames built before the clock starts, instead
of the official client: the official Python client tops out near the sink's rate, so once the
server is that fast the client's figure says little about the server; the raw one does.

    python bench/bench_vs_sink.py [--messages 200000] [--rounds 3] [--sow] [--probe-rate 5000]
                                  [--baseline DIR] [--pure] [--raw]
"""

from __future__ import annotations

import argparse
import json
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._support import (  # noqa: E402
    BODY,
    ROOT,
    RawPeer,
    ServerProcess,
    frame,
    machine,
    timed_publish,
    warm_publisher,
)

#: messages each publisher sends before its timed ones
WARMUP = 2000

NO_TXLOG = ("<AMPSConfig><Name>bench</Name><Transports><Transport><Name>json-tcp</Name>"
            "<Type>tcp</Type><InetAddr>127.0.0.1:9007</InetAddr><MessageType>json"
            "</MessageType><Protocol>amps</Protocol></Transport></Transports></AMPSConfig>")

SOW_KEYED = """<AMPSConfig><Name>bench</Name>
<Transports><Transport><Name>json-tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:9007</InetAddr>
<MessageType>json</MessageType><Protocol>amps</Protocol></Transport></Transports>
<TransactionLog><JournalDirectory>{d}/journal</JournalDirectory>
<Topic><Name>.*</Name><MessageType>json</MessageType></Topic></TransactionLog>
<SOW><Topic><Name>ingest</Name><MessageType>json</MessageType><Key>/id</Key>
<FileName>{d}/sow/%n.sow</FileName></Topic></SOW></AMPSConfig>"""


JOURNAL = "built-in config (journal)"
MEMORY = "--memory"


class Sink:
    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "sink.py")],
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("ready: "):
            self.proc.kill()
            raise RuntimeError(f"sink did not start: {line!r}")
        self.uri = line.split()[1]

    def __enter__(self) -> Sink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait(10)


class RawPublisher:
    """``--raw``: a publisher on a plain socket that sends frames built before the clock
    starts, so that the publisher is not what bounds the figure (the official Python client
    tops out near the sink's rate). Same messages and topic as the client's rounds."""

    def __init__(self, port: int) -> None:
        self.peer = RawPeer(port, "bench-raw-publisher")
        self.timed(WARMUP, "warmup")

    def timed(self, n: int, topic: str = "ingest") -> float:
        """Seconds to send ``n`` publishes and get the flush ack after them."""
        head = b'{"c":"p","t":"%s"}' % topic.encode()
        chunks = []
        for start in range(0, n, 5000):
            parts = []
            for i in range(start, min(n, start + 5000)):
                body = (BODY % i).encode()
                parts.append((len(head) + len(body)).to_bytes(4, "big") + head + body)
            chunks.append(b"".join(parts))
        sock = self.peer.s
        t0 = time.perf_counter()
        for chunk in chunks:
            sock.sendall(chunk)
        sock.sendall(frame({"c": "flush", "cid": "f", "a": "processed"}))
        self.peer.wait_ack("f", "processed")
        return time.perf_counter() - t0

    def close(self) -> None:
        self.peer.close()


class _Child:
    """This script in a process of its own with ``args`` (no GIL shared with the loading
    client), driven over its stdin: it prints ``ready`` (maybe followed by words, kept in
    ``ready``) once started, and one JSON line, its result, after ``stop``."""

    def __init__(self, args: list[str], what: str) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, *args],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        ready = self.stdout.readline().split()
        if not ready or ready[0] != "ready":
            self.proc.kill()
            raise RuntimeError(f"{what} did not start")
        self.ready = ready[1:]

    def say(self, line: str) -> None:
        self.stdin.write(line + "\n")
        self.stdin.flush()

    def stop(self) -> Any:
        self.say("stop")
        out = json.loads(self.stdout.readline())
        self.proc.wait(30)
        return out


class Probe(_Child):
    """The persisted-ack probe in its own process: started before a round, ``go`` right
    before the load, ``stop`` right after."""

    def __init__(self, port: int, rate: int) -> None:
        super().__init__(["--probe", str(port), "--probe-rate", str(rate)], "persisted-ack probe")
        #: the probe runs at real-time priority: its times are not its own waits for a CPU
        self.realtime = self.ready == ["realtime"]
        PROBE_REALTIME.append(self.realtime)

    def go(self) -> None:
        self.say("go")

    def stop(self) -> dict[str, list[float]]:
        """Stop sending; the latencies (seconds) of every probe message once all are acked:
        ``read`` as the probe's reader thread read the acks, ``socket`` as they reached its
        socket (kernel receive times; empty where there are none)."""
        return super().stop()


#: for each probe started: whether it ran at real-time priority
PROBE_REALTIME: list[bool] = []


def _take_realtime_priority() -> bool:
    """Put this process (and the threads it starts) at SCHED_FIFO where allowed (root, or
    CAP_SYS_NICE): on a machine the load saturates, the probe then never waits for a CPU, so
    its times are the server's. Without it, the probe's reader waited up to ~60 ms at p99 on
    2 cores, and even the socket's receive time of an ack followed that wait."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
    except (AttributeError, OSError):
        return False
    return True


def _probe_main(port: int, rate: int) -> None:
    """``--probe``: paced persisted publishes until ``stop`` on stdin; prints latencies."""
    from bench.bench_persisted_publish import Publisher

    realtime = _take_realtime_priority()
    pub = Publisher(port)
    per_batch = 5
    interval = per_batch / rate
    print("ready realtime" if realtime else "ready", flush=True)
    sys.stdin.readline()  # go
    next_send = time.perf_counter()
    while True:
        wait = max(0.0, next_send - time.perf_counter())
        if select.select([sys.stdin], [], [], wait)[0]:
            break  # stop
        pub.send_batch(per_batch)
        next_send += interval
    pub.wait_acked(pub.seq)
    print(json.dumps({"read": pub.latencies(0), "socket": pub.latencies(0, at_socket=True)}),
          flush=True)
    pub.s.close()


def _variant(target: str, baseline: Path | None) -> tuple[str, Path | None, dict[str, str] | None]:
    """``target`` without its variant label, the checkout to run and the environment to add."""
    if target.endswith(" [baseline]"):
        return target.removesuffix(" [baseline]"), baseline, None
    if target.endswith(" [pure]"):
        return target.removesuffix(" [pure]"), None, {"AMPS_EMULATOR_PURE": "1"}
    return target, None, None


def _run(target: str, n: int, tmp: str, sow_updates: bool = False,
         probe_rate: int = 0, latencies: dict[str, list[float]] | None = None,
         baseline: Path | None = None, raw: bool = False,
         floor: list[float] | None = None,
         loaded_floor: list[float] | None = None) -> tuple[float, float]:
    """(messages/s, server CPU microseconds per message) of one round of ``target``
    (``raw``: published by :class:`RawPublisher` instead of the official client;
    ``latencies``: the probe's, added by kind, see :meth:`Probe.stop`; ``floor``: for the
    built-in config, the disk floor's latencies are added, see :func:`_disk_floor`;
    ``loaded_floor``: for ``--memory``, the floor's under a second, untimed run of this
    round's load, see :class:`LoadedFloor`)."""
    target, root, env = _variant(target, baseline)
    if target == "sink":
        with Sink() as s:
            c = RawPublisher(int(s.uri.split(":")[2].split("/")[0])) if raw \
                else warm_publisher(s.uri, warmup=WARMUP)
            cpu0 = _cpu(s.proc.pid)
            dt = c.timed(n) if isinstance(c, RawPublisher) else timed_publish(c, n)
            cpu = _cpu(s.proc.pid) - cpu0
            c.close()
        return n / dt, cpu / n * 1e6
    if target == "no transaction log":
        cfg, extra = os.path.join(tmp, "no-txlog.xml"), []
    elif target == MEMORY:
        cfg, extra = None, ["--memory"]
    elif target == "built-in config (journal)":
        cfg, extra = None, []
    else:  # keyed SOW
        d = tempfile.mkdtemp(dir=tmp)
        cfg = os.path.join(d, "sow.xml")
        Path(cfg).write_text(SOW_KEYED.format(d=d))
        extra = []
    with ServerProcess(cfg, extra, root=root, env=env) as srv:
        c = RawPublisher(srv.port) if raw else warm_publisher(srv.uri, warmup=WARMUP)
        probe = Probe(srv.port, probe_rate) if probe_rate and latencies is not None else None
        if probe is not None:
            probe.go()
        cpu0 = _cpu(srv.proc.pid)
        dt = c.timed(n) if isinstance(c, RawPublisher) else timed_publish(c, n)
        probed = 0
        if probe is not None and latencies is not None:
            for kind, values in probe.stop().items():
                latencies.setdefault(kind, []).extend(values)
                probed = max(probed, len(values))
        if sow_updates:  # the same keys again: every publish replaces a record
            cpu0 = _cpu(srv.proc.pid)
            dt = c.timed(n) if isinstance(c, RawPublisher) else timed_publish(c, n)
        cpu = _cpu(srv.proc.pid) - cpu0
        if target == MEMORY and loaded_floor is not None:  # the same load again, untimed
            loaded = LoadedFloor(srv.tmp.name, FLOOR_RATES[-1] if FLOOR_RATES else DEFAULT_FLOOR_RATE)
            if isinstance(c, RawPublisher):
                c.timed(n)
            else:
                timed_publish(c, n)
            loaded_floor.extend(loaded.stop())
            LOADED_FLOOR_RATES.append(loaded.rate)
        c.close()
        if cfg is not None and "sow" in cfg:
            _check_sow(srv.port, n)
        if target == JOURNAL and floor is not None:  # the disk alone, at this round's rate
            journalled = n + probed + (0 if raw else WARMUP)  # RawPublisher's warmup too
            per_message = _tree_bytes(os.path.join(srv.tmp.name, "amps-data", "journal")) \
                / journalled
            FLOOR_RATES.append(per_message * n / dt)
            floor.extend(_disk_floor(srv.tmp.name, FLOOR_RATES[-1]))
    return n / dt, cpu / n * 1e6


#: seconds between the disk floor's writes (about a loop turn under the ingest load)
FLOOR_TURN = 0.0007
#: bytes/s of each disk floor run
FLOOR_RATES: list[float] = []
#: bytes/s of each loaded disk floor run
LOADED_FLOOR_RATES: list[float] = []


def _disk_floor(directory: str, rate: float, seconds: float = 1.0,
                stop: threading.Event | None = None) -> list[float]:
    """Seconds from each write to the end of the fdatasync that covers it: ``rate`` bytes/s
    appended in a new file in ``directory``, one write per :data:`FLOOR_TURN`, for
    ``seconds`` (or until ``stop`` is set), group-synced by a second thread (see the
    module's docstring)."""
    chunk = b"x" * max(1, int(rate * FLOOR_TURN))
    writes = max(1, int(seconds / FLOOR_TURN)) if stop is None else sys.maxsize
    path = os.path.join(directory, "disk-floor.bin")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
    written_at: list[float] = []  # when each write returned
    latencies: list[float] = []
    more = threading.Condition()
    done = False

    def syncer() -> None:
        durable = 0
        while True:
            with more:
                while len(written_at) <= durable and not done:
                    more.wait()
                target = len(written_at)
                if target <= durable:
                    return
            os.fdatasync(fd)
            end = time.perf_counter()
            latencies.extend(end - t for t in written_at[durable:target])
            durable = target

    worker = threading.Thread(target=syncer, name="disk-floor-sync")
    worker.start()
    try:
        due = time.perf_counter()
        for _ in range(writes):
            if stop is not None and stop.is_set():
                break
            os.write(fd, chunk)
            with more:
                written_at.append(time.perf_counter())
                more.notify()
            due += FLOOR_TURN
            pause = due - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
    finally:
        with more:
            done = True
            more.notify()
        worker.join()
        os.close(fd)
        os.unlink(path)
    return latencies


#: bytes/s of the loaded floor before any journal round has measured its rate
DEFAULT_FLOOR_RATE = 100e6


class LoadedFloor(_Child):
    """:func:`_disk_floor` in its own process while a load runs: started right before it,
    ``stop`` right after (its latencies)."""

    def __init__(self, directory: str, rate: float) -> None:
        super().__init__(["--disk-floor", directory, "--floor-rate", str(rate)],
                         "the loaded disk floor")
        self.rate = rate


def _floor_main(directory: str, rate: float) -> None:
    """``--disk-floor``: the disk floor until ``stop`` on stdin; prints its latencies."""
    stop = threading.Event()

    def wait_for_stop() -> None:
        sys.stdin.readline()
        stop.set()

    threading.Thread(target=wait_for_stop, daemon=True).start()
    print("ready", flush=True)
    print(json.dumps(_disk_floor(directory, rate, stop=stop)), flush=True)


def _tree_bytes(root: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(root) for f in files)


def _cpu(pid: int) -> float:
    """CPU seconds (user + system, all threads) the process ``pid`` has used: under a loaded
    machine a steadier figure of the server's cost per message than the throughput."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _check_sow(port: int, n: int) -> None:
    """The keyed topic holds one record per key: a figure that counts refused publishes
    (e.g. a body that is not valid JSON gets no key) is an error, not a result."""
    peer = RawPeer(port, "bench-check")
    peer.s.sendall(frame({"c": "sow", "cid": "q", "query_id": "q", "t": "ingest", "top_n": 1,
                          "a": "stats"}))
    held = peer.wait_ack("q", "stats").get("topic_matches")
    peer.close()
    if held != n:
        raise RuntimeError(f"keyed SOW topic holds {held} records after {n} distinct keys")


def _p50_p99(latencies: list[float]) -> str:
    """``p50 X ms, p99 Y ms`` of latencies in seconds."""
    lat = sorted(latencies)
    return f"p50 {lat[len(lat) // 2] * 1000:.2f} ms, p99 {lat[int(len(lat) * 0.99)] * 1000:.2f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sow", action="store_true", help="also keyed SOW inserts and updates")
    ap.add_argument("--probe-rate", type=int, default=5000,
                    help="persisted-ack probe messages/s during the built-in config's rounds (0: off)")
    ap.add_argument("--baseline", type=Path, metavar="DIR",
                    help="also run the emulator targets from this checkout (before/after)")
    ap.add_argument("--pure", action="store_true",
                    help="also run the emulator targets with AMPS_EMULATOR_PURE=1")
    ap.add_argument("--raw", action="store_true",
                    help="publish from a plain socket with frames built beforehand instead of "
                         "the official client (which tops out near the sink's rate)")
    ap.add_argument("--probe", type=int, metavar="PORT", help=argparse.SUPPRESS)
    ap.add_argument("--disk-floor", metavar="DIR", help=argparse.SUPPRESS)
    ap.add_argument("--floor-rate", type=float, default=DEFAULT_FLOOR_RATE, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.probe is not None:
        _probe_main(args.probe, args.probe_rate)
        return
    if args.disk_floor is not None:
        _floor_main(args.disk_floor, args.floor_rate)
        return
    targets = ["sink", "no transaction log", MEMORY, JOURNAL]
    if args.sow:
        targets += ["keyed SOW inserts (journal)", "keyed SOW updates (journal)"]
    emulator = targets[1:]
    if args.pure:
        targets += [f"{t} [pure]" for t in emulator]
    if args.baseline is not None:
        targets += [f"{t} [baseline]" for t in emulator]
    all_latencies: dict[str, dict[str, list[float]]] = {}
    floors: dict[str, list[float]] = {}
    loaded_floors: dict[str, list[float]] = {}
    best: dict[str, float] = {}
    cpu_best: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="amps-vs-sink-") as tmp:
        Path(tmp, "no-txlog.xml").write_text(NO_TXLOG)
        for r in range(args.rounds):
            for t in targets:
                rate, cpu = _run(t, args.messages, tmp, sow_updates=t.startswith("keyed SOW updates"),
                            probe_rate=args.probe_rate if t.startswith((JOURNAL, MEMORY)) else 0,
                            latencies=all_latencies.setdefault(t, {}), baseline=args.baseline,
                            raw=args.raw,
                            floor=floors.setdefault(t, []) if args.probe_rate else None,
                            loaded_floor=loaded_floors.setdefault(t, []) if args.probe_rate else None)
                best[t] = max(best.get(t, 0.0), rate)
                cpu_best[t] = min(cpu_best.get(t, cpu), cpu)
                print(f"round {r + 1}: {t}: {rate:,.0f} msg/s, server CPU {cpu:.2f} us/msg",
                      flush=True)
    sink = best["sink"]
    who = "a raw-socket publisher (frames built beforehand)" if args.raw else "official Python client"
    print(f"\npublish ingest, {who}, {args.messages:,} x 200 B, best of "
          f"{args.rounds} interleaved rounds")
    print(f"{'target':45} {'msg/s':>10} {'vs sink':>8} {'CPU us/msg':>11}")
    for t in targets:
        print(f"{t:45} {best[t]:>10,.0f} {best[t] / sink:>7.2f}x {cpu_best[t]:>11.2f}")
    print("(CPU us/msg: the server process's user+system CPU during the timed publishes, best "
          "round; the built-in config's and --memory's include the persisted-ack probe's "
          "messages)")
    seen = {"read": "read by the probe's thread", "socket": "at the probe's socket (kernel time)"}
    for t, by_kind in all_latencies.items():
        for kind, latencies in by_kind.items():
            if not latencies:
                continue
            print(f"persisted-ack latency under the {t} load ({args.probe_rate:,} msg/s probe, "
                  f"{len(latencies):,} acks), {seen[kind]}: {_p50_p99(latencies)}")
    mb = ", ".join(f"{r / 1e6:.0f}" for r in FLOOR_RATES)
    for t, latencies in floors.items():
        if latencies:
            print(f"the disk alone at the {t} rounds' journal byte rates ({mb} MB/s; a write, "
                  f"then the group fdatasync covering it; no server): {_p50_p99(latencies)}")
    mb = ", ".join(f"{r / 1e6:.0f}" for r in LOADED_FLOOR_RATES)
    for t, latencies in loaded_floors.items():
        if latencies:
            print(f"the disk under the {t} rounds' load ({mb} MB/s; the same client publishing "
                  f"again, untimed, to a server that writes nothing): {_p50_p99(latencies)}")
    if PROBE_REALTIME:
        print("(the probe ran at real-time priority, SCHED_FIFO: its times are the server's)"
              if all(PROBE_REALTIME) else
              "(the probe could not take real-time priority: its times include its own waits "
              "for a CPU, which on a saturated machine reach tens of ms)")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"machine: {machine()}")


if __name__ == "__main__":
    main()
