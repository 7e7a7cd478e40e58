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
