"""The group commit's compiled sync thread (issue 19, persisted-ack latency): ``_speedups.Syncer``
and the two halves of ``FileJournal.sync`` it runs between (``begin_sync`` .. ``end_sync``)."""

from __future__ import annotations

import errno
import os
import threading

import pytest

from amps_emulator import accel
from amps_emulator.journal import FileJournal, JournalSyncError

Syncer = None
if accel.COMPILED:
    from amps_emulator import _speedups

    Syncer = getattr(_speedups, "Syncer", None)

needs_syncer = pytest.mark.skipif(Syncer is None, reason="the compiled extension is not built")


def pub(j: FileJournal, i: int) -> int:
    return j.append(topic="t", client_name="c", client_seq=i, body=b'{"i":%d}' % i + b" " * 200).position


@pytest.fixture
def wake():
    r, w = os.pipe()
    os.set_blocking(r, False)
    yield r, w
    os.close(r)
    os.close(w)


@pytest.fixture
def syncer(wake):
    assert Syncer is not None
    s = Syncer(wake[1])
    yield s
    s.close()


@pytest.fixture
def data_fd(tmp_path):
    fd = os.open(tmp_path / "f", os.O_CREAT | os.O_WRONLY)
    os.write(fd, b"x" * 100)
    yield fd
    os.close(fd)


@needs_syncer
def test_a_sync_ends_with_its_target_and_wakes_the_loop(syncer, wake, data_fd, tmp_path):
    dir_fd = os.open(tmp_path, os.O_RDONLY)
    try:
        assert syncer.result() is None  # idle: nothing to take
        syncer.start([data_fd], dir_fd, 7)
        assert syncer.wait() == (0, 7)
        assert syncer.synced() == 7
        assert len(os.read(wake[0], 4096)) >= 8  # one wake-up per pass
        assert syncer.result() is None  # taken once
        syncer.start([data_fd, data_fd], -1, 9)
        assert syncer.wait() == (0, 9)
    finally:
        os.close(dir_fd)


@needs_syncer
def test_a_failed_sync_reports_its_errno_and_claims_nothing_more(syncer, data_fd):
    syncer.start([data_fd], -1, 3)
    assert syncer.wait() == (0, 3)
    r, w = os.pipe()  # fdatasync of a pipe fails (EINVAL)
    try:
        syncer.start([data_fd, r], -1, 10)
        err, synced = syncer.wait()
        assert err == errno.EINVAL and synced == 3
    finally:
        os.close(r)
        os.close(w)


@needs_syncer
def test_one_sync_at_a_time_until_its_result_is_taken(syncer, data_fd):
    syncer.start([data_fd], -1, 1)
    with pytest.raises(RuntimeError, match="running or its result was not taken"):
        syncer.start([data_fd], -1, 2)  # running, or ended and not taken: both refuse
    assert syncer.wait() == (0, 1)
    assert syncer.extend(5) is False  # ended: start another
    syncer.start([data_fd], -1, 2)
    assert syncer.wait() == (0, 2)


@needs_syncer
def test_an_extension_is_synced_when_taken_and_never_claimed_when_refused(syncer, data_fd):
    """``extend`` while a sync runs: True means the thread syncs again and ends at the new
    target; False means the sync had ended at its own. Either may happen (the thread does not
    wait for the test); what it reports must match what it said."""
    taken = refused = 0
    target = 0
    for _ in range(300):
        target += 2
        syncer.start([data_fd], -1, target - 1)
        if syncer.extend(target):
            taken += 1
            assert syncer.wait() == (0, target)
        else:
            refused += 1
            assert syncer.wait() == (0, target - 1)
    assert taken + refused == 300


@needs_syncer
def test_bad_arguments_are_refused(syncer, data_fd):
    with pytest.raises(ValueError, match="no file"):
        syncer.start([], -1, 1)
    with pytest.raises(ValueError, match="file descriptor"):
        syncer.start([-1], -1, 1)
    with pytest.raises(ValueError, match="file descriptor"):
        syncer.start([data_fd], -5, 1)
    with pytest.raises(TypeError):
        syncer.start(["3"], -1, 1)
    with pytest.raises(TypeError):
        syncer.start(data_fd, -1, 1)
    syncer.start([data_fd], -1, 1)  # none of those started anything
    assert syncer.wait() == (0, 1)


@needs_syncer
def test_close_lets_the_running_sync_end_and_then_refuses(wake, data_fd):
    assert Syncer is not None
    s = Syncer(wake[1])
    s.start([data_fd], -1, 4)
    s.close()
    assert s.result() == (0, 4)
    with pytest.raises(RuntimeError, match="closed"):
        s.start([data_fd], -1, 5)
    s.close()  # idempotent


# -- FileJournal's halves of sync --------------------------------------------------------------


def test_the_halves_of_sync_make_the_target_durable(tmp_path):
    j, _ = FileJournal.open(tmp_path)
    try:
        last = [pub(j, i) for i in range(5)][-1]
        j.flush()
        job = j.begin_sync()
        assert job is not None and job.target == last and job.fds
        assert j.durable_position < last
        assert j.extend_sync(job) is None  # nothing written since
        more = pub(j, 5)
        j.flush()
        assert j.extend_sync(job) == more
        j.note_synced(last)  # (a sync of job.fds ran)
        assert j.durable_position == last
        job.target = more
        assert j.end_sync(job, None) == more == j.durable_position
        assert j.sync() == more  # the lock was released
    finally:
        j.close()


def test_a_job_holds_every_other_sync_off_until_it_ends(tmp_path):
    j, _ = FileJournal.open(tmp_path)
    try:
        pub(j, 1)
        j.flush()
        job = j.begin_sync()
        assert job is not None
        done = threading.Event()

        def other() -> None:
            j.sync()
            done.set()

        t = threading.Thread(target=other)
        t.start()
        assert not done.wait(0.2)  # a bounded check that it is still held off
        j.end_sync(job, None)
        t.join(10)
        assert done.is_set()
    finally:
        j.close()


def test_no_extension_across_a_roll(tmp_path):
    j, _ = FileJournal.open(tmp_path, segment_size=4096)
    try:
        pub(j, 0)
        j.flush()
        job = j.begin_sync()
        assert job is not None
        for i in range(1, 40):  # past a roll: the new records are in another file
            pub(j, i)
        j.flush()
        assert j.extend_sync(job) is None
        j.end_sync(job, None)
        assert j.sync() == j.written_position  # the next sync covers them
    finally:
        j.close()


def test_a_failed_job_claims_nothing_and_the_unsynced_records_are_cut(tmp_path):
    j, _ = FileJournal.open(tmp_path)
    try:
        kept = pub(j, 0)
        j.flush()
        j.sync()
        pub(j, 1)
        j.flush()
        job = j.begin_sync()
        assert job is not None
        err = OSError(errno.EIO, "Input/output error")
        with pytest.raises(JournalSyncError):
            j.end_sync(job, err)
        assert j.durable_position == kept
        failure = j.discard_unsynced(err)  # the lock was released: the cut can run
        assert failure is not None and failure.first == kept + 1
        assert [r.client_seq for r in j.read()] == [0]
    finally:
        j.close()
