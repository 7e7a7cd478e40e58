"""The cost of a SOW topic's Enrichment per message, beside the same topic without it, in
the same run: what ``server.messaging.message_path.publish_message`` does for a keyed
publish (decode, enrich, key, store, the per-turn commit), in process, with a stand-in broker
(no network, no transaction log, no subscriber).

Each round publishes ``--messages`` updates (every key already stored, so ``OF PREVIOUS``
finds a record) on a transient topic keyed on ``/id``, once per rule set, the rule sets
interleaved so that drift of the machine falls on all of them:

* ``none``: no Preprocessing, no Enrichment (the baseline, one publish at a time);
* ``runs``: no rule, stored as a run of plain publishes (what an enriched topic gives up);
* ``enrich``: ``/qty * /px AS /notional``;
* ``previous``: that, plus a default read ``OF PREVIOUS`` and a counter of updates;
* ``pre+enrich``: a preprocessed field too (``UPPER(/sym) AS /sym``).

Prints CPU microseconds per message (best of ``--rounds``), and each one's ratio to ``none``;
``--type nvfix`` measures an nvfix topic instead (bodies with the same fields).

    python bench/bench_enrichment.py [--messages 50000] [--batch 340] [--rounds 5] [--type json]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from amps_emulator.protocol.bodies import Bodies, decode_json_run  # noqa: E402
from amps_emulator.protocol.msgtypes import build_registry  # noqa: E402
from amps_emulator.protocol.topics import qualify  # noqa: E402
from amps_emulator.server.messaging.message_path import publish_message, publish_plain  # noqa: E402
from amps_emulator.sow import Sow, TopicSpec  # noqa: E402
from bench._support import BODY, load_average, machine  # noqa: E402

NOTIONAL = "/qty * /px AS /notional"
RULES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "none": ((), ()),
    "runs": ((), ()),
    "enrich": ((), (NOTIONAL,)),
    "previous": ((), (NOTIONAL, "COALESCE(/status OF CURRENT, /status OF PREVIOUS, 'new') AS /status",
                      "COALESCE(/updates OF PREVIOUS, 0) + 1 AS /updates")),
    "pre+enrich": (("UPPER(/sym) AS /sym",), (NOTIONAL,)),
}


class _Router:
    def match(self, topic: str) -> tuple:
        return ()


class _Turn:
    def request(self) -> None:
        pass


class _Host:
    """What ``publish_message`` reads of the broker, and nothing more: no transaction log (the
    journal's cost is not the enrichment's), no subscriber, no observer."""

    instance_name = group_name = "bench"

    def __init__(self, sow: Sow) -> None:
        self.sow_service = sow
        self.bodies = Bodies(sow.message_types)
        self.txlog = None
        self.router = _Router()
        self.observers: tuple = ()
        self.turn = _Turn()
        self.stats = {"published": 0}

    def wallclock(self) -> float:
        return time.time()


def _bodies(n: int, message_type: str) -> list[bytes]:
    if message_type == "json":
        return [(BODY % i).encode() for i in range(n)]
    note = "x" * 141
    return [f"id={i}\x01sym=ibm\x01qty=100\x01px=123.45\x01note={note}\x01".encode()
            for i in range(n)]


def run(rules: str, bodies: list[bytes], batch: int, message_type: str) -> float:
    """CPU microseconds per message of updating every record once more."""
    pre, post = RULES[rules]
    name = qualify("ingest", message_type)
    spec = TopicSpec(name, message_type=message_type, keys=("/id",), durability="transient",
                     preprocessing=pre, enrichment=post)
    sow = Sow([spec], default_dir=".", sync=False, message_types=build_registry())
    topic = sow.get(name)
    assert topic is not None
    broker = _Host(sow)
    n = len(bodies)
    for _phase in ("insert", "update"):
        t0 = time.process_time()
        for j in range(0, n, batch):
            part = bodies[j:j + batch]
            if rules == "runs":  # as PublishRuns._publish, then publish_plain
                docs = decode_json_run(part) if message_type == "json" else [
                    broker.bodies.decode(b, name) for b in part]
                publish_plain(broker, name, True, "", part, None, topic, topic.keyed(docs))
            else:
                for b in part:
                    publish_message(broker, name, b)  # the stand-in: duck-typed
            sow.commit()
        spent = time.process_time() - t0
    assert topic.count() == n, "every key stored once"
    if post:
        rec = topic.get(topic.key_for(topic.decode_body(bodies[0])))
        assert rec is not None and "notional" in (rec.doc or {}), "the rule ran"
    sow.close()
    return spent / n * 1e6  # (the update phase: the last one)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--batch", type=int, default=340, help="messages per turn (one commit)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--type", default="json", choices=("json", "nvfix"))
    args = ap.parse_args()
    bodies = _bodies(args.messages, args.type)
    best = dict.fromkeys(RULES, float("inf"))
    for _ in range(args.rounds):
        for rules in RULES:
            best[rules] = min(best[rules], run(rules, bodies, args.batch, args.type))
    base = best["none"]
    print(f"{args.type} topic keyed on /id, {args.messages:,} updates, best of {args.rounds} rounds:")
    for rules, us in best.items():
        print(f"  {rules:11s} {us:6.2f} us/msg ({1e6 / us:>9,.0f}/s)  x{us / base:4.2f} of none",
              flush=True)
    print(f"load average: {load_average()}")
    print(f"machine: {machine()}")


if __name__ == "__main__":
    main()
