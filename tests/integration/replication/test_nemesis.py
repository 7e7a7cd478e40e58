"""The nemesis run (``bench/nemesis.py``) in short: 15 s or more of link cuts, partitions,
blackholes, delays, kill -9 and SIGSTOP across a sync pair under the mixed workload (HAClient
publishers with file-backed publish stores, SOW updaters, bookmark subscribers, a queue
producer and consumers), every kind of fault at least once, then every checker: nothing acked
lost, duplicated or reordered on either instance or at a subscriber, the SOWs converged, the
queue delivered and drained, the healed pair live. A longer run:
``AMPS_EMULATOR_NEMESIS_SECONDS``; another schedule: ``AMPS_EMULATOR_NEMESIS_SEED``."""

from __future__ import annotations

import os

import pytest

from bench.nemesis import KINDS, run_nemesis

SECONDS = float(os.environ.get("AMPS_EMULATOR_NEMESIS_SECONDS", "15"))
SEED = int(os.environ.get("AMPS_EMULATOR_NEMESIS_SEED", "37"))


@pytest.mark.soak
def test_nemesis_pair(tmp_path):
    report = run_nemesis(tmp_path, SECONDS, SEED, rate=30.0, duration=(0.8, 2.0), gap=(0.5, 1.5),
                         min_each=1, echo=False)
    history = "\n".join(report.history)
    assert all(report.steps[k] >= 1 for k in KINDS), history
    assert sum(report.acked.values()) > 1000, report.summary()
    assert report.ok, f"{report.summary()}\n{history}"
