"""``do-remove-files`` / ``do-compress-files``: which files a Pattern, Age, Keep and Count
select, what is never touched (links, directories, journals, open files, the transaction
log's directory), and compressing atomically to gzip."""

from __future__ import annotations

import gzip
import os
import socket

import pytest

from amps_emulator.server.services.actions import files

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
