"""``Topic.upsert_run`` (keyed publishes nobody reads) against ``Topic.upsert``.

The same messages go to two topics of the same definition, one through ``upsert`` (the
general path, which builds the replaced record and a result) and one through
``upsert_run``, one message or a run of them to a call; afterwards both must hold the same
records, index entries, counts and applied position, answer index queries alike and sweep
the same expired records. Both stores (LMDB and memory).
"""

from __future__ import annotations

import msgspec
import pytest

from amps_emulator.sow.history import HistorySpec
from amps_emulator.sow.storage.lmdb_backend import LmdbBackend
from amps_emulator.sow.store import SowStore
from amps_emulator.sow.testing import FakeClock, StoreFactory, js
from amps_emulator.sow.topic import Topic


@pytest.fixture(params=["persistent", "transient"])
def pair(request, tmp_path):
    clock = FakeClock()
    a = StoreFactory(request.param, tmp_path / "a", clock)
    b = StoreFactory(request.param, tmp_path / "b", clock)
    yield a, b
    a.close()
    b.close()


def _state(sf: StoreFactory, t: Topic) -> dict:
    """What the topic holds, as a reader sees it, and every table as stored: the LMDB
    databases byte for byte (records, index and expiry rows, metadata), or the memory
    backend's records (with their insertion order) and tables."""
    assert sf.store is not None
    sf.store.commit()
    recs = sorted((r.sow_key, r.data, r.bookmark, r.timestamp, r.expiration, r.position)
                  for r in t.records())
    out: dict = {"records": recs, "inserts": t.insert_count, "updates": t.update_count,
                 "indexes": t.index_info(), "applied": t.applied_position}
    b = t._b
    if isinstance(b, LmdbBackend):
        dbs = {"r": b.rec_db, "m": b.meta_db, **{n: tb.db for n, tb in b._tables.items()}}
        with b.env.reading() as txn:
            for name, db in dbs.items():
                out[name] = [(bytes(k), bytes(v)) for k, v in txn.cursor(db)]
    else:
        out["seq"] = {k: r.seq for k, r in b.records.items()}
        for name, tb in b._tables.items():
            out[name] = {k: list(v) for k, v in tb._d.items()} if hasattr(tb, "_d") \
                else tb.range(None, None)
    return out


def _queries(t: Topic) -> list:
    out = []
    for flt in ("/id = 5", "/id = '5'", "/id = 7", "/sym = 'IBM'", "/px > 10", "/px < 10",
                "/id IN (1, 2, 3)"):
        q = t.query(flt)
        out.append((flt, sorted(r.sow_key for r in q.records)))
    return out


MESSAGES = [
    {"id": 1, "sym": "IBM", "px": 5},
    {"id": 2, "sym": "MSFT", "px": 12},
    {"id": 5, "sym": "IBM", "px": 20},
    {"id": 1, "sym": "ORCL", "px": 15},  # an update: other fields change
    {"id": "5", "sym": "IBM", "px": 1},  # the same SowKey, another type: other index tokens
    {"id": 5, "sym": "AAPL", "px": 30},  # and back
    {"id": 7},  # no indexed field but the key
    {"id": 2, "sym": "MSFT", "px": 12},  # the same body again
    {"sym": "NOKEY"},  # the empty-value key
    {"sym": "NOKEY2", "px": 3},
    [1, 2],  # not an object: keyed on empty values as well
    {"id": 3, "note": "é \u2603"},
]


@pytest.mark.parametrize("spec", [
    {},
    {"hash_indexes": (("/sym",),), "indexes": ("/px",)},
    {"keys": ("/id", "/sym")},
], ids=["key only", "hash and memo indexes", "composite key"])
def test_upsert_run_of_one_stores_what_upsert_stores(pair, spec) -> None:
    (sa, sb) = pair
    kw = {"keys": ("/id",), **spec}
    ta, tb = sa.topic("orders", **kw), sb.topic("orders", **kw)
    assert ta.plain_upserts and tb.plain_upserts
    now = sa.clock.t
    for pos, m in enumerate(MESSAGES, 1):
        body = js(m)
        doc = msgspec.json.decode(body)
        key = ta.key_for(doc)
        ta.upsert(key, body, doc, None, f"bm{pos}", pos, now, now + pos / 1000)
        tb.upsert_run([(doc, key)], [body], [f"bm{pos}"], [pos], [now + pos / 1000])
        if pos % 4 == 0:  # a commit now and then: reads of committed and pending records
            assert _state(sa, ta) == _state(sb, tb)
    assert _state(sa, ta) == _state(sb, tb)
    assert _queries(ta) == _queries(tb)
    assert ta.update_count > 0 and ta.insert_count > 0


@pytest.mark.parametrize("indexed", [True, False], ids=["indexes", "key only"])
@pytest.mark.parametrize("run", [2, 3, 5, 100])
def test_runs_store_what_upsert_stores_one_by_one(pair, run, indexed) -> None:
    """Runs cut at different places: a key inserted and updated in the same run (its index
    rows added before they are updated), a run of inserts only, then of updates only.  Key
    only: runs of whole-number keys skip reading the records they replace."""
    (sa, sb) = pair
    kw = {"keys": ("/id",), "hash_indexes": (("/sym",),), "indexes": ("/px",)} if indexed \
        else {"keys": ("/id",)}
    ta, tb = sa.topic("orders", **kw), sb.topic("orders", **kw)
    now = sa.clock.t
    messages = MESSAGES + [{"id": i, "sym": f"S{i % 3}", "px": i} for i in range(20, 40)] \
        + MESSAGES[::-1] + [{"id": i, "sym": f"S{i % 4}", "px": -i} for i in range(20, 40)]
    items = []
    for pos, m in enumerate(messages, 1):
        body = js(m)
        doc = msgspec.json.decode(body)
        key = ta.key_for(doc)
        ta.upsert(key, body, doc, None, f"bm{pos}", pos, now, now + pos / 1000)
        items.append(((doc, key), body, f"bm{pos}", pos, now + pos / 1000))
    for start in range(0, len(items), run):
        keyed, bodies, marks, positions, stamps = map(list, zip(*items[start:start + run], strict=True))
        tb.upsert_run(keyed, bodies, marks, positions, stamps)
    assert _state(sa, ta) == _state(sb, tb)
    assert _queries(ta) == _queries(tb)
    assert tb.insert_count == ta.insert_count > 20 and tb.update_count == ta.update_count > 20


def test_a_run_with_a_replaced_expiring_record_in_its_middle(pair) -> None:
    (sa, sb) = pair
    ta = sa.topic("orders", keys=("/id",), expiration="enabled", indexes=("/px",))
    tb = sb.topic("orders", keys=("/id",), expiration="enabled", indexes=("/px",))
    for t in (ta, tb):
        t.publish(js({"id": 1, "px": 1}), expiration=10, position=1)  # expires
    sa.clock.advance(20)
    now = sa.clock.t
    run = [{"id": 3, "px": 3}, {"id": 1, "px": 11}, {"id": 4, "px": 4}, {"id": 3, "px": 33}]
    keyed, bodies = [], []
    for pos, m in enumerate(run, 2):
        body = js(m)
        doc = msgspec.json.decode(body)
        key = ta.key_for(doc)
        ta.upsert(key, body, doc, None, "", pos, now, now)
        keyed.append((doc, key))
        bodies.append(body)
    tb.upsert_run(keyed, bodies, [""] * 4, [2, 3, 4, 5], [now] * 4, now)
    assert _state(sa, ta) == _state(sb, tb)
    assert ta.next_expiration() == tb.next_expiration()
    assert [r.data for r in ta.sweep_expired()] == [r.data for r in tb.sweep_expired()]
    assert _queries(ta) == _queries(tb)


def test_a_replaced_record_with_an_expiration_is_handled_as_upsert_does(pair) -> None:
    (sa, sb) = pair
    ta = sa.topic("orders", keys=("/id",), expiration="enabled", indexes=("/px",))
    tb = sb.topic("orders", keys=("/id",), expiration="enabled", indexes=("/px",))
    assert ta.plain_upserts and tb.plain_upserts  # enabled, but no default lifetime
    for t in (ta, tb):
        t.publish(js({"id": 1, "px": 1}), expiration=10, position=1)  # expires
        t.publish(js({"id": 2, "px": 2}), expiration=1000, position=2)  # does not
    sa.clock.advance(20)  # id 1 is due, not swept
    now = sa.clock.t
    for pos, m in enumerate([{"id": 1, "px": 11}, {"id": 2, "px": 12}], 3):
        body = js(m)
        doc = msgspec.json.decode(body)
        key = ta.key_for(doc)
        ta.upsert(key, body, doc, None, "", pos, now, now)
        tb.upsert_run([(doc, key)], [body], [""], [pos], [now], now)
    assert _state(sa, ta) == _state(sb, tb)
    assert ta.next_expiration() == tb.next_expiration() == 0.0  # the replaced expired record
    swept_a, swept_b = ta.sweep_expired(), tb.sweep_expired()
    assert [r.data for r in swept_a] == [r.data for r in swept_b] == [js({"id": 1, "px": 1})]
    assert ta.next_expiration() is None and tb.next_expiration() is None  # no deadline left
    assert [r.sow_key for r in ta.query("/px > 10").records] == \
        [r.sow_key for r in tb.query("/px > 10").records]


def test_plain_runs_see_an_expiring_record_stored_removed_or_restored_after_them(pair) -> None:
    """With no index, a plain run reads back what it replaces only while some stored record
    has an expiration, which the topic knows once looked up: storing an expiring record,
    removing one, and an aborted batch (which restores one) must each make the next run look
    again, or a replaced expiring record would leave its expiry row behind."""
    (sa, sb) = pair
    ta = sa.topic("orders", keys=("/id",), expiration="enabled")
    tb = sb.topic("orders", keys=("/id",), expiration="enabled")
    pos = 0

    def plain(m: dict) -> None:  # the reference by upsert, the topic under test by a run
        nonlocal pos
        pos += 1
        now = sa.clock.t
        body = js(m)
        doc = msgspec.json.decode(body)
        key = ta.key_for(doc)
        ta.upsert(key, body, doc, None, "", pos, now, now)
        tb.upsert_run([(doc, key)], [body], [""], [pos], [now], now)

    def expiring(m: dict) -> None:
        nonlocal pos
        pos += 1
        for t in (ta, tb):
            t.publish(js(m), expiration=10, position=pos)

    plain({"id": 1})  # nothing expires: known from now on
    expiring({"id": 2})
    plain({"id": 2, "v": 2})  # replaces the expiring record: its expiry row goes with it
    assert _state(sa, ta) == _state(sb, tb)
    assert tb.next_expiration() is None
    expiring({"id": 3})
    for s in (sa, sb):
        assert s.store is not None
        s.store.commit()
    sa.clock.advance(20)
    assert [r.sow_key for r in ta.sweep_expired()] == [r.sow_key for r in tb.sweep_expired()]
    plain({"id": 4})  # looked up again after the removal: nothing expires in this batch...
    if sa.persistent:
        for s in (sa, sb):
            assert isinstance(s.store, SowStore)
            s.store.abort()  # ...which is undone: record 3 and its expiry row are back
        assert tb.next_expiration() is not None
    plain({"id": 3, "v": 3})
    assert _state(sa, ta) == _state(sb, tb)
    assert ta.next_expiration() == tb.next_expiration()
    assert [r.sow_key for r in ta.sweep_expired()] == [r.sow_key for r in tb.sweep_expired()]
    assert tb.next_expiration() is None


def test_topics_that_need_more_than_the_record_are_not_plain(tmp_path) -> None:
    sf = StoreFactory("transient", tmp_path)
    try:
        assert sf.topic("a", keys=("/id",)).plain_upserts
        assert not sf.topic("b", keys=("/id",), expiration=30).plain_upserts  # a lifetime
        assert not sf.topic("c", keys=("/id",), history=HistorySpec(60.0, 1.0)).plain_upserts
        assert not sf.topic("d", keys=("/id",), message_type="nvfix").plain_upserts
    finally:
        sf.close()



def test_an_index_added_later_is_kept_by_upsert_run(pair) -> None:
    (sa, sb) = pair
    ta, tb = sa.topic("orders", keys=("/id",)), sb.topic("orders", keys=("/id",))
    now = sa.clock.t

    def both(pos: int, m: dict) -> None:
        body = js(m)
        doc = msgspec.json.decode(body)
        key = ta.key_for(doc)
        ta.upsert(key, body, doc, None, "", pos, now, now)
        tb.upsert_run([(doc, key)], [body], [""], [pos], [now])

    for pos in range(1, 20):
        both(pos, {"id": pos % 7, "px": pos})
    for t in (ta, tb):
        t.add_memo_index("/px")  # as a query's plan creates it (auto memo)
    for pos in range(20, 40):
        both(pos, {"id": pos % 9, "px": 100 - pos})
    assert _state(sa, ta) == _state(sb, tb)
    assert {i["kind"] for i in tb.index_info()} == {"hash", "memo"}
    assert _queries(ta) == _queries(tb)
    assert [r.sow_key for r in tb.query("/px > 65", plan="memo").records] == \
        [r.sow_key for r in tb.query("/px > 65", plan="scan").records] != []


def test_a_body_given_as_a_view_is_stored_as_bytes(pair) -> None:
    sa, _ = pair
    t = sa.topic("orders", keys=("/id",))
    buf = bytearray(js({"id": 1, "a": 1}))
    t.upsert_run([({"id": 1, "a": 1}, "k")], [memoryview(buf)], [""], [1], [1.0])
    buf[:] = js({"id": 2, "a": 2})  # the caller's buffer changes afterwards
    rec = t.get("k")
    assert rec is not None and rec.data == js({"id": 1, "a": 1}) and type(rec.data) is bytes


@pytest.mark.parametrize("kw", [
    {"keys": ("/id",), "hash_indexes": (("/sym",),)},
    {"keys": ("/id",)},
], ids=["an index reads the old records", "nothing reads them"])
def test_a_run_that_fills_the_map_grows_it_and_loses_nothing(tmp_path, kw) -> None:
    """The map fills in the middle of a run of updates: the batch is replayed into the grown
    map and the old value of the record whose write found it full is still the one from
    before the put (the record counts as updated, its old index rows are removed). Without
    an index the run's puts read nothing back (LmdbEnv.put_many): the same holds."""
    clock = FakeClock()
    a = StoreFactory("persistent", tmp_path / "a", clock)
    b = StoreFactory("persistent", tmp_path / "b", clock)
    a.open()
    b.open(map_size=1 << 20)
    try:
        ta, tb = a.topic("orders", **kw), b.topic("orders", **kw)
        now = clock.t
        pos = 0
        for pad in (10, 700):  # small inserts, then updates that fill the map
            keyed, bodies, marks, positions, stamps = [], [], [], [], []
            for i in range(1200):
                pos += 1
                body = js({"id": i, "sym": f"S{i % 7}-{pad}", "pad": "x" * pad})
                doc = msgspec.json.decode(body)
                key = ta.key_for(doc)
                ta.upsert(key, body, doc, None, f"bm{pos}", pos, now, now)
                keyed.append((doc, key))
                bodies.append(body)
                marks.append(f"bm{pos}")
                positions.append(pos)
                stamps.append(now)
            grows = tb._b.env.grows
            tb.upsert_run(keyed, bodies, marks, positions, stamps)
        assert tb._b.env.grows > grows  # the updates filled it
        assert _state(a, ta) == _state(b, tb)
        assert tb.insert_count == 1200 and tb.update_count == 1200
    finally:
        a.close()
        b.close()


def test_index_rows_that_fill_the_map_are_all_there_after_it_grows(tmp_path) -> None:
    from amps_emulator.sow.storage.lmdbenv import LmdbEnv

    env = LmdbEnv(str(tmp_path / "env"), map_size=1 << 20, sync=False)
    try:
        db = env.open_db("rows")
        keys = [b"%05d" % i + b"k" * 400 for i in range(4000)]  # about 1.6 MB of keys
        env.put_run(db, keys[:10])
        env.put_run(db, keys[10:])
        assert env.grows > 0
        env.commit()
        with env.reading() as txn:
            assert [bytes(k) for k, _ in txn.cursor(db)] == keys
    finally:
        env.close()


def test_a_replace_run_gives_each_put_the_value_before_it(tmp_path) -> None:
    """A key that comes twice in a run: its second put's old value is the first put's."""
    from amps_emulator.sow.storage.lmdbenv import LmdbEnv

    env = LmdbEnv(str(tmp_path / "env"), map_size=1 << 20, sync=False)
    try:
        db = env.open_db("recs")
        env.replace_run(db, [b"a"], [b"1"])
        olds = env.replace_run(db, [b"b", b"a", b"b", b"a"], [b"2", b"3", b"4", b"5"])
        assert [None if o is None else bytes(o) for o in olds] == [None, b"1", b"2", b"3"]
        env.commit()
        with env.reading() as txn:
            assert [(bytes(k), bytes(v)) for k, v in txn.cursor(db)] == [(b"a", b"5"),
                                                                           (b"b", b"4")]
    finally:
        env.close()


@pytest.mark.parametrize("method", ["replace_run", "put_many"])
def test_a_run_that_fails_keeps_the_ops_of_the_puts_tried(tmp_path, method) -> None:
    """A put LMDB refuses (a key too long) in the middle of a run (read back or not): the
    batch's replay log holds the puts up to and with that one, as when the run was put one
    by one."""
    import lmdb

    from amps_emulator.sow.storage.lmdbenv import LmdbEnv

    env = LmdbEnv(str(tmp_path / "env"), map_size=1 << 20, sync=False)
    try:
        db = env.open_db("recs")
        with pytest.raises(lmdb.Error):
            getattr(env, method)(db, [b"a", b"b" * 600, b"c"], [b"1", b"2", b"3"])
        assert [op[2] for op in env._ops] == [b"a", b"b" * 600]
    finally:
        env.close()


def test_a_run_of_inserts_that_fills_the_map_grows_it_and_loses_nothing(tmp_path) -> None:
    """A run of new keys is appended (LmdbEnv.put_many); the map fills in its middle: the
    batch is replayed into the grown map, every record is there, in insert order."""
    clock = FakeClock()
    sf = StoreFactory("persistent", tmp_path, clock)
    sf.open(map_size=1 << 20)
    try:
        t = sf.topic("orders", keys=("/id",))
        docs = [{"id": i, "pad": "x" * 700} for i in range(1500)]
        bodies = [js(d) for d in docs]
        keyed = [(d, t.key_for(d)) for d in docs]
        t.upsert_run(keyed, bodies, ["bm"] * 1500, list(range(1, 1501)), [clock.t] * 1500)
        assert t._b.env.grows > 0
        assert sf.store is not None
        sf.store.commit()
        assert [msgspec.json.decode(r.data)["id"] for r in t.query().records] == list(range(1500))
        assert t.insert_count == 1500 and t.count() == 1500
    finally:
        sf.close()


# -- a large body's stored value built ahead ---------------------------------------------

def test_values_are_built_ahead_only_for_persistent_topics_of_plain_upserts(sf) -> None:
    t = sf.topic("orders", keys=("/id",))
    assert t.values_ahead == sf.persistent


@pytest.mark.parametrize("guess", ["bm7", "bm77", ""], ids=["same length", "longer", "none"])
@pytest.mark.parametrize("first", [True, False], ids=["new key", "update"])
def test_a_value_built_ahead_stores_what_upsert_stores(pair, guess, first) -> None:
    """The value ``prepare_value`` built ahead (or dropped: a bookmark of another length)
    leaves the topic byte for byte as ``upsert`` does."""
    (sa, sb) = pair
    ta, tb = sa.topic("orders", keys=("/id",)), sb.topic("orders", keys=("/id",))
    now = sa.clock.t
    items = [] if first else [(js({"id": 9, "v": "old"}), "bm1", 1)]
    items.append((js({"id": 9, "blob": "y" * 3000}), "bm2", 2))
    for body, mark, pos in items:
        doc = msgspec.json.decode(body)
        key = ta.key_for(doc)
        ta.upsert(key, body, doc, None, mark, pos, now, now + pos / 1000)
        if pos == 2:
            tb.prepare_value(body, guess)
        tb.upsert_run([(doc, key)], [body], [mark], [pos], [now + pos / 1000])
    assert _state(sa, ta) == _state(sb, tb)


def test_a_value_built_ahead_is_dropped_by_another_store(tmp_path) -> None:
    sa, sb = StoreFactory("persistent", tmp_path / "a"), StoreFactory("persistent", tmp_path / "b")
    try:
        ta, tb = sa.topic("orders", keys=("/id",)), sb.topic("orders", keys=("/id",))
        big, other = js({"id": 1, "blob": "y" * 3000}), js({"id": 2, "v": 1})
        tb.prepare_value(big, "bm1")
        for t in (ta, tb):  # another body stored first: built as usual
            t.upsert_run([(msgspec.json.decode(other), t.key_for({"id": 2}))], [other],
                         ["bm1"], [1], [5.0])
            t.upsert_run([(msgspec.json.decode(big), t.key_for({"id": 1}))], [big],
                         ["bm2"], [2], [6.0])
        assert _state(sa, ta) == _state(sb, tb)
        assert tb._b._ready is None
        tb.prepare_value(big, "bm3")
        tb.drop_prepared()  # (the publish it was built for was refused)
        assert tb._b._ready is None
    finally:
        sa.close()
        sb.close()
