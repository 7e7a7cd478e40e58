"""The disconnects AMPS logs under an id of their own carry it (and AMPS's level), so a
``Logging/Target``'s ``IncludeErrors`` / ``ExcludeErrors`` select them: 07-0042 a missed
heartbeat (error), 02-0025 a client name taken over (warning), 70-0004 a slow client
(error); any other disconnect is a warning without an id."""

from __future__ import annotations

import logging

from amps_emulator.protocol import reasons
from tests.support.fakes import connection

CASES = [
    (f"{reasons.DISCONNECT_HEARTBEAT}: nothing received for 3s", "07-0042", logging.ERROR),
    (f"{reasons.DISCONNECT_NAME_IN_USE}: a logon took over", "02-0025", logging.WARNING),
    (f"{reasons.DISCONNECT_SLOW_CLIENT}: more than 10 bytes pending", "70-0004", logging.ERROR),
    ("entitlement reset", None, logging.WARNING),
]


def test_a_disconnect_carries_the_amps_id_of_its_event(caplog) -> None:
    got = []
    for why, _, _ in CASES:
        _, conn, _ = connection()
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="amps_emulator.connection"):
            conn.close(why)
        (rec,) = [r for r in caplog.records if "disconnecting" in r.getMessage()]
        got.append((why, getattr(rec, "amps_id", None), rec.levelno))
    assert got == CASES
