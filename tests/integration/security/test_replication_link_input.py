"""Bad input on a replication link that has passed its handshake (a peer that logged on, then
is hostile or buggy): a malformed or out-of-range ``repl_ack`` ends that link as malformed
input, with one log line naming the peer, and changes nothing the sender or the sync gate
counted. Raw sockets play the peer; the server keeps serving throughout."""

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
from tests.support.clients import logged_on
from tests.support.replication_nodes import Dest, node_xml
from tests.support.servers import ServerThread, until

from .test_replication_auth import closed_by_server, logged_on_link, sow_of

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
