"""Publish ingest: the official client publishing 200-byte JSON messages to a topic with no
subscribers. Prints messages/s (publish of the first message to the flush ack of the last)
twice: with a config that has no transaction log (pure pub/sub), and with the built-in
default config, whose transaction log records every topic (each message is journalled and
group-fsynced), and that config again with ``--memory`` (journalled in memory, no files).
Target: at least 150,000 messages/s."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._support import BODY, ServerProcess, machine, timed_publish, warm_publisher  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=300_000)
    args = ap.parse_args()
    assert len(BODY % 1) == 200, len(BODY % 1)
    import tempfile

    no_txlog = tempfile.NamedTemporaryFile("w", suffix=".xml", delete=False)
    no_txlog.write("<AMPSConfig><Name>bench</Name><Transports><Transport><Name>json-tcp</Name>"
                   "<Type>tcp</Type><InetAddr>127.0.0.1:9007</InetAddr><MessageType>json"
                   "</MessageType><Protocol>amps</Protocol></Transport></Transports></AMPSConfig>")
    no_txlog.close()
    for label, cfg, extra in (("no transaction log", no_txlog.name, []),
                              ("default config, every topic journalled", None, []),
                              ("default config, --memory", None, ["--memory"])):
        with ServerProcess(cfg, extra) as srv:
            c = warm_publisher(srv.uri)
            n = args.messages
            dt = timed_publish(c, n)
            c.close()
        print(f"publish ingest ({label}): {n / dt:,.0f} messages/s ({n:,} x 200 B, "
              f"no subscribers, official client, {dt:.2f} s)")
    os.unlink(no_txlog.name)
    print(f"machine: {machine()}")


if __name__ == "__main__":
    main()
