"""A transport's connection cap (:mod:`amps_emulator.server.net.admission`): sockets past it
are reset at once, and a flood of refusals is one log line per interval, not one per socket."""

from __future__ import annotations

import logging

from amps_emulator.server.net.admission import LOG_INTERVAL, ConnectionCap, Ticket, descriptor_share


class Sock:
    def __init__(self) -> None:
        self.aborted = False

    def get_extra_info(self, name, default=None):
        return default

    def abort(self) -> None:
        self.aborted = True


def test_the_cap_admits_up_to_its_limit_and_resets_the_rest():
    cap = ConnectionCap("t", 2)
    socks = [Sock() for _ in range(4)]
    assert [cap.admit(s) for s in socks] == [True, True, False, False]
    assert [s.aborted for s in socks] == [False, False, True, True]
    assert cap.open == 2 and cap.refused == 2
    cap.release()
    assert cap.admit(Sock())


def test_a_place_taken_at_the_accept_is_given_back_once_whoever_releases_it():
    """A TLS socket's :class:`Ticket`: its protocol finds it counted, and the handshake's
    failure and the connection's end may both release it; the cap counts one release."""
    cap = ConnectionCap("t", 2)
    assert cap.take() and cap.take() and not cap.take()  # the third: refused at its accept
    assert cap.open == 2 and cap.refused == 1
    first, second = Ticket(cap), Ticket(cap)
    sock = Sock()
    assert first.admit(sock) and not sock.aborted  # counted already: not counted again
    assert cap.open == 2
    first.release()
    first.release()  # (e.g. the handshake's cancellation, then connection_lost)
    assert cap.open == 1
    late = Sock()
    assert not first.admit(late) and late.aborted  # given back before it was made: reset
    second.release()
    assert cap.open == 0


def test_no_limit_admits_everyone():
    cap = ConnectionCap("t", None)
    assert all(cap.admit(Sock()) for _ in range(1000))


def test_a_flood_of_refusals_logs_one_line_per_interval(caplog):
    now = [0.0]
    cap = ConnectionCap("flooded", 1, clock=lambda: now[0])
    cap.admit(Sock())
    with caplog.at_level(logging.WARNING, logger="amps_emulator.connection"):
        for _ in range(500):
            now[0] += 0.001
            cap.admit(Sock())
        assert len(caplog.records) == 1
        assert "'flooded'" in caplog.records[0].getMessage()
        now[0] += LOG_INTERVAL
        cap.admit(Sock())
    assert len(caplog.records) == 2
    assert "refused 500 connections" in caplog.records[1].getMessage()


def test_the_default_shares_the_open_file_limit_among_the_transports():
    one, four = descriptor_share(1), descriptor_share(4)
    if one is None:  # a platform without a known limit: no default cap
        assert four is None
        return
    assert one >= 16 and four >= 16 and four <= one
