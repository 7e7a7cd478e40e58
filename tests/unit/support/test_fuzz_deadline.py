"""The fuzzer itself ends on time: a peer that never stops talking (a session subscribed to
``.*`` beside a steady flow) and never reads (a slow consumer's socket) once kept its workers
draining or sending for minutes past their run."""

from __future__ import annotations

import socket
import threading
import time

from tests.support.fuzz import GRACE, Fuzzer


class _Chatterbox:
    """A TCP peer that floods every connection with bytes and reads nothing."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        self.sock.settimeout(0.1)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            threading.Thread(target=self._flood, args=(conn,), daemon=True).start()

    def _flood(self, conn: socket.socket) -> None:
        with conn:
            while not self.stop.is_set():
                try:
                    conn.sendall(b"\0\0\0\x02{}" * 64)
                except OSError:
                    return
                self.stop.wait(0.001)

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


def test_a_run_ends_within_its_grace_however_the_peer_behaves():
    peer = _Chatterbox()
    try:
        t0 = time.monotonic()
        stats = Fuzzer(peer.port, seed=11).run(1.5, workers=3)
        took = time.monotonic() - t0
    finally:
        peer.close()
    assert stats.connections > 0
    assert took < 1.5 + GRACE + 0.5, f"the fuzz run took {took:.1f} s"
