"""The SOW half of a keyed publish, in process: what ``server.publish.publish_message`` does
for a message to a SOW topic keyed on ``/id`` (decode, key, store, the per-turn commit),
without the journal (a stand-in gives positions and times), the network and the protocol;
and what a run of plain publishes does
(``server.publish_run``: each body's document and SowKey, then ``publish.publish_plain``).

A stand-in broker carries what the message path reads (no subscriber, no listener), and a
turn of ``--batch`` messages ends with the SOW commit, as the server's end-of-turn stage
does. Inserts (new keys) then updates (the same keys again), on a persistent topic
(LMDB, ``sync=False`` as when the transaction log covers it) and on a transient one.
Prints CPU microseconds per message (this process's user + system time), best of
``--rounds``.

    python bench/bench_sow_upsert.py [--messages 200000] [--batch 340] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from amps_emulator.protocol.bodies import Bodies, decode_json_run  # noqa: E402
from amps_emulator.protocol.msgtypes import build_registry  # noqa: E402
from amps_emulator.server.messaging.message_path import publish_message, publish_plain  # noqa: E402
from amps_emulator.sow import Sow, TopicSpec  # noqa: E402
from bench._support import BODY, load_average, machine  # noqa: E402


class _Router:
    def match(self, topic: str) -> tuple:
        return ()


class _Turn:
    def request(self) -> None:
        pass


class _Rec:
    """A journal record as the message path reads it (``journal.JournalRecord``)."""

    __slots__ = ("position", "timestamp", "publisher_id", "sequence")

    def __init__(self, position: int, timestamp: int) -> None:
        self.position = position
        self.timestamp = timestamp
        self.publisher_id = 1234567890
        self.sequence = position

    @property
    def bookmark_str(self) -> str:
        return f"{self.publisher_id}|{self.sequence}|"


class _TxLog:
    """A transaction log that records every topic and writes nothing (the journal's cost is
    not the SOW's): positions and times, as ``TxLog.append``/``append_publishes`` give."""

    def __init__(self) -> None:
        self.position = 0

    def recorded(self, topic: str) -> bool:
        return True

    def append(self, topic: str, body: bytes, kind: int, **_: object) -> _Rec:
        self.position += 1
        return _Rec(self.position, time.time_ns() // 1000)

    def append_publishes(self, topic: str, client_name: str, bodies: list[bytes],
                         seqs: list[int] | None) -> list[_Rec]:
        now = time.time_ns() // 1000
        start = self.position
        self.position += len(bodies)
        return [_Rec(start + i + 1, now) for i in range(len(bodies))]


class _SowService:
    """The SOW as the message path sees it (``server.core.ports.SowService``): the store,
    never refusing a write."""

    def __init__(self, sow: Sow) -> None:
        self.sow = sow

    def get(self, name: str, create: bool = True) -> object:
        return self.sow.get(name)

    def topics_for(self, topic: str, literal: bool = False) -> list:
        found = self.sow.get(topic)
        return [] if found is None else [found]

    def refusing(self, topic: str) -> bool:
        return False


class _Broker:
    """What ``publish_message`` reads of the broker, and nothing more."""

    instance_name = "bench"
    group_name = "bench"

    def __init__(self, sow: Sow) -> None:
        self.sow_service = _SowService(sow)
        self.observers: tuple = ()
        self.bodies = Bodies(build_registry())
        self.txlog = _TxLog()
        self.router = _Router()
        self.listeners: tuple = ()
        self.turn = _Turn()
        self.stats = {"published": 0, "delivered": 0}
        self.topics_in: dict[str, int] = {}
        self.topics_out: dict[str, int] = {}
        self.delivered = None

    def wallclock(self) -> float:
        return time.time()


def run(durability: str, n: int, batch: int, tmp: str, runs: bool = False
        ) -> tuple[float, float]:
    spec = TopicSpec("ingest", keys=("/id",), durability=durability)
    sow = Sow([spec], default_dir=os.path.join(tmp, "sow"), sync=False)
    topic = sow.get("ingest")
    assert topic is not None
    broker = _Broker(sow)
    bodies = [(BODY % i).encode() for i in range(n)]
    out = []
    for _phase in ("insert", "update"):
        t0 = time.process_time()
        for j in range(0, n, batch):
            if runs:  # as PublishRuns._publish, then publish_plain
                part = bodies[j:j + batch]
                keyed = topic.keyed(decode_json_run(part))
                publish_plain(broker, "ingest", True, "", part, None, topic, keyed)
            else:
                for b in bodies[j:j + batch]:
                    publish_message(broker, "ingest", b)  # the stand-in: duck-typed
            sow.commit()
        out.append((time.process_time() - t0) / n * 1e6)
    assert topic.count() == n, "every key stored once"
    sow.close()
    return out[0], out[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=340, help="messages per turn (one commit)")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    for durability in ("persistent", "transient"):
        for runs in (False, True):
            best_i = best_u = float("inf")
            for _ in range(args.rounds):
                with tempfile.TemporaryDirectory(prefix="bench-sow-upsert-") as tmp:
                    i, u = run(durability, args.messages, args.batch, tmp, runs)
                best_i, best_u = min(best_i, i), min(best_u, u)
            how = "runs" if runs else "one by one"
            print(f"keyed SOW {durability:10s} {how:10s}: inserts {best_i:6.2f} us/msg "
                  f"({1e6 / best_i:>9,.0f}/s), updates {best_u:6.2f} us/msg "
                  f"({1e6 / best_u:>9,.0f}/s)", flush=True)
    print(f"load average: {load_average()}")
    print(f"machine: {machine()}")


if __name__ == "__main__":
    main()
