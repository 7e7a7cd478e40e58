"""Disk faults through the official client (issue 11 items 7 and 8)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import threading
import time

import pytest

from amps_emulator.journal import FileJournal
from amps_emulator.journal.testing import DiskFull
from amps_emulator.server.services import txlog as txlog_module
from tests.support.clients import store_client
from tests.support.servers import start_server


def txlog_xml(data_dir, extra: str = "") -> str:
    return f"""<AMPSConfig><Name>disk</Name>
  <Transports><Transport><Name>json-tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
    <MessageType>json</MessageType><Protocol>amps</Protocol></Transport></Transports>
  <TransactionLog><JournalDirectory>{data_dir}/journal</JournalDirectory><JournalSize>64KB</JournalSize>
    <Topic><Name>.*</Name><MessageType>json</MessageType></Topic></TransactionLog>
  {extra}
</AMPSConfig>"""


def journal_ids(directory):
    """The ``i`` of every message in the journal at ``directory`` (opened after the server
    stopped), and the recovery report."""
    j, report = FileJournal.open(directory)
    try:
        return [json.loads(r.body)["i"] for r in j.read()], report
    finally:
        j.close()


def wait_until(pred, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)  # polling a condition with a deadline, not waiting for readiness
    return True


def test_disk_full_at_a_segment_roll(tmp_path, caplog):
    """Each refused publish reaches the failed-write handler with ``tx store failure`` (the ack
    carries ``s``), one log line per change of state, replays keep working, the server takes
    publishes again by itself, and nothing reported failed is in the journal afterwards."""
    import AMPS

    srv = start_server(txlog_xml(tmp_path))
    failed: list[tuple[int, str]] = []
    lock = threading.Condition()

    def on_failed(message, reason):
        with lock:
            failed.append((json.loads(message.get_data())["i"], str(reason)))
            lock.notify_all()

    body = " " * 300
    try:
        with caplog.at_level(logging.INFO):
            pub = store_client(srv.uri, "disk-pub", on_failed)
            for i in range(150):  # most of the first 64 KB segment
                pub.publish("orders", json.dumps({"i": i, "pad": body}))
            pub.publish_flush(5000)
            size = srv.call(lambda: srv.server.txlog.journal.segments[-1].size)
            disk = DiskFull(free=64 * 1024 - size + 500)  # fills the segment; the roll fails
            srv.call(lambda: setattr(srv.server.txlog.journal, "file_ops", disk))
            for i in range(150, 400):
                pub.publish("orders", json.dumps({"i": i, "pad": body}))
            pub.publish_flush(10000)  # returns: every publish was acked, as stored or failed
            assert pub.get_unpersisted_count() == 0
            with lock:
                refused = sorted(i for i, _ in failed)
            assert refused and all("tx store failure" in r for _, r in failed)
            assert refused == list(range(refused[0], 400))  # each one, once, from the first refused on
            assert srv.call(lambda: srv.server.txlog.failed) == "tx store failure"

            # reads and replays keep working while the disk is full
            reader = AMPS.Client("disk-reader")
            reader.connect(srv.uri)
            reader.logon(5000)
            for i in range(100):  # fire-and-forget publishes: refused without a log line each
                reader.publish("orders", json.dumps({"i": -1}))
            reader.flush(5000)
            got, done = [], threading.Event()

            def on_replay(m):
                if m.get_command() == "ack" and m.get_ack_type() == "completed":
                    done.set()
                elif m.get_command() in ("p", "publish"):
                    got.append(json.loads(m.get_data())["i"])

            reader.execute_async(AMPS.Command("subscribe").set_topic("orders").set_bookmark("0")
                                 .add_ack_type("completed").set_timeout(5000), on_replay)
            assert done.wait(10)
            assert got == list(range(refused[0]))

            disk.free = None  # space returns: the server notices by itself
            assert wait_until(lambda: srv.call(lambda: srv.server.txlog.failed) is None)
            for i in range(400, 420):
                pub.publish("orders", json.dumps({"i": i, "pad": body}))
            pub.publish_flush(5000)
            with lock:
                assert sorted(i for i, _ in failed) == refused  # no new failures
            assert srv.call(lambda: len(srv.server.txlog.journal.segments)) == 2  # rolled (when the disk filled, or after)
            reader.close()
            pub.close()
        logs = [r for r in caplog.records if r.name == "amps_emulator.txlog"]
        assert [r.levelname for r in logs if r.levelno >= logging.WARNING] == ["ERROR", "WARNING"]
        assert not any(r.exc_info for r in caplog.records)
        assert not [r for r in caplog.records if "tx store failure" in r.getMessage()
                    and r.name != "amps_emulator.txlog"]
    finally:
        srv.stop()
    kept, report = journal_ids(tmp_path / "journal")
    assert report.clean
    assert kept == list(range(refused[0])) + list(range(400, 420))


def fail_one_fsync_in_the_file_layer(srv) -> list[int]:
    """The journal's next fdatasync fails with ENOSPC (its worker thread runs it through the
    fault-injecting file layer)."""
    disk = DiskFull(failing_fsyncs=1)
    srv.call(lambda: setattr(srv.server.txlog.journal, "file_ops", disk))
    return []


def fail_one_fsync_on_the_sync_thread(srv) -> list[int]:
    """The compiled sync thread's next job is handed a pipe instead of the journal's file:
    its fdatasync fails (EINVAL). Returns the fds to close."""
    r, w = os.pipe()
    journal = srv.call(lambda: srv.server.txlog.journal)
    begin = journal.begin_sync
    broken: list[bool] = []

    def begin_once():
        job = begin()
        if job is not None and job.fds and not broken:
            broken.append(True)
            job.fds = [r]
        return job

    srv.call(lambda: setattr(journal, "begin_sync", begin_once))
    return [r, w]


@pytest.mark.parametrize("fail_one_fsync", [
    fail_one_fsync_in_the_file_layer,
    pytest.param(fail_one_fsync_on_the_sync_thread, marks=pytest.mark.skipif(
        txlog_module._Syncer is None, reason="the compiled extension is not built")),
])
def test_a_failed_fsync_fails_what_it_covered_and_the_server_goes_on(tmp_path, fail_one_fsync):
    srv = start_server(txlog_xml(tmp_path))
    failed = []
    fds: list[int] = []
    try:
        pub = store_client(srv.uri, "fsync-pub", lambda m, reason: failed.append(
            (json.loads(m.get_data())["i"], str(reason))))
        pub.publish("orders", json.dumps({"i": 0}))
        pub.publish_flush(5000)
        fds = fail_one_fsync(srv)
        pub.publish("orders", json.dumps({"i": 1}))
        pub.publish_flush(5000)
        assert failed == [(1, "tx store failure")]
        assert wait_until(lambda: srv.call(lambda: srv.server.txlog.failed) is None)
        pub.publish("orders", json.dumps({"i": 2}))
        pub.publish_flush(5000)
        assert len(failed) == 1 and pub.get_unpersisted_count() == 0
        pub.close()
    finally:
        srv.stop()
        for fd in fds:
            os.close(fd)
    assert journal_ids(tmp_path / "journal")[0] == [0, 2]


@pytest.mark.skipif(txlog_module._Syncer is None, reason="the compiled extension is not built")
def test_a_snapshot_sync_after_a_failed_thread_sync_does_not_claim_its_records(tmp_path):
    """``sync_now`` (a snapshot's) waits for the compiled thread's running sync. When that
    sync failed, the records it covered are cut as any failed group sync's are: a later
    fdatasync that succeeds must not make them durable (the pages the failed one left are
    unknown)."""
    srv = start_server(txlog_xml(tmp_path))
    fds: list[int] = []
    try:
        pub = store_client(srv.uri, "snap-pub")
        pub.publish("orders", json.dumps({"i": 0}))
        pub.publish_flush(5000)
        fds = fail_one_fsync_on_the_sync_thread(srv)

        def write_then_sync_now():  # (in the loop: the thread's result is taken by sync_now)
            tx = srv.server.txlog
            tx.append("orders", json.dumps({"i": 1}).encode())
            tx.end_turn()  # the write, and the (failing) sync started on the thread
            tx.sync_now()
            return tx.failed

        # refusing until a write goes through again
        assert srv.call(write_then_sync_now) == "tx store failure"
        pub.close()
    finally:
        srv.stop()
        for fd in fds:
            os.close(fd)
    assert journal_ids(tmp_path / "journal")[0] == [0]


@pytest.fixture
def tiny_fs(tmp_path):
    """A 1 MiB tmpfs mounted for the test (skipped where mounting is not permitted)."""
    yield from mounted_tmpfs(tmp_path / "tiny", "1m")


def mounted_tmpfs(mnt, size: str):
    mnt.mkdir()
    try:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
                           capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"cannot mount a tmpfs here: {exc}")
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode(errors='replace').strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=10)


def test_a_real_full_file_system(tiny_fs):
    """The same on a real file system that fills up (no injected fault)."""
    srv = start_server(txlog_xml(tiny_fs))
    failed = []
    try:
        pub = store_client(srv.uri, "tiny-pub", lambda m, reason: failed.append(
            json.loads(m.get_data())["i"]))
        filler = tiny_fs / "filler"
        st = os.statvfs(tiny_fs)
        with open(filler, "wb") as f:  # leave about 24 KB free
            f.write(bytes(st.f_bavail * st.f_frsize - 24 * 1024))
        body = " " * 300
        for i in range(200):
            pub.publish("orders", json.dumps({"i": i, "pad": body}))
        pub.publish_flush(10000)
        assert failed and pub.get_unpersisted_count() == 0
        filler.unlink()  # space returns
        assert wait_until(lambda: srv.call(lambda: srv.server.txlog.failed) is None)
        for i in range(200, 210):
            pub.publish("orders", json.dumps({"i": i, "pad": body}))
        pub.publish_flush(5000)
        assert max(failed) < 200 and pub.get_unpersisted_count() == 0
        pub.close()
    finally:
        srv.stop()
    kept, _ = journal_ids(tiny_fs / "journal")
    # (a probe may find a few bytes free, so refusals need not be one run) every message is
    # either in the journal or was reported failed, never both, never neither
    assert kept[-10:] == list(range(200, 210)) and not set(kept) & set(failed)
    assert sorted(kept[:-10] + failed) == list(range(200))


@pytest.fixture
def small_fs(tmp_path):
    """A 4 MiB tmpfs (room for a 2 MiB SOW map; skipped where mounting is not permitted)."""
    yield from mounted_tmpfs(tmp_path / "small", "4m")


def test_a_sow_on_a_file_system_that_fills_up(tmp_path, small_fs, caplog):
    """The SOW's LMDB file fills its file system: the server stays up (a store into an
    unallocated mapped page was SIGBUS), publishes it cannot store reach the failed-write
    handler with ``tx store failure``, everything acked is in the SOW and queries go on;
    when the file system grows, publishes are taken again by themselves."""

    srv = start_server(sow_xml(small_fs, journal=True).replace(
        f"{small_fs}/journal", f"{tmp_path}/journal").replace("/id", "/i"))
    failed: list[tuple[int, str]] = []
    pub = store_client(srv.uri, "sow-pub", lambda m, reason: failed.append(
        (json.loads(m.get_data())["i"], str(reason))))
    pad = "x" * 1000
    try:
        with caplog.at_level(logging.INFO):
            n = 0
            while not failed and n < 20_000:
                for i in range(n, n + 200):
                    pub.publish("orders", json.dumps({"i": i, "pad": pad}))
                n += 200
                pub.publish_flush(10_000)
            for i in range(n, n + 100):  # refused up front while it is full
                pub.publish("orders", json.dumps({"i": i, "pad": pad}))
            n += 100
            pub.publish_flush(10_000)
            assert pub.get_unpersisted_count() == 0
            refused = sorted(i for i, _ in failed)
            assert refused == list(range(refused[0], n))
            assert {r for _, r in failed} == {"tx store failure"}
            assert srv.call(lambda: list(srv.server.sow_service.sow.full_stores()))
            ids = [json.loads(m.get_data())["i"] for m in pub.sow("orders", timeout=5000)
                   if m.get_command() == "sow"]
            assert sorted(ids) == list(range(refused[0]))  # every acked publish, nothing else

            subprocess.run(["mount", "-o", "remount,size=64m", str(small_fs)], check=True,
                           capture_output=True, timeout=10)
            assert wait_until(lambda: not srv.call(lambda: srv.server.sow_service.sow.full_stores()))
            for i in range(n, n + 100):
                pub.publish("orders", json.dumps({"i": i, "pad": pad}))
            pub.publish_flush(10_000)
            assert len(failed) == len(refused) and pub.get_unpersisted_count() == 0
            assert sow_count(srv.uri) == refused[0] + 100
        logs = [(r.levelname, r.name) for r in caplog.records if r.levelno >= logging.WARNING
                and r.name.startswith("amps_emulator.sow")]
        assert logs == [("WARNING", "amps_emulator.sow.lmdb"),  # a map that fits, at open
                        ("ERROR", "amps_emulator.sow"), ("WARNING", "amps_emulator.sow")]
        assert not any(r.exc_info for r in caplog.records)
    finally:
        pub.close()
        srv.stop()
    kept, _ = journal_ids(tmp_path / "journal")  # nothing refused was journalled
    assert kept == list(range(refused[0])) + list(range(n, n + 100))


# ---------------------------------------------------------------- item 8: damaged or missing files
def sow_xml(data_dir, *, journal: bool) -> str:
    tl = (f"<TransactionLog><JournalDirectory>{data_dir}/journal</JournalDirectory>"
          "<Topic><Name>orders</Name><MessageType>json</MessageType></Topic></TransactionLog>"
          if journal else "")
    return f"""<AMPSConfig><Name>sow</Name>
  <Transports><Transport><Name>json-tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
    <MessageType>json</MessageType><Protocol>amps</Protocol></Transport></Transports>
  <SOW><Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
    <FileName>{data_dir}/sow/%n.sow</FileName></Topic></SOW>{tl}
</AMPSConfig>"""


def fill_sow(data_dir, journal: bool, n: int = 2000) -> str:
    """A SOW topic with ``n`` records, written through a server that then stops; returns the
    path of the LMDB environment."""
    import AMPS

    srv = start_server(sow_xml(data_dir, journal=journal))
    try:
        c = AMPS.Client("filler")
        c.connect(srv.uri)
        c.logon(5000)
        for i in range(n):
            c.publish("orders", json.dumps({"id": i, "v": "x" * 100}))
        c.flush(5000)
        c.close()
    finally:
        srv.stop()
    return str(data_dir / "sow" / "amps-sow.lmdb")


def sow_count(uri: str) -> int:
    import AMPS

    c = AMPS.Client("counter")
    c.connect(uri)
    c.logon(5000)
    try:
        return sum(1 for m in c.sow("orders", timeout=5000) if m.get_command() == "sow")
    finally:
        c.close()


@pytest.mark.parametrize("cut_to", [20_000, 0])  # garbled B-tree pages / an emptied file
def test_a_damaged_sow_file_is_rebuilt_from_the_log_that_covers_it(tmp_path, cut_to):
    env = fill_sow(tmp_path, journal=True)
    os.truncate(os.path.join(env, "data.mdb"), cut_to)
    srv = start_server(sow_xml(tmp_path, journal=True))
    try:
        assert sow_count(srv.uri) == 2000
    finally:
        srv.stop()
    assert [n for n in os.listdir(tmp_path / "sow") if ".damaged-" in n]  # kept for inspection


def test_a_damaged_sow_file_the_log_cannot_rebuild_is_refused_with_its_path(tmp_path):
    from tests.support.procserver import ProcServer

    env = fill_sow(tmp_path, journal=False)
    data = os.path.join(env, "data.mdb")
    os.truncate(data, 20_000)
    before = open(data, "rb").read()
    cfg = tmp_path / "amps.xml"
    cfg.write_text(sow_xml(tmp_path, journal=False))
    done = ProcServer(tmp_path, cfg).run_to_exit()
    assert done.returncode == 1
    assert env in done.stderr and "damaged" in done.stderr and "move it aside" in done.stderr
    assert "Traceback" not in done.stderr
    assert open(data, "rb").read(20_000) == before  # left in place, as it was


def test_a_missing_sow_file_the_log_cannot_rebuild_warns_and_strict_refuses(tmp_path):
    import shutil

    from tests.support.procserver import ProcServer

    env = fill_sow(tmp_path, journal=False, n=10)
    shutil.rmtree(env)
    cfg = tmp_path / "amps.xml"
    cfg.write_text(sow_xml(tmp_path, journal=False))
    done = ProcServer(tmp_path, cfg, "--strict-recovery").run_to_exit()
    assert done.returncode == 1 and env in done.stderr and "missing" in done.stderr
    assert "Traceback" not in done.stderr
    srv = ProcServer(tmp_path, cfg).start()  # without the flag: starts, loudly
    try:
        assert sow_count(srv.uri) == 0
    finally:
        srv.stop()
    log_text = srv.stderr_path.read_text()
    assert "ERROR" in log_text and env in log_text and "missing" in log_text
