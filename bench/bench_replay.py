"""Replay from EPOCH to one subscriber, and server start-up on the resulting journal.

Fills the transaction log with N 200-byte messages (raw publisher), then a raw subscriber
places a bookmark subscription from EPOCH and counts deliveries until the completed ack.
Then the server is restarted on the same journal and the time to its ready line is taken.
Prints replay messages/s, the restart (recovery) time, and the machine.
Targets: replay at least 300,000 messages/s; recovery of one million records under 5 s."""

from __future__ import annotations

import argparse
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._support import ServerProcess, frame, machine  # noqa: E402


def fill(port: int, n: int) -> None:
    body = b'{"id":%08d,"sym":"IBM","qty":100,"px":123.45,"note":"' + b"x" * 141 + b'"}'
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(frame({"c": "logon", "cid": "l", "client_name": "filler", "a": "processed"}))
    batch = 2000
    for start in range(0, n - 1, batch):
        s.sendall(b"".join(frame({"c": "p", "t": "replayed"}, body % i)
                           for i in range(start, min(n - 1, start + batch))))
    # The last message asks for a persisted ack, so the whole log is on disk before the replay.
    s.sendall(frame({"c": "p", "t": "replayed", "a": "persisted", "s": 1}, body % (n - 1)))
    buf = b""
    while b'"a":"persisted"' not in buf:
        buf = (buf + s.recv(1 << 16))[-4096:]
    s.close()


def replay(port: int, n: int) -> float:
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(frame({"c": "logon", "cid": "l", "client_name": "replayer", "a": "processed"}))
    t0 = time.perf_counter()
    s.sendall(frame({"c": "subscribe", "cid": "r", "sub_id": "r", "t": "replayed", "bookmark": "0",
                     "a": "processed,completed"}))
    got = 0
    buf = bytearray()
    pos = 0
    completed = False
    while not completed:
        chunk = s.recv(1 << 20)
        if not chunk:
            break
        buf += chunk
        end = len(buf)
        while end - pos >= 4:
            size = int.from_bytes(buf[pos:pos + 4], "big")
            if end - pos - 4 < size:
                break
            if buf[pos + 4:pos + 13] == b'{"c":"p",':
                got += 1
            elif b'"completed"' in buf[pos + 4:pos + 4 + size]:
                completed = True
            pos += 4 + size
        del buf[:pos]
        pos = 0
    dt = time.perf_counter() - t0
    s.close()
    assert got == n, f"replayed {got} of {n}"
    return dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=1_000_000)
    args = ap.parse_args()
    n = args.messages
    with ServerProcess() as srv:
        fill(srv.port, n)
        dt = replay(srv.port, n)
        startup = srv.kill_and_restart()
    print(f"replay from EPOCH: {n / dt:,.0f} messages/s to one subscriber ({n:,} x 200 B, {dt:.2f} s)")
    print(f"restart after SIGKILL on a {n:,}-record journal: {startup:.2f} s to the ready line "
          f"(includes interpreter start-up)")
    print(f"machine: {machine()}")


if __name__ == "__main__":
    main()
