"""The failover soak (``bench/soak_failover.py``) in short: about 20 s of SIGKILL and restart of
a replicated pair's instances under an HAClient publisher (publish store) and an HAClient
bookmark subscriber, then the checker: every message on both instances once, in order, with the
same bookmarks, and the subscriber saw no gap and no duplicate.

``backup`` kills the instance the publisher is not on (the subscriber fails over; the killed
instance resyncs). ``any`` kills the publisher's instance too, which loses nothing only because
the sync Destinations hold the publisher's persisted acks until the peer has the message. A
longer run: ``AMPS_EMULATOR_SOAK_SECONDS``."""

from __future__ import annotations

import os

import pytest

from bench.soak_failover import run_soak

SECONDS = float(os.environ.get("AMPS_EMULATOR_SOAK_SECONDS", "20"))


@pytest.mark.soak
@pytest.mark.parametrize("kill", ["backup", "any"])
def test_failover_soak(tmp_path, kill):
    # at least 5 kills: a restart on a loaded CI machine takes seconds (4 fitted in 20 s once)
    report = run_soak(tmp_path, SECONDS, kill=kill, sync=True, rate=200, seed=20, min_rounds=5)
    assert report.rounds >= 5 and report.messages > 1000, report
    assert report.subscriber_failovers >= 1, report.faults
    assert report.ok, report.violations
