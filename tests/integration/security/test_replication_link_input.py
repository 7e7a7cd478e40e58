"""Bad input on a replication link that has passed its handshake (a peer that logged on, then
is hostile or buggy): a malformed or out-of-range ``repl_ack`` ends that link as malformed
input, with one log line naming the peer, and changes nothing the sender or the sync gate
counted; a compressed link's frames count in the server's memory budget at their inflated
size, like plain ones. Raw sockets play the peer; the server keeps serving throughout."""

from __future__ import annotations

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
from tests.support.clients import logged_on
from tests.support.replication_nodes import Dest, node_xml
from tests.support.servers import ServerThread, until

from .test_replication_auth import MiB, closed_by_server, logged_on_link, node, sow_of, start

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
    port = free_port()
    srv = start(node("B", tmp_path / "B", port, secured=False), "B")
    srv.call(lambda: setattr(srv.server, "memory_budget", 5 * MiB))
    budget = srv.server.budget
    small = logged_on_link(port)
    large = [logged_on_link(port) for _ in range(3)]
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
