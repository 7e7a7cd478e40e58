"""The two halves of ``FileJournal.sync`` (``begin_sync`` .. ``end_sync``), for a caller that
runs the file syncs itself (issue 19: the server's compiled sync thread)."""

from __future__ import annotations

import errno
import threading

import pytest

from amps_emulator.journal import FileJournal, JournalSyncError


def pub(j: FileJournal, i: int) -> int:
    return j.append(topic="t", client_name="c", client_seq=i, body=b'{"i":%d}' % i + b" " * 200).position


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
