"""Persistent topics keep their records in insert order (LMDB keys: insert sequence + SowKey).

The natural order (a query without ``orderby``) is first-insert order in both backends; the
SowKey -> LMDB key map lives in memory, so it must survive a restart and a discarded batch;
a SOW file of the earlier layout (keyed by SowKey) is moved over at open without losing a
record.
"""

from __future__ import annotations

import pytest

from amps_emulator.sow.record import Record, encode_record
from amps_emulator.sow.storage.lmdb_backend import LmdbBackend
from amps_emulator.sow.storage.lmdb_keys import db_base_name
from amps_emulator.sow.testing import FakeClock, StoreFactory, docs, js
from tests.unit.sow.test_sow_steps import run_with_writes


@pytest.fixture(params=["persistent", "transient"])
def clocked_sf(request, tmp_path):
    """``sf`` (conftest.py) on a fake clock."""
    f = StoreFactory(request.param, tmp_path, FakeClock())
    yield f
    f.close()


def _ids(t) -> list:
    return [d["id"] for d in docs(t.query())]


def test_natural_order_is_first_insert_order(clocked_sf) -> None:
    t = clocked_sf.topic(keys=("/id",))
    for i in (5, 3, 9, 1, 7):
        t.publish(js({"id": i, "v": 0}))
    t.publish(js({"id": 3, "v": 1}))  # an update keeps its place
    t.delete_by_data(js({"id": 9}))
    t.publish(js({"id": 9, "v": 2}))  # deleted and published again: last
    t.publish(js({"id": 4, "v": 0}))
    want = [5, 3, 1, 7, 9, 4]
    assert _ids(t) == want
    assert [d["id"] for d in docs(t.query("/v >= 0"))] == want
    if clocked_sf.persistent:
        clocked_sf.store.commit()
        clocked_sf.reopen()
        t = clocked_sf.topic(keys=("/id",))
        assert _ids(t) == want
        t.publish(js({"id": 0, "v": 0}))  # the sequence goes on after a restart
        t.publish(js({"id": 5, "v": 9}))
        assert _ids(t) == want + [0]
        assert t.count() == 7


def test_sow_keys_lookups_and_deletes_after_a_restart(tmp_path) -> None:
    clocked_sf = StoreFactory("persistent", tmp_path, FakeClock())
    t = clocked_sf.topic(keys=("/id",))
    keys = {i: t.publish(js({"id": i})).sow_key for i in range(50)}
    clocked_sf.reopen()
    t = clocked_sf.topic(keys=("/id",))
    got = t.query(sow_keys=[keys[7], keys[3], "123"])
    assert sorted(r.sow_key for r in got.records) == sorted([keys[3], keys[7]])
    assert docs(got) == [{"id": 3}, {"id": 7}]  # natural order
    assert len(t.delete_by_keys([keys[3]]).records) == 1
    assert t.count() == 49
    clocked_sf.close()


def test_a_discarded_batch_forgets_the_keys_it_gave(tmp_path) -> None:
    clocked_sf = StoreFactory("persistent", tmp_path, FakeClock())
    t = clocked_sf.topic(keys=("/id",))
    t.publish(js({"id": 1}))
    clocked_sf.store.commit()
    t.publish(js({"id": 2}))
    t.delete_by_data(js({"id": 1}))
    clocked_sf.store.abort()
    assert _ids(t) == [1]
    t.publish(js({"id": 2, "again": True}))
    t.publish(js({"id": 1, "v": 1}))
    clocked_sf.store.commit()
    assert docs(t.query()) == [{"id": 1, "v": 1}, {"id": 2, "again": True}]
    assert t.count() == 2
    clocked_sf.close()


def test_records_of_the_earlier_layout_are_moved_over(tmp_path) -> None:
    clocked_sf = StoreFactory("persistent", tmp_path, FakeClock())
    clocked_sf.open()
    env = clocked_sf.store.env
    base = db_base_name("orders")
    old = env.open_db(base + ":r")  # the earlier layout: SowKey -> record
    keys = [str(k) for k in (900, 12, 4711, 35)]
    for n, k in enumerate(keys):
        env.put(old, k.encode(), encode_record(Record(k, js({"n": n}), position=n + 1)))
    env.commit()
    t = clocked_sf.topic()  # no Key: the SowKeys are the stored ones
    assert isinstance(t._b, LmdbBackend)
    assert env.find_db(base + ":r") is None
    assert [r.sow_key for r in t.query().records] == sorted(keys, key=str.encode)
    assert t.query(sow_keys=["4711"]).records[0].data == js({"n": 2})
    t.publish(js({"n": 9}), sow_key="AAAA")
    assert [r.sow_key for r in t.query().records][-1] == "AAAA"
    assert "orders" in sf_names(clocked_sf)
    clocked_sf.reopen()
    assert clocked_sf.topic().count() == 5
    clocked_sf.close()


def sf_names(clocked_sf: StoreFactory) -> list[str]:
    assert clocked_sf.store is not None
    with clocked_sf.store.env.reading() as txn:
        return [bytes(k).decode()[len("sow:"):-2] for k, _ in txn.cursor()
                if bytes(k).startswith(b"sow:") and bytes(k).endswith(b":s")]


def test_a_snapshot_query_keeps_records_deleted_and_republished_after_it(tmp_path) -> None:
    clocked_sf = StoreFactory("persistent", tmp_path, FakeClock())
    t = clocked_sf.topic(keys=("/id",), hash_indexes=(("/g",),))
    for i in range(40):
        t.publish(js({"id": i, "g": i % 2}))
    clocked_sf.store.commit()
    want = docs(t.query("/g = 1"))
    steps = t.query_steps(filter="/g = 1", chunk=4)
    next(steps)

    def write(n: int) -> None:
        t.delete_by_data(js({"id": 2 * n + 1}))  # deleted, then published again: a new place
        t.publish(js({"id": 2 * n + 1, "g": 1, "new": True}))
        assert clocked_sf.store is not None
        clocked_sf.store.commit()

    got, n = run_with_writes(steps, write)
    assert n >= 2
    assert docs(got) == want
    clocked_sf.close()
