"""Bad input on a replication link that has passed its handshake (a peer that logged on, then
is hostile or buggy): a malformed or out-of-range ``repl_ack`` ends that link as malformed
input, with one log line naming the peer, and changes nothing the sender or the sync gate
counted; a compressed link's frames count in the server's memory budget at their inflated
size, like plain ones. Raw sockets play the peer; the server keeps serving throughout."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import struct

import pytest

from amps_emulator.config import loads_config
from amps_emulator.pair import free_port
from amps_emulator.protocol.codec import frame, split_frame
from amps_emulator.replication.batch import PlainRun, decode_parts
from amps_emulator.replication.compression import Deflater, switch_frame
from amps_emulator.replication.wire import Hello
from tests.support.clients import logged_on
from tests.support.replication_nodes import Dest, node_xml
from tests.support.servers import ServerThread, until

from .test_replication_auth import MiB, budgeted_links, closed_by_server, logged_on_link, sow_of

#: every validation check a Destination can switch off: the raw peer's hello states no topics
NO_CHECKS = "txlog,replicate,sow,keys,cascade,replicate_filter"


def next_frame(s: socket.socket) -> tuple[dict, bytes]:
    size = struct.unpack(">I", s.recv(4, socket.MSG_WAITALL))[0]
    return split_frame(s.recv(size, socket.MSG_WAITALL))


def lines_naming(caplog, s: socket.socket) -> list[str]:
    """The warnings and errors logged about the connection of raw socket ``s``."""
    peer = str(s.getsockname())  # (the server names a peer by its address)
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and peer in r.getMessage()]


@pytest.mark.parametrize("fields", [{}, {"pos": "x"}, {"pos": 1.5}, {"pos": -1}, {"pos": 2}, {"pos": 10**12}],
                         ids=["no-pos", "string", "float", "negative", "beyond-sent", "far-beyond"])
def test_a_malformed_ack_ends_the_link_with_one_line_and_changes_nothing(tmp_path, caplog, fields):
    """B replicates to X over the connection X makes (a passive sync Destination): X acks
    what it got wrongly; B drops that link, says so once, counts nothing of it (the sync gate
    stays where it was), takes X's next link and serves its clients meanwhile."""
    port = free_port()
    srv = ServerThread(loads_config(node_xml(
        "B", tmp_path / "B", listen=port, dests=[Dest(group="X", port=None, sync=True, exclude=NO_CHECKS)]),
        "B.xml")).start()
    client = logged_on(srv.uri, "pub")
    try:
        client.publish("orders", json.dumps({"id": 1}))
        st = srv.server.replication.state("X")
        before = srv.call(lambda: st.acked_through)
        s = logged_on_link(port)
        with s:
            h, body = next_frame(s)
            (run,) = decode_parts(body)
            assert h["c"] == "repl_batch" and isinstance(run, PlainRun) and run.last_position == 1
            s.sendall(frame({"c": "repl_ack", **fields}))
            assert closed_by_server(s), "the link went on after a malformed ack"
            lines = lines_naming(caplog, s)
        assert len(lines) == 1 and "malformed replication ack" in lines[0], lines
        assert srv.call(lambda: (st.acked_through, st.connected)) == (before, False)
        assert not [r for r in caplog.records if r.exc_info]  # no traceback: it is bad input, not a bug

        with logged_on_link(port) as s:  # the peer's next link, acked properly
            assert next_frame(s)[0]["c"] == "repl_batch"
            s.sendall(frame({"c": "repl_ack", "pos": 1}))
            assert until(lambda: srv.call(lambda: st.acked_through) == 1)
            client.publish("orders", json.dumps({"id": 2}))
            assert next_frame(s)[0]["c"] == "repl_batch"
        assert sorted(m["id"] for m in sow_of(client, "orders")) == [1, 2]
    finally:
        client.close()
        srv.stop()


def compressed_frame_start(s: socket.socket, codec: str | None, size: int, sent: int) -> None:
    """Over ``s`` (compressed with ``codec`` from now on, None: plain), the start of a frame
    of ``size`` bytes, ``sent`` of them (zeros: a few kilobytes on the wire once compressed)."""
    data = struct.pack(">I", size) + bytes(sent)
    try:
        if codec is None:
            s.sendall(data)
        else:
            s.sendall(switch_frame(codec) + Deflater(codec).compress(data))
    except OSError:  # the server already closed it: what the test wants
        pass


@pytest.mark.parametrize("codec", [None, "zlib", "zstd"])
def test_an_inflated_frame_counts_in_the_memory_budget(tmp_path, caplog, codec):
    """Frames announced on compressed links count at their inflated size, from their length
    on: links whose frames take the server past its budget are closed (one line each), the
    one within it stays open, and the server serves on."""
    srv, budget, small, large = budgeted_links(tmp_path, 3)
    try:
        compressed_frame_start(small, codec, 2 * MiB, MiB)
        assert until(lambda: srv.call(budget.held) >= 2 * MiB), "the inflated frame is not counted"
        for s in large:
            compressed_frame_start(s, codec, 8 * MiB, MiB)
            assert closed_by_server(s), "an 8 MiB frame past the budget was kept"
        for s in large:
            lines = lines_naming(caplog, s)
            assert len(lines) == 1 and lines[0].startswith("memory budget"), lines
        assert not closed_by_server(small, timeout=0.5)  # within the budget: still open
        assert srv.call(lambda: len(budget)) == 1
        client = logged_on(srv.uri, "after")
        client.publish("orders", json.dumps({"id": 3}))
        assert sow_of(client, "orders") == [{"id": 3}]
        client.close()
    finally:
        for s in [small, *large]:
            s.close()
        srv.stop()


class FakeDestination:
    """A raw asyncio server on port 0 playing the Destination an instance connects to: it
    takes each link the instance opens, answers its hello as instance ``X`` and then reads
    and writes raw frames."""

    def __init__(self) -> None:
        self.links: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        async def taken(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self.links.put((reader, writer))

        self.server = await asyncio.start_server(taken, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def next_link(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """The instance's next link, its hello answered."""
        reader, writer = await asyncio.wait_for(self.links.get(), 10)
        assert (await read_frame_async(reader))[0]["c"] == "repl_hello"
        writer.write(Hello(name="X", group="X", hw={}).encode())
        await writer.drain()
        return reader, writer


async def read_frame_async(reader: asyncio.StreamReader) -> tuple[dict, bytes]:
    size = struct.unpack(">I", await asyncio.wait_for(reader.readexactly(4), 10))[0]
    return split_frame(await asyncio.wait_for(reader.readexactly(size), 10))


async def closed_by_instance(reader: asyncio.StreamReader, timeout: float = 5.0) -> bool:
    try:
        return await asyncio.wait_for(reader.read(1), timeout) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


class PeerWire:
    """What the fake destination writes on its link: plain, or compressed with ``codec`` from
    its first write on (after the switch frame), one stream."""

    def __init__(self, writer: asyncio.StreamWriter, codec: str | None) -> None:
        self.writer = writer
        self.deflater = None if codec is None else Deflater(codec)
        self.switch = b"" if codec is None else switch_frame(codec)

    async def write(self, data: bytes) -> None:
        if self.deflater is not None:
            data, self.switch = self.switch + self.deflater.compress(data), b""
        self.writer.write(data)
        with contextlib.suppress(OSError):  # (the instance closed it: what some tests want)
            await self.writer.drain()


@pytest.mark.parametrize("codec", [None, "zlib"])
def test_what_a_destination_sends_back_counts_in_the_memory_budget(tmp_path, caplog, codec):
    """The link an instance opens to its Destination reads the peer's acks (and, in a pair,
    its records) within the server's memory budget, as an accepted link does: the peer's acks
    work; a frame it announces counts from its length on (inflated, once it compresses); one
    that takes the server past its budget closes the link with one log line, and the
    connector links again after its ReconnectTimeout."""

    async def run() -> None:
        peer = FakeDestination()
        port = await peer.start()
        srv = await asyncio.to_thread(lambda: ServerThread(loads_config(node_xml(
            "B", tmp_path / "B", listen=None, dests=[Dest(group="X", port=port, exclude=NO_CHECKS)]),
            "B.xml")).start())
        client = await asyncio.to_thread(logged_on, srv.uri, "pub")
        try:
            srv.call(lambda: setattr(srv.server, "memory_budget", 5 * MiB))
            budget, st = srv.server.budget, srv.server.replication.state("X")
            reader, writer = await peer.next_link()
            await asyncio.to_thread(client.publish, "orders", json.dumps({"id": 1}))
            h, _ = await read_frame_async(reader)
            assert h["c"] == "repl_batch"
            writer.write(frame({"c": "repl_ack", "pos": 1}))  # an ack as usual: counted
            assert await asyncio.to_thread(until, lambda: srv.call(lambda: st.acked_through) == 1)
            wire = PeerWire(writer, codec)
            big_ack = frame({"c": "repl_ack", "pos": 1}, bytes(2 * MiB))  # within the budget
            await wire.write(big_ack[:MiB])
            assert await asyncio.to_thread(until, lambda: srv.call(budget.held) >= 2 * MiB), \
                "the frame a destination sends is not counted"
            await wire.write(big_ack[MiB:])  # (read whole: the link goes on)
            assert not await closed_by_instance(reader, timeout=0.3)
            with caplog.at_level(logging.WARNING, logger="amps_emulator"):
                await wire.write(struct.pack(">I", 8 * MiB) + bytes(MiB))  # past it: closed
                assert await closed_by_instance(reader), "an 8 MiB frame past the budget was kept"
                writer.close()
                again, _ = await peer.next_link()  # linked again after its ReconnectTimeout
                assert (await read_frame_async(again))[0]["c"] == "repl_batch"  # (resent: X holds none)
                lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
            assert len(lines) == 1 and lines[0].startswith("memory budget"), lines
            assert "replication link to 'X'" in lines[0], lines
            assert srv.call(budget.held) <= 5 * MiB
        finally:
            client.close()
            await asyncio.to_thread(srv.stop)
            assert peer.server is not None
            peer.server.close()

    asyncio.run(run())


def test_what_a_bootstrap_source_sends_counts_in_the_memory_budget(tmp_path, caplog):
    """An instance filling itself from its Bootstrap source reads the source's frames within
    the server's memory budget: a frame that takes it past the budget closes the link with
    one log line (the budget's), and the bootstrap tries again after its ReconnectTimeout."""

    async def run() -> None:
        peer = FakeDestination()  # (a source answers the hello as a destination does)
        port = await peer.start()
        boot = (f"<Bootstrap><Topic><Name>.*</Name><MessageType>json</MessageType></Topic>"
                f"<DataType>sow,txlog</DataType><Transport><Type>amps-replication</Type>"
                f"<InetAddr>127.0.0.1:{port}</InetAddr><ReconnectTimeout>0.05</ReconnectTimeout>"
                f"</Transport></Bootstrap>")
        srv = await asyncio.to_thread(lambda: ServerThread(loads_config(node_xml(
            "B", tmp_path / "B", listen=free_port(), extra=boot), "B.xml")).start())
        try:
            srv.call(lambda: setattr(srv.server, "memory_budget", 5 * MiB))
            budget = srv.server.budget
            with caplog.at_level(logging.WARNING, logger="amps_emulator"):
                reader, writer = await peer.next_link()
                writer.write(struct.pack(">I", 8 * MiB) + bytes(MiB))  # past the budget
                assert await closed_by_instance(reader), "an 8 MiB frame past the budget was kept"
                writer.close()
                await peer.next_link()  # tried again after its ReconnectTimeout
                lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
            assert len(lines) == 1 and lines[0].startswith("memory budget"), lines
            assert "bootstrap from 127.0.0.1" in lines[0], lines
            assert srv.call(budget.held) <= 5 * MiB
        finally:
            await asyncio.to_thread(srv.stop)
            assert peer.server is not None
            peer.server.close()

    asyncio.run(run())
