"""Publishes per second to a SOW topic that feeds a View, and to one that feeds an
aggregated subscription, beside the same topic with neither, in the same run.

The server runs in its own process (this checkout, and with ``--baseline PATH`` also the
checkout at PATH, e.g. ``/work/main``, for a before/after in one run). Three transient SOW
topics keyed on ``/id``; each round the official client publishes ``--records`` messages
(ids ``0..records-1``, spread over ``--groups`` values of ``/g``) to one of them and flushes
(so every publish was processed, views included), then again (every publish an update):

* ``plain``: no view, no subscriber (the baseline);
* ``view``: the underlying topic of a View grouped by ``/g`` with COUNT, SUM, AVG, MIN,
  MAX, STDDEV_POP and a non-aggregated field;
* ``aggsub``: a ``sow_and_subscribe`` with the same grouping and projection on it (the
  subscriber reads what it is sent on its own thread).

Prints publishes/s of the update pass (best of ``--rounds``) and each one's share of
``plain``; the view is checked to hold ``--groups`` records with the right counts.

    python bench/bench_views.py [--records 100000] [--groups 10] [--rounds 2] [--baseline /work/main]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import AMPS  # noqa: E402

from bench._support import ServerProcess, load_average, machine  # noqa: E402

PROJECTION = ["/g", "/sym", "COUNT(/id) AS /n", "SUM(/qty) AS /qty", "AVG(/px) AS /avg_px",
              "MIN(/px) AS /min_px", "MAX(/px) AS /max_px", "STDDEV_POP(/px) AS /sd_px"]

CONFIG = """<AMPSConfig><Name>bench-views</Name>
<Transports><Transport><Name>t</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
  <MessageType>json</MessageType><Protocol>amps</Protocol></Transport></Transports>
<SOW>{topics}
  <View><Name>per_g</Name><MessageType>json</MessageType><UnderlyingTopic>view</UnderlyingTopic>
    <Projection>{fields}</Projection><Grouping><Field>/g</Field></Grouping></View>
</SOW></AMPSConfig>"""

TOPIC = ("<Topic><Name>{}</Name><MessageType>json</MessageType><Key>/id</Key>"
         "<Durability>transient</Durability></Topic>")


def write_config(d: str) -> str:
    path = os.path.join(d, "views.xml")
    with open(path, "w") as f:
        f.write(CONFIG.format(topics="".join(TOPIC.format(t) for t in ("plain", "view", "aggsub")),
                              fields="".join(f"<Field>{p}</Field>" for p in PROJECTION)))
    return path


def bodies(n: int, groups: int, pass_no: int) -> list[str]:
    return [json.dumps({"id": i, "g": f"g{i % groups}", "sym": "IBM", "qty": i % 97 + pass_no,
                        "px": 100 + (i * 7919 % 1000) / 8}) for i in range(n)]


def publish_pass(client: AMPS.Client, topic: str, msgs: list[str]) -> float:
    t0 = time.perf_counter()
    for m in msgs:
        client.publish(topic, m)
    client.flush(600_000)
    return len(msgs) / (time.perf_counter() - t0)


class AggSubscriber:
    """A ``sow_and_subscribe`` aggregated over ``/g``, read on its own thread."""

    def __init__(self, uri: str) -> None:
        self.client = AMPS.Client("bench-aggsub")
        self.client.connect(uri)
        self.client.logon(5000)
        self.got = 0
        opts = f"grouping=[/g],projection=[{','.join(PROJECTION)}]"
        self.stream = self.client.execute(AMPS.Command("sow_and_subscribe").set_topic("aggsub")
                                          .set_options(opts))
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for _ in self.stream:
                self.got += 1
        except AMPS.AMPSException:
            pass

    def close(self) -> None:
        self.client.close()


def measure(root: Path | None, records: int, groups: int, rounds: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d:
        srv = ServerProcess(write_config(d), root=root)
        try:
            pub = AMPS.Client("bench-pub")
            pub.connect(srv.uri)
            pub.logon(5000)
            sub = AggSubscriber(srv.uri)
            best = {"plain": 0.0, "view": 0.0, "aggsub": 0.0}
            for r in range(rounds):
                for topic in best:
                    publish_pass(pub, topic, bodies(records, groups, 2 * r))  # inserts
                    rate = publish_pass(pub, topic, bodies(records, groups, 2 * r + 1))
                    best[topic] = max(best[topic], rate)
            view = [json.loads(m.get_data()) for m in pub.sow("per_g", timeout=600_000)
                    if m.get_command() == "sow"]
            assert len(view) == groups and sum(v["n"] for v in view) == records, view
            sub.close()
            pub.close()
        finally:
            srv.stop()
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--groups", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--baseline", type=Path, help="another checkout to measure the same way")
    args = ap.parse_args()
    sides = [("this checkout", None)]
    if args.baseline is not None:
        sides.insert(0, (f"baseline {args.baseline}", args.baseline))
    print(f"{args.records:,} records over {args.groups} groups, update pass, best of "
          f"{args.rounds} rounds:")
    for label, root in sides:
        best = measure(root, args.records, args.groups, args.rounds)
        print(f"  {label}:")
        for topic, rate in best.items():
            print(f"    {topic:7s} {rate:>9,.0f} publishes/s  x{rate / best['plain']:5.3f} of plain",
                  flush=True)
    print(f"load average: {load_average()}")
    print(f"machine: {machine()}")


if __name__ == "__main__":
    main()
