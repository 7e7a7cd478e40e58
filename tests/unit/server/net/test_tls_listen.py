"""The TLS listener's accept (:mod:`amps_emulator.server.net.tls_listen`): a socket's place
under the cap is given back once whichever way its handshake ends, closing included."""

from __future__ import annotations

import asyncio
import socket
import ssl

import pytest

from amps_emulator.server.net.admission import ConnectionCap
from amps_emulator.server.net.tls_listen import TLSServer, bind_tcp
from tests.support.tls import self_signed


@pytest.fixture
def tls(tmp_path) -> ssl.SSLContext:
    cert, key = self_signed(tmp_path)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    return ctx


async def test_a_handshake_dropped_by_close_before_it_ran_gives_its_place_and_socket_back(tls):
    # close() in the same turn as the accept: the handshake's task is cancelled before its
    # first step, so nothing in it runs
    cap = ConnectionCap("t", 4)
    srv = TLSServer(asyncio.get_running_loop(), await bind_tcp("127.0.0.1", 0),
                    lambda ticket: asyncio.Protocol(), tls, 5.0, cap)
    srv.start()
    listening = srv.sockets[0]
    with socket.create_connection(listening.getsockname()[:2], timeout=5) as peer:
        srv._accept(listening)  # (what the loop calls when the listening socket is readable)
        assert cap.open == 1
        srv.close()
        await srv.wait_closed()
        assert cap.open == 0
        peer.settimeout(5)
        try:
            assert peer.recv(1) == b""  # the server's end is closed, not left open
        except ConnectionResetError:
            pass


async def test_the_listening_address_is_looked_up_off_the_event_loop(monkeypatch):
    """A transport enabled at run time names a host: its DNS query must not hold the loop
    (and every client on it) as a blocking ``getaddrinfo`` would."""
    import threading

    looked_up_in = []
    real = socket.getaddrinfo

    def recording(*args, **kwargs):
        looked_up_in.append(threading.current_thread())
        return real(*args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", recording)
    socks = await bind_tcp("localhost", 0)
    try:
        assert socks and looked_up_in
        assert threading.main_thread() not in looked_up_in
    finally:
        for s in socks:
            s.close()


def test_the_logon_timeout_counts_from_the_sockets_accept_its_handshake_included():
    """The logon timeout bounds everything before a logon: a TLS socket's starts at its
    accept (the ticket's time), not when its handshake is over and the protocol hears of it."""
    from types import SimpleNamespace

    from amps_emulator.server.net.admission import Ticket
    from amps_emulator.server.net.connection import Connection
    from tests.support.fakes import FakeServer, FakeTransport

    timers = []
    srv = FakeServer()
    srv.logon_timeout = 5.0
    def call_at(when, callback):
        timers.append(when)
        return SimpleNamespace(cancel=lambda: None)

    srv.loop = SimpleNamespace(time=lambda: 100.0, call_at=call_at)
    cap = ConnectionCap("t", 4)
    assert cap.take()
    listener = SimpleNamespace(max_frame=1 << 24, out_limit=1 << 30, logon_frame_limit=1 << 20,
                               throttled=0)
    Connection(srv, listener, Ticket(cap, accepted=97.0)).connection_made(FakeTransport())
    Connection(srv, listener).connection_made(FakeTransport())  # a plain socket: accepted now
    assert timers == [102.0, 105.0]
