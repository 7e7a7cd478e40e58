"""The group commit (issue 19: the persisted-ack latency under load). Its worker syncs again by
itself while the loop is busy: what the loop wrote during one fdatasync is synced by the next
one straight away, not after a round trip through the loop, which under load waits for the
loop's current pass. With the compiled extension the syncs run on its own thread
(``_speedups.Syncer``; its failures: test_disk_faults.py)."""

from __future__ import annotations

import json
import threading

import pytest

from amps_emulator.journal.segment import FileOps
from amps_emulator.server.services import txlog as txlog_module
from tests.integration.journal.test_disk_faults import journal_ids, txlog_xml, wait_until
from tests.support.clients import store_client
from tests.support.servers import start_server, turn_held


class GatedSync(FileOps):
    """fdatasync that holds the first call until ``release`` and counts the calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.first_entered = threading.Event()
        self.release = threading.Event()
        self.second_entered = threading.Event()

    def fdatasync(self, fd: int) -> None:
        self.calls += 1
        if self.calls == 1:
            self.first_entered.set()
            assert self.release.wait(20)
        elif self.calls == 2:
            self.second_entered.set()
        super().fdatasync(fd)


def first_publish_in_sync(srv, gate: GatedSync, name: str):
    """A client with a publish store (``name``) publishes once to ``srv``, whose journal
    syncs through ``gate``; returns (the client, the journal) once that publish is written
    and its sync is held in fdatasync."""
    pub = store_client(srv.uri, name)
    journal = srv.call(lambda: srv.server.txlog.journal)
    srv.call(lambda: setattr(journal, "file_ops", gate))
    pub.publish("orders", json.dumps({"i": 1}))
    assert gate.first_entered.wait(10)
    return pub, journal


def test_the_next_sync_starts_while_the_loop_is_busy(tmp_path) -> None:
    srv = start_server(txlog_xml(tmp_path))
    gate = GatedSync()
    try:
        pub, journal = first_publish_in_sync(srv, gate, "sync-pub")
        first = srv.call(lambda: journal.written_position)
        pub.publish("orders", json.dumps({"i": 2}))
        assert wait_until(lambda: srv.call(lambda: journal.written_position) > first)
        assert pub.get_unpersisted_count() == 2

        def busy_loop() -> bool:
            """On the loop, which it keeps busy: let the first sync finish; True once the
            second has begun (False after 5 s)."""
            gate.release.set()
            return gate.second_entered.wait(5)

        assert srv.call(busy_loop, timeout=20)
        pub.publish_flush(10000)
        assert pub.get_unpersisted_count() == 0
        pub.close()
    finally:
        gate.release.set()
        srv.stop()


def test_an_ack_a_sync_releases_between_turns_goes_out_before_the_turn_ends(tmp_path) -> None:
    """The loop hears that a sync ended while the end of its turn is far away (a long pass of
    another connection's frames, here: never, until the test lets it): the persisted ack it
    releases is written at once, not held for the end of the turn."""
    srv = start_server(txlog_xml(tmp_path))
    gate = GatedSync()
    try:
        pub, _ = first_publish_in_sync(srv, gate, "between-pub")
        with turn_held(srv):
            gate.release.set()
            assert wait_until(lambda: pub.get_unpersisted_count() == 0, 5)
    finally:
        gate.release.set()
        srv.stop()


@pytest.mark.skipif(txlog_module._Syncer is None, reason="the compiled extension is not built")
def test_the_compiled_sync_thread_runs_the_group_commit(tmp_path) -> None:
    """With the plain file layer, the group fsync runs on ``_speedups.Syncer``, not in the
    worker: the persisted acks come, and the journal holds the messages after a restart."""
    srv = start_server(txlog_xml(tmp_path))
    try:
        pub = store_client(srv.uri, "thread-pub")
        for i in range(200):
            pub.publish("orders", json.dumps({"i": i}))
        pub.publish_flush(10000)
        assert pub.get_unpersisted_count() == 0
        assert srv.call(lambda: srv.server.txlog._syncer) is not None
        pub.close()
    finally:
        srv.stop()
    assert journal_ids(tmp_path / "journal")[0] == list(range(200))
