"""Stopping the replication service while a connection to its transport is being accepted:
no link task outlives ``stop()`` (one left pending is what asyncio reports as "Task was
destroyed but it is pending" when the loop closes, and it could even run a link after the
stop), and the connection is closed by the server.

The order the loop runs things in is driven by hand (an ``asyncio.Event``), never by time:
a handler whose first step comes only after ``stop()`` has begun is the case that matters,
since an accepted connection's handler task is created at the accept but runs later."""

from __future__ import annotations

import asyncio

import pytest

from amps_emulator.config import loads_config
from amps_emulator.server.app import Server
from amps_emulator.server.services import replication_accept
from tests.support.replication_nodes import node_xml


async def started(tmp_path) -> Server:
    srv = Server(loads_config(node_xml("B", tmp_path / "B", listen=0), "B.xml"))
    await srv.start()
    return srv


async def closed_by_server(reader: asyncio.StreamReader) -> bool:
    """Whether the server has closed the connection (bounded: a live one never answers a
    connection that has sent nothing)."""
    try:
        return await asyncio.wait_for(reader.read(1), 10) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


async def test_a_link_accepted_before_stop_that_runs_after_it_began_ends_with_it(tmp_path, monkeypatch):
    """A connection is accepted (its handler task exists) but its handler has not got past
    its first step when ``stop()`` begins: the handler is cancelled and awaited by the stop,
    not left pending, and the socket is closed."""
    entered, go = asyncio.Event(), asyncio.Event()
    handlers: list[asyncio.Task] = []
    real_accept = replication_accept.accept

    async def held_accept(service, link, writer) -> None:
        """The link's handler, held at its start until ``go``."""
        task = asyncio.current_task()
        assert task is not None
        handlers.append(task)
        entered.set()
        await go.wait()
        await real_accept(service, link, writer)

    monkeypatch.setattr(replication_accept, "accept", held_accept)
    srv = await started(tmp_path)
    repl = srv.replication
    assert repl is not None and repl.listen_port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", repl.listen_port)
    try:
        await asyncio.wait_for(entered.wait(), 10)  # accepted, its handler held
        stopping = asyncio.get_running_loop().create_task(repl.stop())
        go.set()  # the handler's next step is queued after stop()'s first
        await stopping
        pending = [t for t in handlers if not t.done()]
        assert not pending, "a replication link's handler outlived stop()"
        assert await closed_by_server(reader), "the accepted connection stayed open"
    finally:
        writer.close()
        await srv.stop()


async def test_a_connection_made_once_stop_began_is_closed_and_starts_no_task(tmp_path):
    """What the transport's handler does with a connection made after ``stop()`` began
    (one accepted as the listener closed): it closes it at once, and the service starts no
    task for it (nor any other)."""
    srv = await started(tmp_path)
    repl = srv.replication
    assert repl is not None
    await repl.stop()
    server_side, client_side = await pair()
    reader, writer = client_side
    try:
        replication_accept.serve(repl, *server_side)
        assert await closed_by_server(reader), "a connection made while stopping stayed open"

        async def never() -> None:
            pytest.fail("a task of the service ran after its stop")

        assert repl.spawn(never()) is None
    finally:
        writer.close()
        await srv.stop()


async def pair() -> tuple[tuple[asyncio.StreamReader, asyncio.StreamWriter],
                          tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """Two ends of a local TCP connection as streams (server side, client side)."""
    accepted: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = \
        asyncio.get_running_loop().create_future()

    def made(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.set_result((reader, writer))

    listener = await asyncio.start_server(made, "127.0.0.1", 0)
    try:
        client = await asyncio.open_connection("127.0.0.1", listener.sockets[0].getsockname()[1])
        return await accepted, client
    finally:
        listener.close()


async def test_a_listener_bound_as_the_service_stops_is_closed(tmp_path, monkeypatch):
    """The service stops while its listener is being bound (``stop()`` over before the bind
    is): the listener, once bound, is closed and never serves."""
    from amps_emulator.server.services import replication as service_module

    bound, go = asyncio.Event(), asyncio.Event()
    servers: list[asyncio.AbstractServer] = []
    real_listen = service_module.listen

    async def held_listen(service, listener, tls):
        server = await real_listen(service, listener, tls)
        servers.append(server)
        bound.set()
        await go.wait()
        return server

    monkeypatch.setattr(service_module, "listen", held_listen)
    srv = Server(loads_config(node_xml("B", tmp_path / "B", listen=0), "B.xml"))
    starting = asyncio.get_running_loop().create_task(srv.start())
    try:
        await asyncio.wait_for(bound.wait(), 10)
        repl = srv.replication
        assert repl is not None
        await repl.stop()  # (nothing of the listener known to it yet)
        go.set()
        await starting
        assert servers and not servers[0].is_serving(), "the listener serves after the stop"
        assert all(s.fileno() < 0 for s in servers[0].sockets), "the bound listener stayed open"
    finally:
        go.set()
        await srv.stop()
