"""A TCP proxy whose faults a test controls, for the links between emulator instances.

Each :class:`LinkProxy` listens on a port of its own and forwards every connection to one
target port (an instance's replication transport); the instance that should reach the
target is configured with the proxy's port instead. Its mode says what the network does:

* ``up``: bytes pass both ways, in order;
* ``cut``: open connections are reset and new ones closed at once (a link that is down);
* ``blackhole``: connections stay open, nothing passes either way (a switch dropping every
  packet; neither side hears of it). Healing resets the connections it held, as the TCP
  stacks would once their retransmissions gave up, and the link connects again;
* ``delay``: bytes pass both ways, each chunk ``delay`` seconds late, in order.

``bytes_up`` and ``bytes_down`` count what it forwarded to the target and back: what the link
really carried (a replication link's compression, say).

:class:`Proxies` runs any number of them on one event loop in a thread, so a test or a bench
drives them with plain calls (``proxies.set("A>B", "cut")``). No root, no network namespace.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any

MODES = ("up", "cut", "blackhole", "delay")


class LinkProxy:
    def __init__(self, name: str, target_port: int, host: str = "127.0.0.1") -> None:
        self.name = name
        self.host = host
        self.target_port = target_port
        self.port = 0
        self.mode = "up"
        self.delay = 0.0
        self._server: asyncio.Server | None = None
        #: open connections: (client side writer, target side writer or None while blackholed)
        self._conns: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter | None]] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.connections = 0  # accepted so far (what a test can wait on)
        self.bytes_up = 0  # forwarded to the target
        self.bytes_down = 0  # forwarded back from it

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accepted, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        self._reset_all()
        for task in list(self._tasks):
            task.cancel()

    def set_mode(self, mode: str, delay: float = 0.0) -> None:
        if mode not in MODES:
            raise ValueError(f"mode is one of {MODES}, not {mode!r}")
        before = self.mode
        self.mode, self.delay = mode, (delay if mode == "delay" else 0.0)
        if mode == "cut" or (before == "blackhole" and mode != "blackhole"):
            self._reset_all()

    def _reset_all(self) -> None:
        for client, target in list(self._conns):
            for w in (client, target):
                if w is not None:
                    with contextlib.suppress(Exception):
                        w.transport.abort()
        self._conns.clear()

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        if self.mode == "cut":
            writer.transport.abort()
            return
        if self.mode == "blackhole":  # held open, answering nothing, until healed
            entry: tuple[asyncio.StreamWriter, asyncio.StreamWriter | None] = (writer, None)
            self._conns.add(entry)
            with contextlib.suppress(Exception):
                while await reader.read(65536):
                    pass
            self._conns.discard(entry)
            writer.transport.abort()
            return
        try:
            t_reader, t_writer = await asyncio.open_connection(self.host, self.target_port)
        except OSError:
            writer.transport.abort()
            return
        pair = (writer, t_writer)
        self._conns.add(pair)
        done = asyncio.Event()
        for up, src, dst in ((True, reader, t_writer), (False, t_reader, writer)):
            task = asyncio.get_running_loop().create_task(self._pump(src, dst, pair, done, up))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        await done.wait()
        self._conns.discard(pair)
        for w in pair:
            w.transport.abort()

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter,
                    pair: tuple[asyncio.StreamWriter, asyncio.StreamWriter | None],
                    done: asyncio.Event, up: bool) -> None:
        """Copy one direction; in order, each chunk held back by the delay in force when it
        was read; nothing passes while blackholed."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def writer() -> None:
            while True:
                due, data = await queue.get()
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                if self.mode == "blackhole" or pair not in self._conns:
                    continue
                dst.write(data)
                if up:
                    self.bytes_up += len(data)
                else:
                    self.bytes_down += len(data)
                await dst.drain()

        out = loop.create_task(writer())
        try:
            while True:
                data = await src.read(65536)
                if not data:
                    break
                if self.mode == "blackhole":
                    continue
                queue.put_nowait((loop.time() + self.delay, data))
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            out.cancel()
            done.set()


class Proxies:
    """Link proxies on one event loop in a daemon thread; every call is made from outside."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.links: dict[str, LinkProxy] = {}
        self._thread = threading.Thread(target=self.loop.run_forever, name="fault-proxies", daemon=True)
        self._thread.start()

    def _call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    def add(self, name: str, target_port: int) -> LinkProxy:
        """A proxy named ``name`` to ``target_port``, listening on ``.port`` once this returns."""
        link = self.links[name] = LinkProxy(name, target_port)
        self._call(link.start())
        return link

    def set(self, name: str, mode: str, delay: float = 0.0) -> None:
        async def apply() -> None:
            self.links[name].set_mode(mode, delay)
        self._call(apply())

    def heal(self) -> None:
        for name in self.links:
            self.set(name, "up")

    def close(self) -> None:
        async def close_all() -> None:
            for link in self.links.values():
                await link.close()
        with contextlib.suppress(Exception):
            self._call(close_all())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)


__all__ = ["MODES", "LinkProxy", "Proxies"]
