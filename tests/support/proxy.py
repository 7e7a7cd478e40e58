"""A TCP proxy that counts the bytes it forwards each way: what a link really puts on the wire
(for a replication link's compression, say)."""

from __future__ import annotations

import socket
import threading


class CountingProxy:
    """Listens on ``127.0.0.1`` (``port``) and forwards every connection to ``target``;
    ``upstream`` counts the bytes clients sent to the target, ``downstream`` the bytes back."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.upstream = 0
        self.downstream = 0
        self._lock = threading.Lock()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self._open: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="counting-proxy").start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:
                if self._closed:
                    client.close()
                    server.close()
                    return
                self._open += [client, server]
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, up: bool) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
                with self._lock:
                    if up:
                        self.upstream += len(data)
                    else:
                        self.downstream += len(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        with self._lock:
            self._closed = True
            sockets, self._open = self._open, []
        self._sock.close()
        for s in sockets:
            s.close()
