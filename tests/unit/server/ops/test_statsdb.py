"""The statistics database in a file (:mod:`server.ops.statsdb`), with the standard library's
sqlite3 reading it as a user's tools would: AMPS's table names, one STATIC row per object and
one DYNAMIC row per object per sample joined on ``static_id``, AMPS timestamps, the samples
read back into the history, old samples removed, files that cannot be the database refused,
and a writer thread that drops samples rather than wait on a stalled disk."""

from __future__ import annotations

import calendar
import sqlite3
import threading
import time

import pytest

from amps_emulator.server.ops.stats_history import StatsHistory, format_time, parse_time
from amps_emulator.server.ops.statsdb import (
    StatsFile,
    StatsFileError,
    StatsWriter,
    from_amps_time,
    read_history,
    to_amps_time,
)
from amps_emulator.server.ops.statsdb.schema import from_sql, to_sql

T0 = parse_time("20240102T101500")
STEP = 10_000_000  # 10 s, in microseconds


def _tree(clients: dict[str, tuple[str, str]], cpus: int = 2, extra: dict | None = None) -> dict:
    """An /amps tree: ``clients`` name -> (connect_time, messages_in)."""
    return {"amps": {
        "host": {"name": "h", "cpus": [{"id": f"cpu{i}", "idle_percent": "50.000000",
                                        "user_percent": "50.000000"} for i in range(cpus)],
                 "memory": {"total": "1000", "free": "400"}},
        "instance": {
            "name": "inst",
            "clients": [{"id": name, "client_name": name, "connect_time": ct,
                         "messages_in": n, "messages_in_per_sec": "0.500000",
                         "remote_address": "127.0.0.1:5000", **(extra or {})}
                        for name, (ct, n) in clients.items()],
            "sow": [], "statistics": {"file_name": "stats.db", "interval": "10000",
                                      "total_samples": "1"}}}}


def _db(path) -> sqlite3.Connection:
    return sqlite3.connect(str(path))


def test_timestamps_are_amps_statistics_timestamps() -> None:
    # the User Guide's report example: 2018-05-01T00:00:00Z is 212391936000000
    may = calendar.timegm((2018, 5, 1, 0, 0, 0)) * 1_000_000
    assert to_amps_time(may) == 212391936000000
    # amps-sqlite3's conversion back to Unix time
    assert to_amps_time(T0) / 1000 - 210866803200 == T0 / 1_000_000
    assert from_amps_time(to_amps_time(T0 + 5_000)) == T0 + 5_000
    assert to_amps_time(T0 + 999) == to_amps_time(T0)  # whole milliseconds


def test_figures_are_numbers_when_they_read_back_as_written() -> None:
    for text, stored in [("12", 12), ("-3", -3), ("0.500000", 0.5), ("0.0", "0.0"),
                         ("", ""), ("007", "007"), ("name", "name"), ("1e3", "1e3")]:
        assert to_sql(text) == stored and type(to_sql(text)) is type(stored)
        assert from_sql(to_sql(text)) == text


def test_a_sample_is_static_and_dynamic_rows_joined_on_static_id(tmp_path) -> None:
    path = tmp_path / "stats.db"
    f = StatsFile(str(path))
    f.write(to_amps_time(T0), _tree({"a": ("t1", "1"), "b": ("t1", "5")}))
    f.write(to_amps_time(T0 + STEP), _tree({"a": ("t1", "3")}))
    f.write(to_amps_time(T0 + 2 * STEP), _tree({"a": ("t2", "0")}))  # a reconnected
    f.close()
    db = _db(path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"HCPUS_STATIC", "HCPUS_DYNAMIC", "HMEMORY_STATIC", "HMEMORY_DYNAMIC",
            "ICLIENTS_STATIC", "ICLIENTS_DYNAMIC", "ISOW_STATIC", "ISOW_DYNAMIC",
            "ISTATISTICS_STATIC", "ISTATISTICS_DYNAMIC", "IQUEUES_DYNAMIC",
            "ISUBSCRIPTIONS_DYNAMIC", "IPROCESSORS_DYNAMIC", "IREPLICATIONS_DYNAMIC"} <= tables
    # one STATIC row per identity: a's reconnection (a new connect_time) is a new object
    statics = db.execute("SELECT static_id, oid, client_name, connect_time FROM ICLIENTS_STATIC "
                         "ORDER BY static_id").fetchall()
    assert [row[1:] for row in statics] == [("a", "a", "t1"), ("b", "b", "t1"), ("a", "a", "t2")]
    rows = db.execute("SELECT d.timestamp, s.client_name, d.messages_in, d.messages_in_per_sec "
                      "FROM ICLIENTS_DYNAMIC d JOIN ICLIENTS_STATIC s "
                      "ON s.static_id = d.static_id ORDER BY d.timestamp, s.client_name").fetchall()
    t = to_amps_time(T0)
    assert rows == [(t, "a", 1, 0.5), (t, "b", 5, 0.5), (t + 10_000, "a", 3, 0.5),
                    (t + 20_000, "a", 0, 0.5)]
    # figures are numbers SQL compares as numbers; fixed fields are in STATIC only
    assert db.execute("SELECT count(*) FROM ICLIENTS_DYNAMIC WHERE messages_in > 2").fetchone() == (2,)
    dyn = [r[1] for r in db.execute("PRAGMA table_info(ICLIENTS_DYNAMIC)")]
    assert dyn[:2] == ["timestamp", "static_id"] and "client_name" not in dyn
    assert db.execute("SELECT oid, total FROM HMEMORY_STATIC").fetchall() == [("memory", "1000")]
    assert db.execute("SELECT count(*) FROM HCPUS_STATIC").fetchone() == (2,)
    assert db.execute("SELECT count(*) FROM HCPUS_DYNAMIC").fetchone() == (6,)


def test_a_new_field_adds_a_column_and_a_reopened_file_keeps_its_objects(tmp_path) -> None:
    path = str(tmp_path / "stats.db")
    f = StatsFile(path)
    f.write(to_amps_time(T0), _tree({"a": ("t1", "1")}))
    f.close()
    f = StatsFile(path)  # the objects known again: no second STATIC row for a
    f.write(to_amps_time(T0 + STEP), _tree({"a": ("t1", "2")}, extra={"denied_reads": "4"}))
    f.close()
    db = _db(path)
    assert db.execute("SELECT count(*) FROM ICLIENTS_STATIC").fetchone() == (1,)
    assert db.execute("SELECT messages_in, denied_reads FROM ICLIENTS_DYNAMIC "
                      "ORDER BY timestamp").fetchall() == [(1, None), (2, 4)]


def test_the_samples_read_back_answer_the_time_range_queries(tmp_path) -> None:
    path = str(tmp_path / "stats.db")
    f = StatsFile(path)
    for i in range(4):
        f.write(to_amps_time(T0 + i * STEP), _tree({"a": ("t1", str(i))}, cpus=1))
    f.write(to_amps_time(T0 + 4 * STEP), _tree({"a": ("t1", "4")}, cpus=1))  # (after upto)
    assert f.last == to_amps_time(T0 + 4 * STEP)
    f.close()
    history = read_history(path, to_amps_time(T0 + 3 * STEP), keep=3)  # the last three
    stamps = [format_time(T0 + i * STEP) for i in (1, 2, 3)]
    leaf = history.select(["amps", "instance", "clients", "a", "messages_in"], {"t0": "20000101T0"})
    assert leaf.node == [(s, str(i)) for s, i in zip(stamps, (1, 2, 3), strict=True)]
    rate = history.select(["amps", "instance", "clients", "a", "messages_in_per_sec"],
                          {"t0": stamps[0], "t1": stamps[0]})
    assert rate.node == [(stamps[0], "0.500000")]
    times = history.select(["amps", "instance", "timestamp"], {"t0": "20000101T0"})
    assert [v for _, v in times.node] == stamps
    node = history.select(["amps", "host", "memory"], {"t0": stamps[1], "t1": stamps[1]})
    assert node.node == {"total": "1000", "free": "400"}


def test_truncate_removes_old_samples_and_the_objects_only_they_had(tmp_path) -> None:
    path = str(tmp_path / "stats.db")
    f = StatsFile(path)
    f.write(to_amps_time(T0), _tree({"old": ("t1", "1"), "a": ("t1", "1")}))
    f.write(to_amps_time(T0 + STEP), _tree({"a": ("t1", "2")}))
    assert f.truncate(to_amps_time(T0 + STEP)) > 0
    db = _db(path)
    assert db.execute("SELECT DISTINCT timestamp FROM ICLIENTS_DYNAMIC").fetchall() == \
        [(to_amps_time(T0 + STEP),)]
    assert db.execute("SELECT oid FROM ICLIENTS_STATIC").fetchall() == [("a",)]
    f.write(to_amps_time(T0 + 2 * STEP), _tree({"old": ("t1", "9")}))  # back: a new object
    assert db.execute("SELECT count(*) FROM ICLIENTS_STATIC WHERE oid = 'old'").fetchone() == (1,)
    f.close()


def test_statistics_indexing_enabled_adds_an_index_on_static_id(tmp_path) -> None:
    from amps_emulator.config import loads_config

    xml = "<AMPSConfig><Name>x</Name>{}</AMPSConfig>"
    on = "<Statistics><Indexing><Enabled>true</Enabled></Indexing></Statistics>"
    assert loads_config(xml.format(on), "a.xml").statistics_indexing is True
    assert loads_config(xml.format(""), "a.xml").statistics_indexing is False
    path = str(tmp_path / "stats.db")
    StatsFile(path).close()
    indexes = "SELECT tbl_name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
    assert _db(path).execute(indexes).fetchall() == []
    StatsFile(path, index=True).close()
    got = {t for (t,) in _db(path).execute(indexes)}
    assert "ICLIENTS_DYNAMIC" in got and all(t.endswith("_DYNAMIC") for t in got)


def test_reading_back_stops_when_asked(tmp_path) -> None:
    path = str(tmp_path / "stats.db")
    f = StatsFile(path)
    for i in range(3):
        f.write(to_amps_time(T0 + i * STEP), _tree({"a": ("t1", str(i))}))
    f.close()
    stop = threading.Event()
    stop.set()
    assert len(read_history(path, to_amps_time(T0 + 2 * STEP), stop=stop).times) == 0
    assert len(read_history(path, to_amps_time(T0 + 2 * STEP)).times) == 3


def test_the_history_forgets_samples_before_a_time() -> None:
    h = StatsHistory()
    for i in range(3):
        h.record(T0 + i * STEP, _tree({"a": ("t", str(i))}))
    assert h.forget_before(T0 + STEP) == 1
    got = h.select(["amps", "instance", "clients", "a", "messages_in"], {"t0": "20000101T0"})
    assert [v for _, v in got.node] == ["1", "2"]


@pytest.mark.parametrize("make, says", [
    (lambda p: p.write_bytes(b"this is not a database at all, just text" * 40),
     "not a statistics database"),
    (lambda p: sqlite3.connect(str(p)).execute("CREATE TABLE orders (id integer)"),
     "it holds other tables (orders)"),
    (lambda p: p.mkdir(), "is a directory"),
])
def test_a_file_that_cannot_be_the_database_is_refused_by_its_path(tmp_path, make, says) -> None:
    path = tmp_path / "stats.db"
    make(path)
    before = path.read_bytes() if path.is_file() else None
    with pytest.raises(StatsFileError) as exc:
        StatsFile(str(path))
    assert str(exc.value).startswith(str(path)) and says in str(exc.value)
    assert before is None or path.read_bytes() == before  # left as it was


def test_a_directory_that_cannot_be_made_is_refused(tmp_path) -> None:
    (tmp_path / "plain").write_text("a file, not a directory")
    with pytest.raises(StatsFileError, match="cannot create its directory"):
        StatsFile(str(tmp_path / "plain" / "sub" / "stats.db"))


class _StalledFile:
    """A file whose writes wait until released (a disk that stalls)."""

    path = "stalled.db"

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.written: list[int] = []
        self.truncated: list[int] = []
        self.closed = False

    def write(self, at, tree):
        self.entered.set()
        self.release.wait(10)
        self.written.append(at)

    def truncate(self, before):
        self.truncated.append(before)
        return 0

    def close(self):
        self.closed = True


def test_a_stalled_disk_drops_and_counts_samples_and_never_holds_the_caller(caplog) -> None:
    f = _StalledFile()
    w = StatsWriter(f, limit=3).start()  # type: ignore[arg-type]
    assert w.submit(0, {}) and f.entered.wait(10)  # being written: the disk stalls
    started = time.monotonic()
    accepted = [True] + [w.submit(i, {}) for i in range(1, 10)]
    assert time.monotonic() - started < 1.0  # (nothing waited for the disk)
    # three wait behind the stalled one, the rest are dropped and counted
    assert accepted == [True] * 4 + [False] * 6 and w.dropped == 6
    assert sum("dropped" in r.getMessage() for r in caplog.records) == 1  # one line
    w.truncate(99)  # never dropped
    f.release.set()
    assert w.barrier().wait(10)
    assert f.written == [i for i, ok in enumerate(accepted) if ok] and f.truncated == [99]
    assert w.close() and f.closed


def test_the_writer_thread_writes_a_real_file_in_order(tmp_path) -> None:
    path = str(tmp_path / "stats.db")
    w = StatsWriter(StatsFile(path)).start()
    for i in range(5):
        assert w.submit(to_amps_time(T0 + i * STEP), _tree({"a": ("t", str(i))}))
    w.truncate(to_amps_time(T0 + 2 * STEP))
    assert w.close()
    assert (w.written, w.dropped, w.failed) == (5, 0, 0)
    assert _db(path).execute("SELECT messages_in FROM ICLIENTS_DYNAMIC ORDER BY timestamp"
                             ).fetchall() == [(2,), (3,), (4,)]
