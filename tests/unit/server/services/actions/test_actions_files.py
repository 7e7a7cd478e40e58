"""``do-remove-files`` and ``do-compress-files`` act on the emulator's own minidumps among the
files their ``Pattern`` matches, and on nothing else."""

from __future__ import annotations

import gzip
import logging
import os
import time

import pytest

from amps_emulator.server.core.clock import TestClock
from amps_emulator.server.messaging.broker import Broker
from amps_emulator.server.services.actions import Actions
from tests.unit.server.services.actions.test_actions_steps import START, _Host, _Turn, action, step

DAY = 86400


@pytest.fixture
def engine():
    broker = Broker(instance_name="inst", timebase=TestClock(start=START), turn=_Turn())
    return Actions("inst", [], broker, host=_Host())


def _dump(d, n: int, days_old: float, suffix: str = "") -> str:
    path = d / f"amps-emulator-2024010{n}T000000Z-42-0000000{n}.dmp{suffix}"
    path.write_text(f"dump {n}")
    then = time.time() - days_old * DAY
    os.utime(path, (then, then))
    return path.name


def _others(d) -> list[str]:
    names = ["notes.dmp", "amps-emulator-x.dmp", "amps.journal"]
    for name in names:
        (d / name).write_text("keep me")
        os.utime(d / name, (0, 0))  # as old as can be
    return names


def test_remove_files_removes_old_minidumps_only(engine, tmp_path, caplog):
    others = _others(tmp_path)
    old = [_dump(tmp_path, 1, 9), _dump(tmp_path, 2, 8, ".gz")]
    young = _dump(tmp_path, 3, 0)
    with caplog.at_level(logging.INFO, logger="amps_emulator.actions"):
        assert engine.run(action(step("amps-action-do-remove-files", Age="1d",
                                      Pattern=f"{tmp_path}/*")), {})
    assert sorted(os.listdir(tmp_path)) == sorted([*others, young])
    assert any("removed 2 minidump file(s)" in r.getMessage()
               and "3 other matching file(s) left alone" in r.getMessage() for r in caplog.records)
    assert old  # (both went)


def test_compress_files_gzips_the_oldest_and_keeps_count(engine, tmp_path):
    names = [_dump(tmp_path, n, 10 - n) for n in range(1, 6)]  # 1 is the oldest
    _others(tmp_path)
    assert engine.run(action(step("amps-action-do-compress-files", Age="1h", Pattern=f"{tmp_path}/*.dmp",
                                  Keep="1", Count="3")), {})
    left = set(os.listdir(tmp_path))
    assert {f"{n}.gz" for n in names[:3]} <= left and not {*names[:3]} & left
    assert {names[3], names[4]} <= left  # the fourth: Count; the fifth: Keep
    assert gzip.open(tmp_path / f"{names[0]}.gz").read() == b"dump 1"
    assert engine.run(action(step("amps-action-do-compress-files", Age="0s",
                                  Pattern=f"{tmp_path}/*")), {})
    assert not any(n.endswith(".gz.gz") for n in os.listdir(tmp_path))


def test_keep_above_what_qualifies_does_nothing(engine, tmp_path):
    names = [_dump(tmp_path, n, 5) for n in (1, 2)]
    assert engine.run(action(step("amps-action-do-remove-files", Age="1d", Pattern=f"{tmp_path}/*",
                                  Keep="3", Count="5")), {})
    assert sorted(os.listdir(tmp_path)) == sorted(names)
    assert engine.run(action(step("amps-action-do-remove-files", Age="1d", Pattern=f"{tmp_path}/*",
                                  Keep="1")), {})
    assert os.listdir(tmp_path) == [names[1]]  # the oldest went
