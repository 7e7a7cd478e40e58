"""``do-remove-files`` / ``do-compress-files``: which files a Pattern, Age, Keep and Count
select, what is never touched (links, directories, journals, open files, the transaction
log's directory), and compressing atomically to gzip; through the engine, the emulator's
minidumps are files like any other (``NAME.dmp`` compresses to ``NAME.dmp.gz``)."""

from __future__ import annotations

import gzip
import logging
import os
import socket

import pytest

from amps_emulator.server.core.clock import TestClock
from amps_emulator.server.messaging.broker import Broker
from amps_emulator.server.services.actions import Actions, files
from tests.unit.server.services.actions.test_actions_steps import START, _Host, _Turn, action, step

NOW = 1_800_000_000.0
DAY = 86400.0


def make(path, age_days: float, data: bytes = b"x" * 100) -> str:
    path.write_bytes(data)
    t = NOW - age_days * DAY
    os.utime(path, (t, t))
    return str(path)


@pytest.fixture
def logs(tmp_path):
    d = tmp_path / "logs"
    d.mkdir()
    return d


def test_age_and_glob_oldest_first(logs):
    old = [make(logs / f"a{i}.log", 10 - i) for i in range(3)]  # 10, 9, 8 days
    make(logs / "young.log", 0.5)
    make(logs / "other.txt", 20)
    sel = files.select(str(logs / "*.log"), DAY, NOW)
    assert sel.chosen == old and sel.matched == 4


def test_keep_leaves_the_newest_and_count_takes_at_most(logs):
    paths = [make(logs / f"f{i}.log", 10 - i) for i in range(5)]  # oldest first
    assert files.select(str(logs / "*.log"), DAY, NOW, keep=2).chosen == paths[:3]
    assert files.select(str(logs / "*.log"), DAY, NOW, count=2).chosen == paths[:2]
    assert files.select(str(logs / "*.log"), DAY, NOW, keep=2, count=1).chosen == paths[:1]
    assert files.select(str(logs / "*.log"), DAY, NOW, keep=6, count=3).chosen == []
    assert files.select(str(logs / "*.log"), DAY, NOW, keep=0).chosen == paths


def test_relative_pattern_is_read_from_the_working_directory(logs, monkeypatch):
    make(logs / "r.log", 3)
    monkeypatch.chdir(logs.parent)
    assert files.select("logs/*.log", DAY, NOW).chosen == ["logs/r.log"]


def test_links_directories_sockets_are_never_taken(logs, tmp_path):
    outside = make(tmp_path / "precious.log", 30)
    os.symlink(outside, logs / "link.log")
    (logs / "dir.log").mkdir()
    make(logs / "dir.log" / "inner.log", 30)  # no recursion
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(logs / "s.log"))
    try:
        sel = files.select(str(logs / "*.log"), 0, NOW)
    finally:
        sock.close()
    assert sel.chosen == []
    assert [p for p, _ in sel.refused] == [str(logs / "link.log")]


def test_journals_are_an_error_and_transaction_log_files_refused(logs, tmp_path):
    make(logs / "00000000000000000001.journal", 30)
    jdir = tmp_path / "journal"
    jdir.mkdir()
    make(jdir / "00000000000000000001.journal.gz", 30)
    sel = files.select(str(logs / "*"), 0, NOW)
    assert sel.chosen == [] and [p for p, _ in sel.errors] == [str(logs / "00000000000000000001.journal")]
    sel = files.select(str(jdir / "*"), 0, NOW, protected_dirs=[str(jdir)])
    assert sel.chosen == [] and len(sel.refused) == 1


def test_open_files_are_skipped(logs):
    path = make(logs / "open.log", 30)
    with open(path, "rb"):
        busy = files.open_files()
        if os.path.realpath(path) not in busy:
            pytest.skip("this OS does not say which files a process has open")
        sel = files.select(str(logs / "*.log"), 0, NOW, busy=busy)
    assert sel.chosen == [] and sel.refused == [(path, "open")]


def test_compressing_skips_gz_and_existing_outputs(logs):
    make(logs / "a.log", 30)
    make(logs / "a.log.1.gz", 30)
    make(logs / "b.log", 30)
    make(logs / "b.log.gz", 30)
    sel = files.select(str(logs / "*"), 0, NOW, compressing=True)
    assert sel.chosen == [str(logs / "a.log")]
    assert [p for p, _ in sel.refused] == [str(logs / "b.log")]


def test_compress_writes_gzip_atomically_and_keeps_the_time(logs):
    data = b"line of a log\n" * 1000
    path = make(logs / "c.log", 30, data)
    before, after = files.compress(path)
    assert (before, after) == (len(data), os.path.getsize(path + ".gz"))
    assert not os.path.exists(path) and after < before
    with gzip.open(path + ".gz") as f:
        assert f.read() == data
    assert os.stat(path + ".gz").st_mtime == pytest.approx(NOW - 30 * DAY)
    assert sorted(os.listdir(logs)) == ["c.log.gz"]  # no temp file left


def test_compress_refuses_a_link_and_leaves_nothing(logs, tmp_path):
    target = make(tmp_path / "t.log", 30)
    os.symlink(target, logs / "l.log")
    with pytest.raises(OSError):
        files.compress(str(logs / "l.log"))
    assert sorted(os.listdir(logs)) == ["l.log"] and os.path.exists(target)


def test_remove_refuses_what_became_a_directory(logs):
    (logs / "d").mkdir()
    with pytest.raises(OSError):
        files.remove(str(logs / "d"))
    assert files.remove(make(logs / "e.log", 3)) == 100


# -- through the engine: minidumps and the other files a Pattern names ---------------------

@pytest.fixture
def engine():
    broker = Broker(instance_name="inst", timebase=TestClock(start=START), turn=_Turn())
    return Actions("inst", [], broker, host=_Host())


def _dump(d, n: int, days_old: float, suffix: str = "") -> str:
    path = d / f"amps-emulator-2024010{n}T000000Z-42-0000000{n}.dmp{suffix}"
    path.write_text(f"dump {n}")
    then = START - days_old * DAY
    os.utime(path, (then, then))
    return path.name


def _others(d) -> list[str]:
    """Files that are not the emulator's minidumps, two named much like them."""
    names = ["notes.dmp", "amps-emulator-x.dmp", "amps.journal"]
    for name in names:
        (d / name).write_text("not a dump")
        os.utime(d / name, (0, 0))  # as old as can be
    return names


async def test_remove_files_takes_minidumps_and_any_other_match_alike(engine, tmp_path, caplog):
    _others(tmp_path)
    _dump(tmp_path, 1, 9)
    _dump(tmp_path, 2, 8, ".gz")
    young = _dump(tmp_path, 3, 0)
    with caplog.at_level(logging.INFO, logger="amps_emulator.actions"):
        assert engine.run(action(step("amps-action-do-remove-files", Age="1d",
                                      Pattern=f"{tmp_path}/*")), {})
        await engine.settle()
    # every old regular file went, dump or not; the journal is refused with an error
    assert sorted(os.listdir(tmp_path)) == sorted(["amps.journal", young])
    said = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert any("removed 4 of 6 file(s)" in text for _, text in said)
    assert [text for level, text in said if level == logging.ERROR] == [
        f"amps-action-do-remove-files: {tmp_path}/amps.journal matches '{tmp_path}/*' but is an "
        "AMPS journal: only the journal actions act on those: not removed"]


async def test_compress_files_gzips_the_oldest_dumps_to_dmp_gz_with_keep_and_count(engine, tmp_path):
    names = [_dump(tmp_path, n, 10 - n) for n in range(1, 6)]  # 1 is the oldest
    assert engine.run(action(step("amps-action-do-compress-files", Age="1h",
                                  Pattern=f"{tmp_path}/*.dmp", Keep="1", Count="3")), {})
    await engine.settle()
    left = set(os.listdir(tmp_path))
    assert {f"{n}.gz" for n in names[:3]} <= left and not {*names[:3]} & left
    assert {names[3], names[4]} <= left  # the fourth: Count; the fifth: Keep
    assert names[0].endswith(".dmp") and gzip.open(tmp_path / f"{names[0]}.gz").read() == b"dump 1"
    _others(tmp_path)  # not dumps: compressed all the same, the journal excepted
    assert engine.run(action(step("amps-action-do-compress-files", Age="0s",
                                  Pattern=f"{tmp_path}/*")), {})
    await engine.settle()
    left = set(os.listdir(tmp_path))
    assert not any(n.endswith(".gz.gz") for n in left)
    assert {f"{n}.gz" for n in names} | {"notes.dmp.gz", "amps-emulator-x.dmp.gz", "amps.journal"} \
        == left


async def test_keep_above_what_qualifies_does_nothing(engine, tmp_path):
    names = [_dump(tmp_path, 1, 6), _dump(tmp_path, 2, 5)]
    assert engine.run(action(step("amps-action-do-remove-files", Age="1d", Pattern=f"{tmp_path}/*",
                                  Keep="3", Count="5")), {})
    await engine.settle()
    assert sorted(os.listdir(tmp_path)) == sorted(names)
    assert engine.run(action(step("amps-action-do-remove-files", Age="1d", Pattern=f"{tmp_path}/*",
                                  Keep="1")), {})
    await engine.settle()
    assert os.listdir(tmp_path) == [names[1]]  # the oldest went
