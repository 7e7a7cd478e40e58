"""``python -m amps_emulator.probe [HOST:PORT]``: exit 0 when the server there accepts a logon.

The container's health check. It speaks the protocol itself (our own codec: a ``logon``
command, then waits for its ``processed`` ack with ``status`` ``success``), so it needs no
AMPS client and checks more than an open port: the server reads, dispatches and answers.

The address defaults to ``AMPS_EMULATOR_LISTEN`` (the container sets ``0.0.0.0:9007``; a
wildcard host is probed on loopback), else ``127.0.0.1:9007``. Exit status 1 and one line on
standard error when there is no answer within ``--timeout`` seconds or the logon fails.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from collections.abc import Sequence

from amps_emulator.config.values import parse_inet_addr
from amps_emulator.protocol.codec import FrameDecoder, frame, split_frame

_WILDCARDS = {"", "0.0.0.0", "::", "*"}


def probe_address(listen: str) -> tuple[str, int]:
    host, port = parse_inet_addr(listen)
    return ("127.0.0.1" if host is None or host in _WILDCARDS else host), port


def logon(host: str, port: int, timeout: float = 3.0) -> str | None:
    """None when the server acknowledged a logon, else what went wrong."""
    deadline = time.monotonic() + timeout
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(frame({"c": "logon", "cid": "probe", "client_name": f"health-probe-{os.getpid()}",
                             "a": "processed", "version": "amps-emulator-probe"}))
            decoder = FrameDecoder()
            while True:
                s.settimeout(max(deadline - time.monotonic(), 0.01))
                data = s.recv(65536)
                if not data:
                    return "connection closed before the logon ack"
                for payload in decoder.feed(data):
                    header, _ = split_frame(payload)
                    if header.get("c") == "ack" and header.get("cid") == "probe":
                        status = header.get("status")
                        return None if status == "success" else f"logon {status}: {header.get('reason')}"
    except OSError as exc:
        return str(exc) or exc.__class__.__name__


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m amps_emulator.probe",
                                description="exit 0 when an AMPS logon succeeds")
    p.add_argument("address", nargs="?",
                   default=os.environ.get("AMPS_EMULATOR_LISTEN") or "127.0.0.1:9007",
                   help="HOST:PORT (default: $AMPS_EMULATOR_LISTEN, else 127.0.0.1:9007)")
    p.add_argument("--timeout", type=float, default=3.0)
    args = p.parse_args(argv)
    host, port = probe_address(args.address)
    problem = logon(host, port, args.timeout)
    if problem is not None:
        print(f"amps-emulator probe {host}:{port}: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
