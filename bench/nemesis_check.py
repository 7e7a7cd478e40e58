"""The checkers of ``bench/nemesis.py``, run once every fault is healed and every producer has
flushed (waiting a bounded time for what must arrive):

* ``journal``: every acked message of every producer is in the transaction log of every
  instance exactly once, each producer's in the order it published them (read back by a
  bookmark replay from EPOCH, which does not drop duplicates);
* ``subscribers``: each bookmark subscriber saw every acked message of each publisher once,
  in order, across its failovers: no gap, no duplicate;
* ``sow``: the SOW topics of both instances hold the same records, each equal to the last
  update of its key;
* ``queue``: every acked queue message was delivered (at least once: duplicates are counted,
  a redelivery after a failover is allowed) and no instance still holds any;
* ``liveness``: a publish on either instance reaches a subscriber on the other within seconds.

Each checker adds its findings to ``report.checks[name]`` (empty: it held).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

import AMPS

if TYPE_CHECKING:
    from bench.nemesis import Cluster, Report, Workload

NAMES = ("A", "B")


def plain_client(uri: str, name: str) -> AMPS.Client:
    c = AMPS.Client(f"{name}-{time.monotonic_ns()}")
    c.connect(uri)
    c.logon(5000)
    return c


def replay(uri: str, topic: str, key: str, want: int, timeout: float) -> list[tuple[str, int]]:
    """(producer, i) of every message of ``topic`` in one instance's log, once ``want`` are there
    (or the timeout passed), and whatever more arrives within a second after (a duplicate)."""
    got: list[tuple[str, int]] = []
    cv = threading.Condition()

    def on(m: AMPS.Message) -> None:
        doc = json.loads(m.get_data())
        with cv:
            got.append((doc.get(key, ""), doc["i"]))
            cv.notify_all()

    c = plain_client(uri, "nemesis-check")
    try:
        c.bookmark_subscribe(on, topic, AMPS.Client.Bookmarks.EPOCH)
        with cv:
            cv.wait_for(lambda: len(got) >= want, timeout)
            cv.wait_for(lambda: len(got) > want, 1.0)
            return list(got)
    finally:
        c.close()


def sequence_problems(where: str, ids: list[int], acked: int, published: int) -> list[str]:
    """What is wrong with one producer's messages as ``where`` holds them: every acked one
    (``i < acked``) once, nothing beyond what was published, in order."""
    out = []
    counts = Counter(ids)
    missing = [i for i in range(acked) if counts[i] == 0]
    dups = sorted(i for i, n in counts.items() if n > 1)
    extra = sorted(i for i in counts if i >= published)
    if missing:
        out.append(f"{where}: {len(missing)} acked missing (first {missing[:8]})")
    if dups:
        out.append(f"{where}: {len(dups)} duplicated (first {dups[:8]})")
    if extra:
        out.append(f"{where}: {len(extra)} never published (first {extra[:8]})")
    order = [i for i in ids]
    if order != sorted(order):
        bad = next(k for k in range(1, len(order)) if order[k] < order[k - 1])
        out.append(f"{where}: out of order at {bad}: {order[max(0, bad - 3):bad + 2]}")
    return out


def check_journals(cluster: Cluster, workload: Workload, report: Report) -> list[str]:
    out: list[str] = []
    groups = {"events": ("p", workload.publishers), "positions": ("u", workload.updaters),
              "work": ("q", [workload.queue_producer])}
    for topic, (key, producers) in groups.items():
        want = sum(p.acked for p in producers)
        for name in NAMES:
            got = replay(cluster.uri(name), topic, key, want, 60.0)
            for p in producers:
                ids = [i for who, i in got if who == p.name]
                out += sequence_problems(f"{name} log of {topic}/{p.name}", ids, p.acked, p.published)
    return out


def check_subscribers(workload: Workload, report: Report) -> list[str]:
    out: list[str] = []
    pubs = workload.publishers
    for s in workload.subscribers:
        def complete(got: list[tuple[str, int]]) -> bool:
            have = Counter(who for who, _ in got)
            return all(have[p.name] >= p.acked for p in pubs)
        s.wait_for(complete, 60.0)
        with s.cv:
            got = list(s.got)
        report.delivered[s.name] = len(got)
        for p in pubs:
            out += sequence_problems(f"subscriber {s.name}/{p.name}", [i for who, i in got if who == p.name],
                                     p.acked, p.published)
    return out


def sow_of(uri: str) -> dict[int, tuple[str, int]]:
    c = plain_client(uri, "nemesis-sow")
    try:
        out = {}
        for m in c.sow("positions"):
            if m.get_command() == "sow":
                doc = json.loads(m.get_data())
                out[doc["id"]] = (doc["u"], doc["i"])
        return out
    finally:
        c.close()


def check_sow(cluster: Cluster, workload: Workload) -> list[str]:
    want = {k: (u, i) for u, keys in workload.expected.items() for k, i in keys.items()}
    unacked = {p.name for p in workload.updaters if p.unacked}
    out: list[str] = []
    deadline = time.monotonic() + 30.0
    while True:
        sows = {name: sow_of(cluster.uri(name)) for name in NAMES}
        if (sows["A"] == sows["B"] == want) or time.monotonic() > deadline:
            break
        time.sleep(0.5)  # replication converging: polled with a deadline
    if sows["A"] != sows["B"]:
        diff = sorted(k for k in set(sows["A"]) | set(sows["B"]) if sows["A"].get(k) != sows["B"].get(k))
        out.append(f"the SOWs differ on {len(diff)} keys: " +
                   ", ".join(f"{k}: A {sows['A'].get(k)} B {sows['B'].get(k)}" for k in diff[:5]))
    for name, sow in sows.items():
        wrong = sorted(k for k in want if sow.get(k) != want[k] and want[k][0] not in unacked)
        if wrong:
            out.append(f"{name} SOW: {len(wrong)} keys not at their last update: " +
                       ", ".join(f"{k}: {sow.get(k)} want {want[k]}" for k in wrong[:5]))
    return out


def queue_depth(cluster: Cluster, name: str) -> Any:
    try:
        out = cluster.admin(name, "/amps/instance/queues.json")
    except OSError as exc:
        return f"admin unreachable: {exc}"
    nodes = out["amps"]["instance"]["queues"] if "amps" in out else out["queues"]
    node = next((n for n in nodes if n["topic"] == "jobs"), None)
    return None if node is None else node.get("queue_depth")


def check_queue(cluster: Cluster, workload: Workload, report: Report) -> list[str]:
    qp = workload.queue_producer
    consumers = workload.consumers

    def delivered() -> list[int]:
        out = []
        for c in consumers:
            with c.cv:
                out += [i for _, i in c.got]
        return out

    deadline = time.monotonic() + 60.0
    while set(range(qp.acked)) - set(delivered()) and time.monotonic() < deadline:
        time.sleep(0.2)  # the consumers receive on their own threads: polled with a deadline
    got = delivered()
    for c in consumers:
        report.delivered[c.name] = len(c.got)
    counts = Counter(got)
    report.queue_duplicates = sum(n - 1 for n in counts.values() if n > 1)
    out = []
    missing = [i for i in range(qp.acked) if not counts[i]]
    if missing:
        out.append(f"{len(missing)} acked queue messages never delivered (first {missing[:8]})")
    deadline = time.monotonic() + 30.0
    while True:
        depths = {name: queue_depth(cluster, name) for name in NAMES}
        if all(d in ("0", 0) for d in depths.values()) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    for name, d in depths.items():
        if d not in ("0", 0):
            out.append(f"{name} still holds queue messages: queue_depth {d}")
    return out


def check_liveness(cluster: Cluster) -> list[str]:
    out = []
    for src, dst in (("A", "B"), ("B", "A")):
        got = threading.Event()
        sub = plain_client(cluster.uri(dst), "nemesis-live-sub")
        pub = plain_client(cluster.uri(src), "nemesis-live-pub")
        try:
            sub.subscribe(lambda m, got=got: got.set(), "liveness")
            t = time.monotonic()
            pub.publish("liveness", json.dumps({"from": src}))
            if not got.wait(10.0):
                out.append(f"a publish on {src} did not reach a subscriber on {dst} in 10 s")
            elif time.monotonic() - t > 5.0:
                out.append(f"a publish on {src} took {time.monotonic() - t:.1f}s to reach {dst}")
        finally:
            sub.close()
            pub.close()
    return out


def check_all(cluster: Cluster, workload: Workload, report: Report) -> None:
    steps = [("subscribers", lambda: check_subscribers(workload, report)),
             ("journal", lambda: check_journals(cluster, workload, report)),
             ("sow", lambda: check_sow(cluster, workload)),
             ("queue", lambda: check_queue(cluster, workload, report)),
             ("liveness", lambda: check_liveness(cluster))]
    for name, check in steps:
        try:
            report.checks[name] = check()
        except Exception as exc:  # a checker that cannot run is a finding, not a crash
            report.checks[name] = [f"could not check: {exc!r}"]
