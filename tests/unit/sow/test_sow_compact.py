"""Compaction of a SOW LMDB environment (``sow.storage.lmdb_compact``): the file shrinks, every
database (records, indexes, expiry rows, metadata with the last-applied positions) is the same
byte for byte, writes committed while the copy is made are kept, and a crash at any step of
the swap leaves one complete environment, chosen at the next open."""

from __future__ import annotations

import json
import os
import threading

import lmdb
import pytest

from amps_emulator.sow import Sow, SowStore, TopicSpec
from amps_emulator.sow.storage import lmdb_compact
from amps_emulator.sow.storage.lmdb_compact import Compaction, MapMoved, SimulatedCrash
from amps_emulator.sow.storage.lmdb_swap import NEW, OLD, TMP
from amps_emulator.sow.testing import FakeClock, js

N = 6000


def _spec(name: str = "orders") -> TopicSpec:
    return TopicSpec(name, keys=("/id",), hash_indexes=(("/grp",),), indexes=("/n",),
                     expiration=3600.0)


def _open(path: str, names=("orders", "fills")) -> SowStore:
    st = SowStore(path, sync=False, clock=FakeClock(), map_size=1 << 20)
    for n in names:
        st.open_topic(_spec(n))
    return st


def _fill(st: SowStore, n: int = N, keep_every: int = 20) -> None:
    """``n`` records in each topic, then all but one in ``keep_every`` deleted."""
    pad = "x" * 200
    for name, t in st.topics.items():
        for i in range(n):
            t.publish(js({"id": i, "grp": i % 7, "n": i * 3, "pad": pad, "t": name}),
                      position=i + 1)
            if i % 1000 == 999:
                st.commit()
        st.commit()
        t.delete_by_filter(f"/id % {keep_every} != 0", position=n + 1)
        st.commit()


def _dump(env) -> dict[bytes, list[tuple[bytes, bytes]]]:
    """Every named database of the environment, every row."""
    env.commit()
    raw = env.env
    out = {}
    with raw.begin() as txn:
        names = [bytes(k) for k, _ in txn.cursor()]
        for name in names:
            db = raw.open_db(name, txn=txn, create=False)
            out[name] = [(bytes(k), bytes(v)) for k, v in txn.cursor(db)]
    return out


def _data_size(path: str) -> int:
    return os.path.getsize(os.path.join(path, "data.mdb"))


def _state(path: str) -> dict:
    with open(os.path.join(path, "emulator-state.json")) as f:
        return json.load(f)


def _compact(st: SowStore, **kw):
    job = Compaction(st.env, **kw)
    job.start()
    job.copy()
    job.catch_up()
    return job, job.finish()


def test_compaction_shrinks_the_file_and_keeps_every_row(tmp_path):
    path = str(tmp_path / "amps-sow.lmdb")
    st = _open(path)
    _fill(st)
    before, size_before, map_before = _dump(st.env), _data_size(path), st.env.map_size
    positions = {n: t.applied_position for n, t in st.topics.items()}
    job, done = _compact(st)
    assert done is not None and done.file_before == size_before
    assert done.file_after == _data_size(path) < size_before // 2
    assert done.used_after < done.used_before
    assert st.env.map_size < map_before and st.env.map_size == _data_size(path)  # resized
    assert _dump(st.env) == before  # records, indexes, expiry rows, metadata
    for name, t in st.topics.items():
        assert t.applied_position == positions[name]
        assert t.count() == N // 20
        # the indexes and the records read through the new handles
        assert sorted(json.loads(r.data)["id"] for r in t.query("/grp = 3").records) == \
            [i for i in range(0, N, 20) if i % 7 == 3]
        assert [json.loads(r.data)["n"] for r in t.query("/n > 17900").records] == [17940]
        t.publish(js({"id": 1, "grp": 1, "n": 3}), position=N + 2)  # writable
    st.commit()
    assert not any(os.path.exists(path + s) for s in (TMP, NEW, OLD))
    assert _state(path)["clean"] is False  # open
    st.close()
    assert _state(path)["clean"] is True
    st = _open(path)  # a restart reads the compacted environment
    assert st.topic("orders").count() == N // 20 + 1
    st.close()


def test_the_copy_packs_the_pages_deletes_left_mostly_empty(tmp_path):
    """After scattered deletes (1 row in 20 left) LMDB's compacting copy alone keeps each
    page as it was, about 4.7x the bytes of the rows left; the rewrite fills its pages."""
    path = str(tmp_path / "amps-sow.lmdb")
    st = _open(path)
    _fill(st)
    live = sum(len(k) + len(v) for rows in _dump(st.env).values() for k, v in rows)
    _job, done = _compact(st)
    assert done is not None and done.used_after <= 2 * live
    st.close()


@pytest.mark.parametrize("dupsort", [False, True])
def test_the_rewrite_grows_its_map_and_keeps_every_row(tmp_path, monkeypatch, dupsort):
    """Rows written again into a map too small for them: the map grows, the transaction that
    found it full is written again, and every row (and a database's flags) is kept."""
    monkeypatch.setattr(lmdb_compact, "REWRITE_ROWS", 300)
    src = lmdb.open(str(tmp_path / "src"), map_size=64 << 20, max_dbs=8)
    db = src.open_db(b"t:s", dupsort=dupsort)
    src.open_db(b"t:m")  # (an empty database is kept too)
    rows = [(b"%06d" % (i // 3 if dupsort else i), b"v%05d" % i + b"x" * 300) for i in range(6000)]
    with src.begin(write=True) as txn:
        for k, v in rows:
            txn.put(k, v, db=db, dupdata=dupsort)
    src.close()
    dst = lmdb.open(str(tmp_path / "dst"), map_size=256 << 10, max_dbs=8)
    src = lmdb.open(str(tmp_path / "src"), readonly=True, lock=False, max_dbs=8)
    with src.begin(buffers=True) as rtxn:
        for name in (b"t:s", b"t:m"):
            sdb = src.open_db(name, txn=rtxn, create=False)
            lmdb_compact._rewrite_db(dst, name, sdb.flags(), rtxn.cursor(sdb))
    src.close()
    assert dst.info()["map_size"] > 256 << 10
    with dst.begin() as txn:
        got = dst.open_db(b"t:s", txn=txn, create=False)
        assert got.flags()["dupsort"] is dupsort
        assert [(bytes(k), bytes(v)) for k, v in txn.cursor(got)] == rows
        assert list(txn.cursor(dst.open_db(b"t:m", txn=txn, create=False))) == []
    dst.close()


def test_writes_committed_during_the_copy_are_kept(tmp_path):
    """Batches committed between the copy's read transaction and the swap (before the copy,
    while it runs in a thread, between catch-ups, and one still pending at the swap) are in
    the compacted environment, including databases created meanwhile (a new topic)."""
    path = str(tmp_path / "amps-sow.lmdb")
    st = _open(path)
    _fill(st, keep_every=10)
    orders = st.topic("orders")
    job = Compaction(st.env)
    job.start()
    orders.publish(js({"id": -1, "grp": 9, "n": -3}), position=N + 2)
    st.commit()
    worker = threading.Thread(target=job.copy)
    worker.start()
    i = 0
    while worker.is_alive() or i < 50:  # commits while the copy runs (and after)
        orders.publish(js({"id": N + i, "grp": 9, "n": i}), position=N + 3 + i)
        orders.delete_by_keys([orders.key_for({"id": i * 10})], position=N + 3 + i)
        st.commit()
        i += 1
    worker.join()
    job.catch_up()
    late = st.open_topic(_spec("late"))  # a database created after the copy
    late.publish(js({"id": 5, "grp": 1, "n": 1}), position=1)
    st.commit()
    orders.publish(js({"id": -2, "grp": 9, "n": -6}), position=N + 1000)  # pending
    want = _dump(st.env)
    assert job.finish() is not None
    assert _dump(st.env) == want
    assert orders.get(orders.key_for({"id": -2})) is not None
    assert orders.get(orders.key_for({"id": 0})) is None
    assert orders.applied_position == N + 1000
    assert late.count() == 1
    st.close()


class _HeldCopy:
    """The environment, whose copy says when it holds the map lock and has begun."""

    def __init__(self, env) -> None:
        self._env = env
        self.started = threading.Event()

    def __getattr__(self, name):
        return getattr(self._env, name)

    def copy(self, *args, **kw):
        self.started.set()
        return self._env.copy(*args, **kw)


def test_a_map_growth_during_the_copy_waits_for_it(tmp_path):
    """A batch that fills the map while the copy runs grows it once the copy is over (the
    copy reads the map, and LMDB's binding ends every transaction at a resize): nothing is
    lost, the copy is good."""
    path = str(tmp_path / "amps-sow.lmdb")
    st = _open(path, names=("orders",))
    _fill(st, n=2000, keep_every=2)
    orders = st.topic("orders")
    held = _HeldCopy(st.env.env)
    st.env.env = held
    job = Compaction(st.env)
    job.start()
    grows = st.env.grows
    worker = threading.Thread(target=job.copy)
    worker.start()
    assert held.started.wait(10)  # the copy holds the lock
    pad = "y" * 4000
    for i in range(st.env.map_size // 4000 + 10):  # more than the map holds: it must grow
        orders.publish(js({"id": 10_000 + i, "grp": 0, "n": i, "pad": pad}), position=3000 + i)
    st.commit()
    worker.join()
    assert job.error is None and st.env.grows > grows
    st.env.env = held._env
    want = _dump(st.env)
    assert job.finish() is not None
    assert _dump(st.env) == want
    st.close()


def test_a_map_growth_before_the_copy_makes_it_stale(tmp_path):
    path = str(tmp_path / "amps-sow.lmdb")
    st = _open(path, names=("orders",))
    _fill(st, n=500)
    job = Compaction(st.env)
    job.start()
    pad = "y" * 4000
    for i in range(st.env.map_size // 4000 + 10):
        st.topic("orders").publish(js({"id": 10_000 + i, "pad": pad}), position=600 + i)
    st.commit()
    with pytest.raises(MapMoved):  # (made again, unlike any other error of the copy)
        job.copy()
    want = _dump(st.env)
    job.abandon()
    assert _dump(st.env) == want and not os.path.exists(path + TMP)
    st.close()


def test_a_log_past_its_limit_leaves_the_environment_as_it_was(tmp_path):
    path = str(tmp_path / "amps-sow.lmdb")
    st = _open(path, names=("orders",))
    _fill(st, n=1000)
    size = _data_size(path)
    job = Compaction(st.env, log_limit=1000)
    job.start()
    job.copy()
    st.topic("orders").publish(js({"id": 1, "grp": 1, "n": 1, "pad": "z" * 2000}), position=5000)
    st.commit()
    assert job.stale
    want = _dump(st.env)
    assert job.finish() is None
    assert _data_size(path) == size and _dump(st.env) == want
    assert st.env.log is None and not st.env.copying
    assert not any(os.path.exists(path + s) for s in (TMP, NEW, OLD))
    _, done = _compact(st)  # a later one goes through
    assert done is not None and _dump(st.env) == want
    st.close()


@pytest.mark.parametrize("point, new_used", [("copied", False), ("moved-out", False),
                                             ("swapped", True)])
def test_a_crash_during_the_swap_leaves_one_complete_environment(tmp_path, point, new_used):
    """Stopped where a crash would stop it: before the swap the old environment is the one
    opened next, after it the compacted one; either holds every committed write. The
    ``Sow`` facade does not take the moment the directory is renamed for a lost file."""
    root = tmp_path / "sow"
    path = str(root / "amps-sow.lmdb")
    specs = [dataclass_spec(n, str(root)) for n in ("orders", "fills")]

    def missing(p, names):
        raise AssertionError(f"{p} taken for missing")

    sow = Sow(specs, default_dir=str(root), sync=False, clock=FakeClock(), on_missing=missing)
    st = sow.stores[path]
    _fill(st)
    want, size = _dump(st.env), _data_size(path)
    job = Compaction(st.env, crash_at=point)
    job.start()
    job.copy()
    with pytest.raises(SimulatedCrash):
        job.finish()
    # the copy is flushed and marked clean; the old one (sync off) was closed unflushed
    assert _state(path if point == "swapped" else path + NEW)["clean"] is True
    assert _state(path if point == "copied" else path + OLD)["clean"] is False
    sow = Sow(specs, default_dir=str(root), sync=False, clock=FakeClock(), on_missing=missing)
    st = sow.stores[path]
    assert not any(os.path.exists(path + s) for s in (TMP, NEW, OLD))
    assert (_data_size(path) < size // 2) is new_used
    assert _dump(st.env) == want
    assert sow.topic("orders").count() == N // 20
    sow.close()


def test_an_incomplete_copy_is_thrown_away_at_open(tmp_path):
    path = str(tmp_path / "amps-sow.lmdb")
    st = _open(path, names=("orders",))
    _fill(st, n=500)
    want = _dump(st.env)
    job = Compaction(st.env)
    job.start()  # the copy never made: a crash before it
    st.close()
    assert os.path.isdir(path + TMP)
    st = _open(path, names=("orders",))
    assert not os.path.exists(path + TMP)
    assert _dump(st.env) == want
    st.close()


def test_a_second_compaction_of_the_same_environment_is_refused(tmp_path):
    path = str(tmp_path / "e")
    st = _open(path, names=("orders",))
    _fill(st, n=500)
    job = Compaction(st.env)
    job.start()
    with pytest.raises(RuntimeError):
        Compaction(st.env).start()
    job.abandon()  # as if it never began
    assert st.env.log is None and not st.env.copying and not os.path.exists(path + TMP)
    _, done = _compact(st)
    assert done is not None
    st.close()


def dataclass_spec(name: str, root: str) -> TopicSpec:
    import dataclasses
    return dataclasses.replace(_spec(name), file_name=os.path.join(root, "%n.sow"))
