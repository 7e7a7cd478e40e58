"""Faults across an HA pair under a mixed workload, with checkers (in the manner of Jepsen).

Two emulator processes replicate to each other over ``sync`` links, each link through a fault
proxy (``tests.support.faultproxy``). A seeded schedule injects, one at a time, for a while,
then heals:

* ``cut``: one link direction down (A's records stop reaching B, or B's reaching A);
* ``partition``: both directions down;
* ``blackhole``: one direction or both silently drop everything (connections stay open);
* ``delay``: both directions delayed (50-500 ms);
* ``kill``: ``kill -9`` one instance, restart it on the same data;
* ``pause``: ``SIGSTOP`` one instance, ``SIGCONT`` it later (its clients fail over meanwhile).

Two kills or pauses in three happen while one link direction is cut (cut first, so the instances
hold different messages when one goes down; healed after the restart). Never more than one
instance is down or paused. Meanwhile, through the official Python client:
two HAClient publishers with file-backed publish stores (``events``), two keyed SOW updaters
owning disjoint keys (``positions``), two HAClient bookmark subscribers that discard what they
process, a queue producer (``work``, feeding the distributed queue ``jobs``) and two queue
consumers that ack. After the run every fault is healed, the publishers flush, and the
checkers (:mod:`bench.nemesis_check`) say whether anything acked was lost, duplicated or
reordered, whether the SOWs converged, whether the queue delivered and drained, and whether
the healed pair is live.

Run::

    python bench/nemesis.py --seed 7 --seconds 300

The same seed gives the same schedule (the faults' kinds, targets and timings), so a run that
failed is replayed with its seed. Prints the history of nemesis steps as they happen, then one
JSON line (per step kind counts, messages published/acked/delivered, queue duplicates and every
checker's result); exits 1 when a checker found a violation. ``run_nemesis`` is what the short
CI test calls.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import AMPS  # noqa: E402  (after the path set-up, so the script runs from anywhere)

from bench.nemesis_check import check_all  # noqa: E402
from tests.support.faultproxy import Proxies  # noqa: E402
from tests.support.procserver import ProcServer, free_port  # noqa: E402

GROUP = "Nemesis"
EVENTS, POSITIONS, WORK, JOBS = "events", "positions", "work", "jobs"
KINDS = ("cut", "partition", "blackhole", "delay", "kill", "pause")
NAMES = ("A", "B")
KEYS_PER_UPDATER = 10


def node_xml(name: str, data: Path, client_port: int, admin_port: int, repl_port: int, peer: str,
             peer_proxy_port: int) -> str:
    return f"""<AMPSConfig>
  <Name>{name}</Name>
  <Group>{GROUP}</Group>
  <Admin><InetAddr>127.0.0.1:{admin_port}</InetAddr></Admin>
  <Transports>
    <Transport><Name>clients</Name><Type>tcp</Type><InetAddr>127.0.0.1:{client_port}</InetAddr>
      <MessageType>json</MessageType><Protocol>amps</Protocol></Transport>
    <Transport><Name>amps-replication</Name><Type>amps-replication</Type>
      <InetAddr>127.0.0.1:{repl_port}</InetAddr></Transport>
  </Transports>
  <TransactionLog><JournalDirectory>{data}/journal</JournalDirectory>
    <Topic><Name>.*</Name><MessageType>json</MessageType></Topic></TransactionLog>
  <SOW>
    <Topic><Name>{POSITIONS}</Name><MessageType>json</MessageType><Key>/id</Key>
      <FileName>{data}/sow/%n.sow</FileName></Topic>
    <Queue><Name>{JOBS}</Name><MessageType>json</MessageType><UnderlyingTopic>{WORK}</UnderlyingTopic></Queue>
  </SOW>
  <Replication><Destination>
    <Name>{peer}</Name><Group>{GROUP}</Group><SyncType>sync</SyncType><PassThrough>.*</PassThrough>
    <Topic><Name>.*</Name><MessageType>json</MessageType></Topic>
    <Transport><Type>amps-replication</Type><InetAddr>127.0.0.1:{peer_proxy_port}</InetAddr>
      <ReconnectTimeout>0.2</ReconnectTimeout></Transport>
  </Destination></Replication>
</AMPSConfig>
"""


# -- the schedule ------------------------------------------------------------------------------

@dataclass
class Step:
    kind: str
    target: str  # "A>B" / "B>A" / "A<>B" for the links, "A" / "B" for an instance
    duration: float  # seconds the fault lasts
    gap: float  # seconds of calm after it is healed
    delay: float = 0.0  # the delay of a ``delay`` step
    #: a ``kill`` or ``pause`` done while this link direction is cut (cut first, healed last)
    during_cut: str | None = None


def schedule(seed: int, steps: int = 1000, *, duration: tuple[float, float] = (1.0, 4.0),
             gap: tuple[float, float] = (1.0, 3.0)) -> list[Step]:
    """The seed's faults in order: rounds of every kind once, shuffled, so in ``n`` steps each
    kind comes ``n // 6`` times at least."""
    rnd = random.Random(seed)
    out: list[Step] = []
    while len(out) < steps:
        kinds = list(KINDS)
        rnd.shuffle(kinds)
        for kind in kinds:
            if kind == "cut":
                target = rnd.choice(["A>B", "B>A"])
            elif kind == "blackhole":
                target = rnd.choice(["A>B", "B>A", "A<>B"])
            elif kind in ("partition", "delay"):
                target = "A<>B"
            else:
                target = rnd.choice(NAMES)
            during = rnd.choice([None, "A>B", "B>A"]) if kind in ("kill", "pause") else None
            out.append(Step(kind, target, round(rnd.uniform(*duration), 2), round(rnd.uniform(*gap), 2),
                            round(rnd.uniform(0.05, 0.5), 3) if kind == "delay" else 0.0, during))
    return out[:steps]


# -- the pair, its proxies and its processes -----------------------------------------------------

class Cluster:
    def __init__(self, work: Path) -> None:
        self.proxies = Proxies()
        repl = {n: free_port() for n in NAMES}
        # "A>B": what A's Destination connects to (B's replication port): A's records to B
        self.proxies.add("A>B", repl["B"])
        self.proxies.add("B>A", repl["A"])
        self.procs: dict[str, ProcServer] = {}
        self.admin_ports: dict[str, int] = {}
        self.paused: set[str] = set()
        for name in NAMES:
            peer = "B" if name == "A" else "A"
            d = work / name
            d.mkdir(parents=True, exist_ok=True)
            client_port, admin_port = free_port(), free_port()
            cfg = d / "amps.xml"
            cfg.write_text(node_xml(name, d / "data", client_port, admin_port, repl[name], peer,
                                    self.proxies.links[f"{name}>{peer}"].port))
            proc = ProcServer(d / "data", cfg)
            proc.port = client_port
            self.procs[name] = proc
            self.admin_ports[name] = admin_port

    def start(self) -> None:
        for p in self.procs.values():
            p.start()

    def uri(self, name: str) -> str:
        return self.procs[name].uri

    def admin(self, name: str, path: str) -> Any:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_ports[name]}{path}", timeout=5) as r:
            return json.loads(r.read())

    def links(self, target: str) -> list[str]:
        return ["A>B", "B>A"] if target == "A<>B" else [target]

    def kill(self, name: str) -> None:
        self.procs[name].kill()

    def restart(self, name: str) -> None:
        self.procs[name].start(timeout=60)

    def pause(self, name: str) -> None:
        proc = self.procs[name].proc
        if proc is not None:
            os.kill(proc.pid, signal.SIGSTOP)
            self.paused.add(name)

    def resume(self, name: str) -> None:
        proc = self.procs[name].proc
        if proc is not None and name in self.paused:
            os.kill(proc.pid, signal.SIGCONT)
        self.paused.discard(name)

    def close(self) -> None:
        for name in list(self.paused):
            self.resume(name)
        for p in self.procs.values():
            p.stop()
        self.proxies.close()


# -- the workload ------------------------------------------------------------------------------

def ha_client(name: str, uris: list[str]) -> AMPS.HAClient:
    c = AMPS.HAClient(name)
    chooser = AMPS.DefaultServerChooser()
    for u in uris:
        chooser.add(u)
    c.set_server_chooser(chooser)
    c.set_heartbeat(1)  # a paused instance is left within seconds
    return c


class Producer:
    """An HAClient with a file-backed publish store, publishing ``body(i)`` to ``topic`` at
    ``rate`` a second on its own thread."""

    def __init__(self, name: str, uris: list[str], topic: str, rate: float, work: Path, body) -> None:
        self.name, self.topic, self.rate, self.body = name, topic, rate, body
        self.client = ha_client(name, uris)
        self.store = AMPS.PublishStore(str(work / f"{name}.store"))
        self.client.set_publish_store(self.store)
        self.published = 0
        self.unacked = 0
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self.client.connect_and_logon()
        self.thread.start()

    def _run(self) -> None:
        started = time.monotonic()
        i = 0
        while not self.stop.is_set():
            try:
                self.client.publish(self.topic, self.body(i))
            except AMPS.DisconnectedException:
                pass  # in the store: the HAClient sends it again once reconnected
            except AMPS.AMPSException as exc:
                self.errors.append(f"{self.name} publish {i}: {exc!r}")
                return
            i += 1
            self.published = i
            ahead = i / self.rate - (time.monotonic() - started)
            if ahead > 0:
                self.stop.wait(ahead)  # the rate, not a wait for anything

    def finish(self, timeout: float) -> None:
        """Stop publishing and wait for every message to be acked (``unacked``: those not)."""
        self.stop.set()
        self.thread.join()
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.client.publish_flush(int(max(1.0, deadline - time.monotonic()) * 1000))
                break
            except AMPS.AMPSException:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.1)
        self.unacked = self.store.get_unpersisted_count()

    @property
    def acked(self) -> int:
        return self.published - self.unacked


class Consumer:
    """An HAClient on a bookmark subscription (discarding each message in its store) or on a
    queue (acking each), recording what it got in order."""

    def __init__(self, name: str, uris: list[str], topic: str, key: str, queue: bool) -> None:
        self.name, self.topic, self.key, self.queue = name, topic, key, queue
        self.client = ha_client(name, uris)
        self.store = AMPS.MemoryBookmarkStore()
        if not queue:
            self.client.set_bookmark_store(self.store)
        self.got: list[tuple[str, int]] = []
        self.cv = threading.Condition()

    def start(self) -> None:
        self.client.connect_and_logon()
        if self.queue:
            self.client.subscribe(self._on, self.topic, sub_id=self.name)
        else:
            self.client.bookmark_subscribe(self._on, self.topic, AMPS.Client.Bookmarks.EPOCH,
                                           sub_id=self.name)

    def _on(self, m: AMPS.Message) -> None:
        doc = json.loads(m.get_data())
        with self.cv:
            self.got.append((doc.get(self.key, ""), doc["i"]))
            self.cv.notify_all()
        if self.queue:
            m.ack()
        else:
            self.store.discard_message(m)

    def wait_for(self, pred, timeout: float) -> bool:
        with self.cv:
            return self.cv.wait_for(lambda: pred(self.got), timeout)


class Workload:
    def __init__(self, cluster: Cluster, work: Path, rate: float) -> None:
        a, b = cluster.uri("A"), cluster.uri("B")
        self.expected: dict[str, dict[int, int]] = {"u1": {}, "u2": {}}
        self.publishers = [
            Producer("p1", [a, b], EVENTS, rate, work, lambda i: json.dumps({"p": "p1", "i": i})),
            Producer("p2", [b, a], EVENTS, rate, work, lambda i: json.dumps({"p": "p2", "i": i})),
        ]
        self.updaters = [self._updater("u1", [a, b], 0, rate / 2, work),
                         self._updater("u2", [b, a], KEYS_PER_UPDATER, rate / 2, work)]
        self.queue_producer = Producer("qp", [a, b], WORK, rate / 2, work,
                                       lambda i: json.dumps({"q": "qp", "i": i}))
        self.subscribers = [Consumer("s1", [b, a], EVENTS, "p", False),
                            Consumer("s2", [a, b], EVENTS, "p", False)]
        self.consumers = [Consumer("c1", [a, b], JOBS, "q", True), Consumer("c2", [b, a], JOBS, "q", True)]

    def _updater(self, name: str, uris: list[str], first_key: int, rate: float, work: Path) -> Producer:
        rnd = random.Random(name)
        expected = self.expected[name]

        def body(i: int) -> str:
            key = first_key + rnd.randrange(KEYS_PER_UPDATER)
            expected[key] = i  # the last update of the key is its final value
            return json.dumps({"id": key, "u": name, "i": i})

        return Producer(name, uris, POSITIONS, rate, work, body)

    @property
    def producers(self) -> list[Producer]:
        return [*self.publishers, *self.updaters, self.queue_producer]

    def start(self) -> None:
        for c in [*self.subscribers, *self.consumers]:
            c.start()
        for p in self.producers:
            p.start()

    def close(self) -> None:
        for c in [*self.producers, *self.subscribers, *self.consumers]:
            try:
                c.client.close()
            except AMPS.AMPSException:
                pass


# -- the run -----------------------------------------------------------------------------------

@dataclass
class Report:
    seed: int
    seconds: float = 0.0
    steps: Counter = field(default_factory=Counter)
    history: list[str] = field(default_factory=list)
    published: dict[str, int] = field(default_factory=dict)
    acked: dict[str, int] = field(default_factory=dict)
    delivered: dict[str, int] = field(default_factory=dict)
    queue_duplicates: int = 0
    checks: dict[str, list[str]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors and not any(self.checks.values())

    def summary(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("history")
        out["steps"] = dict(self.steps)
        out["checks"] = {k: (v or "ok") for k, v in self.checks.items()}
        out["ok"] = self.ok
        return out


class Nemesis:
    """Runs the schedule's steps against the cluster, one at a time, and records each."""

    def __init__(self, cluster: Cluster, report: Report, t0: float, stop: threading.Event,
                 echo: bool) -> None:
        self.cluster, self.report, self.t0, self.stop, self.echo = cluster, report, t0, stop, echo

    def note(self, text: str) -> None:
        line = f"{time.monotonic() - self.t0:8.2f}s  {text}"
        self.report.history.append(line)
        if self.echo:
            print(line, flush=True)

    def run(self, step: Step) -> None:
        c = self.cluster
        self.report.steps[step.kind] += 1
        if step.kind in ("kill", "pause"):
            assert not c.paused, "one instance down at a time"
            if step.during_cut is not None:  # the instances diverge first, then one goes down
                self.note(f"cut {step.during_cut}")
                c.proxies.set(step.during_cut, "cut")
                self.stop.wait(step.duration / 2)
            if step.kind == "kill":
                self.note(f"kill -9 {step.target}")
                c.kill(step.target)
            else:
                self.note(f"SIGSTOP {step.target}")
                c.pause(step.target)
            self.stop.wait(step.duration)
            if step.kind == "kill":
                c.restart(step.target)
                self.note(f"restarted {step.target}")
            else:
                c.resume(step.target)
                self.note(f"SIGCONT {step.target}")
            if step.during_cut is not None:
                c.proxies.heal()
                self.note(f"heal {step.during_cut}")
        else:
            mode = "cut" if step.kind == "partition" else step.kind
            extra = f" {step.delay * 1000:.0f}ms" if step.kind == "delay" else ""
            self.note(f"{step.kind} {step.target}{extra}")
            for link in c.links(step.target):
                c.proxies.set(link, mode, step.delay)
            self.stop.wait(step.duration)
            c.proxies.heal()
            self.note(f"heal {step.target}")
        self.stop.wait(step.gap)


def run_nemesis(work: Path, seconds: float, seed: int, *, rate: float = 40.0,
                duration: tuple[float, float] = (1.0, 4.0), gap: tuple[float, float] = (1.0, 3.0),
                min_each: int = 0, echo: bool = True) -> Report:
    """Faults for ``seconds`` (and until every kind ran ``min_each`` times), then the checks."""
    report = Report(seed)
    cluster = Cluster(work)
    workload: Workload | None = None
    t0 = time.monotonic()
    stop = threading.Event()
    nemesis = Nemesis(cluster, report, t0, stop, echo)
    try:
        cluster.start()
        workload = Workload(cluster, work, rate)
        workload.start()
        nemesis.note(f"seed {seed}: workload started")
        for step in schedule(seed, duration=duration, gap=gap):
            enough = min((report.steps[k] for k in KINDS), default=0) >= min_each
            if time.monotonic() - t0 >= seconds and enough:
                break
            nemesis.run(step)
        cluster.proxies.heal()
        nemesis.note("healed; flushing the producers")
        for p in workload.producers:
            p.finish(120.0)
            report.errors += p.errors
            report.published[p.name] = p.published
            report.acked[p.name] = p.acked
        nemesis.note("flushed; checking")
        check_all(cluster, workload, report)
        nemesis.note("checked: " + ("ok" if report.ok else "VIOLATIONS"))
    finally:
        stop.set()
        report.seconds = round(time.monotonic() - t0, 1)
        if workload is not None:
            workload.close()
        cluster.close()
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=300.0)
    ap.add_argument("--rate", type=float, default=40.0, help="messages a second per publisher")
    ap.add_argument("--min-each", type=int, default=5, help="run until every kind of fault ran this often")
    ap.add_argument("--work", type=Path, default=None,
                    help="keep the instances' files and logs here (default: a temporary directory)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="nemesis-") as tmp:
        work = args.work if args.work is not None else Path(tmp)
        report = run_nemesis(work, args.seconds, args.seed, rate=args.rate, min_each=args.min_each)
    for name, problems in report.checks.items():
        for p in problems:
            print(f"VIOLATION {name}: {p}")
    print(json.dumps(report.summary()))
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
