"""Logical SOW topics of a ``Pattern`` container: how fast new topic names are taken in, and
start-up with many of them.

    python bench/bench_pattern_topics.py                # 5,000 logical topics
    python bench/bench_pattern_topics.py --topics 20000

One persistent container (``Pattern`` ``^/px/``, key ``/id``, recorded by the transaction
log). The official client publishes one message to each of ``--topics`` new topic names,
then one more to each existing name; each phase is timed to a ``flush`` round trip (so
every publish was processed). Then the server is restarted on the same data and the time to
reopen is printed with a check that a ``^/px/`` query returns every logical topic.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import AMPS  # noqa: E402

from amps_emulator.config import loads_config  # noqa: E402
from bench._support import machine  # noqa: E402
from tests.support.servers import ServerThread, config_xml  # noqa: E402


def start_server(xml: str) -> ServerThread:
    return ServerThread(loads_config(xml)).start(timeout=600)

SOW = """<SOW><Topic><Name>Prices</Name><Pattern>^/px/</Pattern><MessageType>json</MessageType>
  <Key>/id</Key><FileName>{d}/sow/%n.sow</FileName></Topic></SOW>"""


def publish_all(uri: str, n: int, value: int) -> float:
    c = AMPS.Client(f"bench-{value}")
    c.connect(uri)
    c.logon(5000)
    t0 = time.perf_counter()
    for i in range(n):
        c.publish(f"/px/{i}", json.dumps({"id": 1, "v": value}))
    c.flush(600_000)
    dt = time.perf_counter() - t0
    c.close()
    return dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--topics", type=int, default=5000)
    n = ap.parse_args().topics
    with tempfile.TemporaryDirectory() as d:
        xml = config_xml(d, txlog_topics=("Prices",), extra=SOW.format(d=d))
        srv = start_server(xml)
        new = publish_all(srv.uri, n, 1)
        print(f"  publish to a new topic name : {n / new:10,.0f} topics/s", flush=True)
        again = publish_all(srv.uri, n, 2)
        srv.stop()
        t0 = time.perf_counter()
        srv = start_server(xml)
        reopen = time.perf_counter() - t0
        c = AMPS.Client("bench-q")
        c.connect(srv.uri)
        c.logon(5000)
        got = sum(1 for m in c.sow("^/px/", batch_size=1000, timeout=600_000) if m.get_command() == "sow")
        c.close()
        srv.stop()
    print(f"logical topics: {n}")
    print(f"  publish to an existing one  : {n / again:10,.0f} messages/s")
    print(f"  restart (reopen {got} topics): {reopen:8.2f} s")
    assert got == n, f"query returned {got} of {n} logical topics"
    print(machine())


if __name__ == "__main__":
    main()
