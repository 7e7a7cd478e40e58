"""Run a real emulator server on port 0 in a background thread, for tests and benches.

The official AMPS client is synchronous and runs its own receive thread, so the server gets
an event loop of its own in a daemon thread. ``ServerThread.start()`` returns once the server
accepts connections (it waits on an event the server sets, never on a sleep).
"""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Any, Callable

from amps_emulator.server.app import Server


def _loop_factory() -> asyncio.AbstractEventLoop:
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:
        return asyncio.new_event_loop()


class ServerThread:
    def __init__(self, config: Any, *, clock: Callable[[], float] | None = None,
                 **server_kwargs: Any) -> None:
        """``server_kwargs``: more :class:`Server` arguments (``timebase``, ``admin``)."""
        self.config = config
        self.clock = clock
        self.server_kwargs = server_kwargs
        self.server: Server | None = None
        self.uris: list[str] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._stopped = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="amps-emulator", daemon=True)
        self._stop: asyncio.Event | None = None

    @property
    def uri(self) -> str:
        return self.uris[0]

    @property
    def port(self) -> int:
        return self.server.listeners[0].port  # type: ignore[union-attr]

    def start(self, timeout: float = 10.0) -> "ServerThread":
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError("server did not start")
        if self._error is not None:
            raise RuntimeError("server failed to start") from self._error
        return self

    def _run(self) -> None:
        loop = _loop_factory()
        self.loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._main())
        except BaseException as exc:  # surfaced to start()
            self._error = exc
            self._ready.set()
        finally:
            loop.close()
            self._stopped.set()

    async def _main(self) -> None:
        kwargs = {"clock": self.clock} if self.clock is not None else {}
        kwargs.update(self.server_kwargs)
        self.server = Server(self.config, **kwargs)
        socks = []
        for t in self.config.transports:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        self.uris = await self.server.start(sockets=socks)
        self._stop = asyncio.Event()
        self._ready.set()
        await self._stop.wait()
        await self.server.stop()

    @property
    def admin_uri(self) -> str:
        return self.server.admin.uri  # type: ignore[union-attr]

    def http(self, path: str, method: str = "GET", expect: int = 200) -> Any:
        """One request to the admin interface: the decoded JSON body (text for other types)."""
        import json
        import urllib.error
        import urllib.request

        req = urllib.request.Request(self.admin_uri + path, method=method,
                                     data=b"" if method == "POST" else None)
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                status, ctype, body = r.status, r.headers.get("content-type", ""), r.read()
        except urllib.error.HTTPError as exc:
            status, ctype, body = exc.code, exc.headers.get("content-type", ""), exc.read()
        assert status == expect, (path, status, body[:500])
        return json.loads(body) if ctype.startswith("application/json") else body.decode()

    def call(self, fn: Callable[[], Any], timeout: float = 10.0) -> Any:
        """Run ``fn`` on the server's loop and return its result (for inspecting state)."""
        assert self.loop is not None

        async def _call() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(_call(), self.loop).result(timeout)

    def stop(self, timeout: float = 10.0) -> None:
        if self.loop is not None and self._stop is not None and not self._stopped.is_set():
            self.loop.call_soon_threadsafe(self._stop.set)
        self._stopped.wait(timeout)
