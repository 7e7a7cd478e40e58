"""Does the Admin interface slow the message path? Publish ingest (the official client,
200-byte JSON messages, 50 clients' worth of SOW state around it) measured with nobody
polling the admin port, then with a poller fetching ``/amps.json`` (the whole monitoring
tree, what 60East's Prometheus exporter scrapes) 10 and 100 times a second. Rounds alternate
so drift on the machine hits every variant alike. Prints messages/s per variant and the
admin requests served."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._support import ServerProcess, machine, timed_publish, warm_publisher  # noqa: E402

CONFIG = """<AMPSConfig><Name>bench</Name>
<Transports><Transport><Name>json-tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
<MessageType>json</MessageType><Protocol>amps</Protocol></Transport></Transports>
<SOW><Topic><Name>state</Name><MessageType>json</MessageType><Key>/id</Key>
<Durability>transient</Durability></Topic></SOW></AMPSConfig>"""


class Poller(threading.Thread):
    def __init__(self, url: str, per_second: float) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.period = 1.0 / per_second
        self.stop = threading.Event()
        self.requests = 0
        self.seconds = 0.0

    def run(self) -> None:
        while not self.stop.is_set():
            t0 = time.perf_counter()
            with urllib.request.urlopen(self.url, timeout=10) as r:
                r.read()
            dt = time.perf_counter() - t0
            self.requests += 1
            self.seconds += dt
            self.stop.wait(max(0.0, self.period - dt))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    import AMPS

    cfg = tempfile.NamedTemporaryFile("w", suffix=".xml", delete=False)
    cfg.write(CONFIG)
    cfg.close()
    results: dict[str, list[float]] = {"no admin polling": [], "/amps.json 10/s": [],
                                       "/amps.json 100/s": []}
    served: dict[str, list[float]] = {k: [] for k in results}
    with ServerProcess(cfg.name, ["--admin", "127.0.0.1:0"]) as srv:
        admin = srv.proc.stdout.readline().split()[1]  # type: ignore[union-attr]
        idle = []
        for i in range(50):  # some clients and SOW state for the tree to walk
            c = AMPS.Client(f"idle-{i}")
            c.connect(srv.uri)
            c.logon(5000)
            c.subscribe("nobody-publishes-here")
            c.publish("state", '{"id":%d}' % i)
            idle.append(c)
        c = warm_publisher(srv.uri, warmup=5000)
        for _ in range(args.rounds):
            for label, rate in (("no admin polling", 0), ("/amps.json 10/s", 10),
                                ("/amps.json 100/s", 100)):
                poller = Poller(admin + "/amps.json", rate) if rate else None
                if poller:
                    poller.start()
                n = args.messages
                dt = timed_publish(c, n)
                if poller:
                    poller.stop.set()
                    poller.join()
                    served[label].append(poller.requests / dt)
                    served[label].append(-poller.seconds / max(poller.requests, 1))
                results[label].append(n / dt)
        for x in idle + [c]:
            x.close()
    os.unlink(cfg.name)
    for label, rates in results.items():
        extra = ""
        if served[label]:
            req = [v for v in served[label] if v > 0]
            lat = [-v for v in served[label] if v < 0]
            extra = (f"; {statistics.mean(req):.0f} admin requests/s served, "
                     f"{statistics.mean(lat) * 1000:.1f} ms each")
        print(f"publish ingest, {label}: median {statistics.median(rates):,.0f} messages/s "
              f"(rounds: {', '.join(f'{r:,.0f}' for r in rates)}){extra}")
    print(f"machine: {machine()}")


if __name__ == "__main__":
    main()
