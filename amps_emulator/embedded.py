"""An emulator running inside the caller's process, on an event loop of its own thread.

For test frameworks (the pytest plugin, this repository's tests) and anything else that
embeds the server::

    from amps_emulator.config import default_config
    from amps_emulator.embedded import EmbeddedServer

    with EmbeddedServer(default_config(), memory=True) as srv:
        ...  # connect any AMPS client to srv.uri
        srv.reset()  # empty again: a fresh server on the same port

The official AMPS client is synchronous and reads on a thread of its own, so the server
gets its own loop (uvloop where available) on a daemon thread; nothing process-wide (event
loop policy, signal handlers, logging) is touched. Every transport is bound by this object
to ``host`` port 0 before the server starts, and those listening sockets stay open for the
object's lifetime: the server adopts duplicates of them, so :meth:`reset` (stop the server,
start a new one) never gives the port away and the URI never changes. ``start`` returns
once the server accepts connections (it waits on an event, never on a sleep).
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable
from typing import Any

from amps_emulator.server.app import Server
from amps_emulator.server.ops.admin import AdminLimits, start_admin


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A uvloop loop where uvloop is installed, else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class EmbeddedServer:
    """``EmbeddedServer(config, memory=False, clock=None, host="127.0.0.1", **server_kwargs)``.

    ``memory``: the ``--memory`` mode (no files at all; :meth:`reset` then yields an empty
    server). ``clock``: the monotonic clock given to the server (tests inject one).
    ``server_kwargs``: more :class:`Server` arguments (``timebase``, ``admin``).
    ``hold_ports``: keep the listening sockets for :meth:`reset` (default). Without it the
    server owns them outright, so closing a transport (the administrator's ``disable``)
    really stops it listening, and :meth:`reset` is not available.
    ``admin_limits``: the Admin interface's ``AdminLimits`` (what a request may cost; tests
    shorten its deadline).
    """

    def __init__(self, config: Any, *, memory: bool = False,
                 clock: Callable[[], float] | None = None, host: str = "127.0.0.1",
                 hold_ports: bool = True, admin_limits: AdminLimits | None = None,
                 **server_kwargs: Any) -> None:
        self.config = config
        self.admin_limits = admin_limits
        self.memory = memory
        self.clock = clock
        self.host = host
        self.server_kwargs = server_kwargs
        self.hold_ports = hold_ports
        self.server: Server | None = None
        self.uris: list[str] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self._sockets: list[socket.socket] = []
        self._ready = threading.Event()
        self._stopped = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="amps-emulator", daemon=True)
        self._stop: asyncio.Event | None = None

    @property
    def uri(self) -> str:
        """The first transport's URI, e.g. ``tcp://127.0.0.1:40123/amps/json``."""
        return self.uris[0]

    @property
    def port(self) -> int:
        assert self.server is not None, "server not started"
        return self.server.listeners[0].port

    # -- lifecycle ---------------------------------------------------------------------
    def start(self, timeout: float = 10.0) -> EmbeddedServer:
        for t in self.config.transports:
            if t.file_name is not None:  # amps-unix: the server binds its socket file
                continue
            s = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET,
                              socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((self.host, 0))
            s.listen(128)
            self._sockets.append(s)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError("server did not start")
        if self._error is not None:
            self._close_sockets()
            raise self._error
        return self

    def stop(self, timeout: float = 10.0) -> None:
        if self.loop is not None and self._stop is not None and not self._stopped.is_set():
            self.loop.call_soon_threadsafe(self._stop.set)
        if self._thread.ident is not None:  # started at all
            self._stopped.wait(timeout)
        self._close_sockets()

    def reset(self, timeout: float = 10.0) -> None:
        """Stop the server (its clients are disconnected) and start a new one on the same
        listening sockets. In ``memory`` mode the new server is empty."""
        if not self.hold_ports:
            raise RuntimeError("reset() needs hold_ports=True")
        self._on_loop(self._restart(), timeout)

    def call(self, fn: Callable[[], Any], timeout: float = 10.0) -> Any:
        """Run ``fn`` on the server's loop and return its result (for inspecting state)."""

        async def _call() -> Any:
            return fn()

        return self._on_loop(_call(), timeout)

    def __enter__(self) -> EmbeddedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the server's thread -------------------------------------------------------------
    def _run(self) -> None:
        loop = new_event_loop()
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

    async def _serve(self) -> None:
        kwargs = dict(self.server_kwargs)
        if self.clock is not None:
            kwargs.setdefault("clock", self.clock)  # (a clock in server_kwargs wins)
        self.server = Server(self.config, memory=self.memory, **kwargs)
        self.server.on_shutdown_request = self._shutdown_requested  # an action's do-shutdown
        if self.hold_ports:
            socks = [s.dup() for s in self._sockets]
        else:  # handed over: the server closes them
            socks, self._sockets = self._sockets, []
        self.uris = await self.server.start(sockets=socks)
        try:
            await start_admin(self.server, self.admin_limits)  # when the config or
            # server_kwargs name one
        except BaseException:
            await self.server.stop()
            raise

    async def _restart(self) -> None:
        assert self.server is not None
        await self.server.stop()
        await self._serve()

    def _shutdown_requested(self) -> None:
        if self._stop is not None:
            self._stop.set()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        await self._serve()
        self._ready.set()
        await self._stop.wait()
        assert self.server is not None
        await self.server.stop()

    def _on_loop(self, coro: Any, timeout: float) -> Any:
        assert self.loop is not None, "server not started"
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def _close_sockets(self) -> None:
        for s in self._sockets:
            s.close()
        self._sockets.clear()
