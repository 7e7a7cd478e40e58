"""Contract suite: every test runs against the persistent (LMDB) and the transient store."""

from __future__ import annotations

import msgspec
import pytest

from amps_emulator.protocol.reasons import (
    BAD_FILTER,
    BAD_SOW_KEY,
    INVALID_OPTIONS,
    INVALID_ORDER_BY,
    CommandError,
)
from amps_emulator.sow import amps_timestamp, generate_sow_key
from amps_emulator.sow.testing import docs, js


def keyed(sf, **kw):
    kw.setdefault("keys", ("/id",))
    return sf.topic("orders", **kw)


def load(t, rows):
    return [t.publish(js(r)) for r in rows]


# ---- upsert / keys --------------------------------------------------------------------------

def test_publish_inserts_then_replaces_whole_record(sf):
    t = keyed(sf)
    r1 = t.publish(js({"id": 1, "a": 1, "b": 2}))
    assert r1.inserted and r1.previous is None
    r2 = t.publish(js({"id": 1, "a": 5}))
    assert not r2.inserted
    assert r2.previous.data == js({"id": 1, "a": 1, "b": 2})
    assert r2.sow_key == r1.sow_key
    assert docs(t.query()) == [{"id": 1, "a": 5}]  # b is gone: whole record replaced
    assert t.count() == 1


def test_generated_key_is_decimal_and_depends_on_domain_and_values(sf):
    t = keyed(sf)
    k1 = t.publish(js({"id": 1})).sow_key
    k2 = t.publish(js({"id": 2})).sow_key
    assert k1.isdigit() and k2.isdigit() and k1 != k2
    assert k1 == generate_sow_key("orders", ["1"])
    other = sf.topic("other", keys=("/id",))
    assert other.publish(js({"id": 1})).sow_key != k1
    shared = sf.topic("shipping", keys=("/id",), key_domain="orders")
    assert shared.publish(js({"id": 1})).sow_key == k1


def test_composite_key(sf):
    t = sf.topic("bm", keys=("/clientName", "/subId"))
    a = t.publish(js({"clientName": "c", "subId": "s1", "bookmark": "1|1|"}))
    b = t.publish(js({"clientName": "c", "subId": "s2", "bookmark": "1|2|"}))
    c = t.publish(js({"clientName": "c", "subId": "s1", "bookmark": "1|3|"}))
    assert a.sow_key != b.sow_key and a.sow_key == c.sow_key
    assert t.count() == 2


def test_missing_key_field_is_an_empty_value(sf):
    # sow/keys.py: a Key field without a value counts as empty (60East's SowKey FAQ and its
    # NVFIX sample pair); a body that does not parse is still refused
    t = keyed(sf)
    a = t.publish(js({"other": 1}))
    b = t.publish(js({"id": None, "other": 2}))
    assert a.sow_key == b.sow_key == t.publish(js({"id": ""})).sow_key
    assert t.count() == 1 and t.get(a.sow_key).doc == {"id": ""}
    with pytest.raises(CommandError) as e:
        t.publish(b"not json")
    assert e.value.reason == BAD_SOW_KEY
    assert t.count() == 1


def test_explicit_keys_required_and_validated(sf):
    t = sf.topic("raw", hash_indexes=(("/s",),), indexes=("/s",))
    long_key = "k" * 255
    t.publish(js({"s": "é\x00" * 300, "n": 1}), sow_key=long_key)  # LMDB key limits hold
    assert t.query("/s LIKE 'é'").records[0].sow_key == long_key
    assert t.query("/s > 'a'").matches == 1
    t.delete_by_keys([long_key])
    r = t.publish(b"anything, even not json", sow_key="QUJD+/9=")
    assert r.sow_key == "QUJD+/9="
    assert t.get("QUJD+/9=").data == b"anything, even not json"
    for bad in (None, "", "has space", "bad!", "x" * 256):
        with pytest.raises(CommandError) as e:
            t.publish(b"{}", sow_key=bad)
        assert e.value.reason == BAD_SOW_KEY
    t.publish(js({"v": 2}), sow_key="QUJD+/9=")
    assert t.count() == 1 and t.get("QUJD+/9=").doc == {"v": 2}


def test_non_object_bodies_are_queried_like_filters_see_them(sf):
    t = sf.topic("raw", hash_indexes=(("/a",),))
    t.publish(js([{"a": 1}, {"a": 2}]), sow_key="ARR")
    t.publish(js({"a": 1}), sow_key="OBJ")
    t.publish(b"not json", sow_key="BAD")
    t.publish(js(5), sow_key="NUM")
    for plan in ("scan", "hash", "memo", "auto"):
        assert sorted(r.sow_key for r in t.query("/a = 1", plan=plan).records) == ["ARR", "OBJ"]
        assert t.query("/a > 1", plan=plan).matches == 1
    assert t.query("1=1").matches == 4


def test_generated_key_topic_ignores_publisher_key(sf):
    t = keyed(sf)
    r = t.publish(js({"id": 7}), sow_key="abc")
    assert r.sow_key == generate_sow_key("orders", ["7"])


def test_topic_implements_protocol(sf):
    from amps_emulator.sow import TopicStore
    assert isinstance(keyed(sf), TopicStore)


def test_record_metadata(sf):
    t = keyed(sf)
    sf.clock.t = 1_700_000_000.25
    r = t.publish(js({"id": 1}), bookmark="11|22|", position=42, headers={"x": "corr"})
    got = t.get(r.sow_key)
    assert got.bookmark == "11|22|" and got.position == 42 and got.headers == {"x": "corr"}
    assert got.timestamp == 1_700_000_000.25
    assert got.ts == "20231114T221320.250000Z" == amps_timestamp(got.timestamp)
    t.publish(js({"id": 2}), timestamp=5.0)
    assert t.query("/id = 2").records[0].timestamp == 5.0


# ---- delta ----------------------------------------------------------------------------------

def test_delta_publish_merges_recursively(sf):
    t = keyed(sf)
    t.publish(js({"id": 1, "a": 1, "n": {"x": 1, "y": 2}, "arr": [1, 2]}))
    r = t.delta_publish(js({"id": 1, "b": 2, "n": {"y": 3, "z": 4}, "arr": [9]}))
    want = {"id": 1, "a": 1, "n": {"x": 1, "y": 3, "z": 4}, "arr": [9], "b": 2}
    assert r.record.doc == want and msgspec.json.decode(r.record.data) == want
    assert r.delta == {"id": 1, "b": 2, "n": {"y": 3, "z": 4}, "arr": [9]}
    assert r.previous.doc["n"] == {"x": 1, "y": 2}
    assert docs(t.query()) == [want]


def test_delta_publish_without_record_stores_delta(sf):
    t = keyed(sf)
    r = t.delta_publish(js({"id": 3, "q": 1}))
    assert r.inserted and docs(t.query()) == [{"id": 3, "q": 1}]


def test_delta_publish_explicit_key(sf):
    t = sf.topic("raw")
    t.publish(js({"a": 1}), sow_key="K1")
    r = t.delta_publish(js({"b": 2}), sow_key="K1")
    assert r.record.doc == {"a": 1, "b": 2}


# ---- queries --------------------------------------------------------------------------------

ROWS = [
    {"id": 1, "sym": "IBM", "px": 10, "qty": 5},
    {"id": 2, "sym": "MSFT", "px": 30, "qty": 5},
    {"id": 3, "sym": "IBM", "px": 20, "qty": 1},
    {"id": 4, "sym": "AAPL", "px": 20, "qty": 9},
    {"id": 5, "sym": "ORCL"},
]


def test_query_counts(sf):
    t = keyed(sf)
    load(t, ROWS)
    q = t.query("/px >= 20", top_n=1, order_by="/id")
    assert q.records_returned == 1 and q.matches == 3 and q.topic_matches == 5
    assert docs(q)[0]["id"] == 2
    q = t.query()
    assert q.matches == q.topic_matches == q.records_returned == 5


def test_orderby_multi_field(sf):
    t = keyed(sf)
    load(t, ROWS)
    ids = lambda q: [d["id"] for d in docs(q)]  # noqa: E731
    assert ids(t.query(order_by="/px DESC, /qty ASC")) == [5, 2, 3, 4, 1]  # NULL first in DESC
    assert ids(t.query(order_by="/px asc, /qty desc")) == [1, 4, 3, 2, 5]
    assert ids(t.query(order_by="/sym, /id DESC")) == [4, 3, 1, 2, 5]
    assert ids(t.query("/sym = 'IBM'", order_by="/px DESC")) == [3, 1]


def test_orderby_nulls_last_asc_first_desc_and_types(sf):
    t = keyed(sf)
    load(t, [{"id": 1, "v": "b"}, {"id": 2, "v": 3}, {"id": 3}, {"id": 4, "v": 1.5},
             {"id": 5, "v": "a"}, {"id": 6, "v": None}])
    ids = lambda q: [d["id"] for d in docs(q)]  # noqa: E731
    assert ids(t.query(order_by="/v")) == [4, 2, 5, 1, 3, 6]
    assert ids(t.query(order_by="/v DESC")) == [3, 6, 1, 5, 2, 4]


@pytest.mark.parametrize("bad", ["px", "/px DOWN", "/px,", "/px DESC ASC", "1 + 2", ",/a"])
def test_invalid_orderby(sf, bad):
    t = keyed(sf)
    load(t, ROWS)
    with pytest.raises(CommandError) as e:
        t.query(order_by=bad)
    assert e.value.reason == INVALID_ORDER_BY


def test_top_n_and_skip_n(sf):
    t = keyed(sf)
    load(t, ROWS)
    q = t.query(order_by="/id", top_n=2, skip_n=1)
    assert [d["id"] for d in docs(q)] == [2, 3] and q.matches == 5
    assert [d["id"] for d in docs(t.query(order_by="/id", skip_n=3))] == [4, 5]
    assert t.query(order_by="/id", top_n=0).records == []


def test_select_projection(sf):
    t = sf.topic("/ADMIN/bookmark_store", keys=("/clientName", "/subId"))
    t.publish(js({"clientName": "tracked", "subId": "sA", "bookmark": "4444|7|",
                  "n": {"a": 1, "b": 2}}))
    q = t.query("/clientName='tracked'", select="[-/,+/subId,+/bookmark]")
    assert docs(q) == [{"subId": "sA", "bookmark": "4444|7|"}]
    assert docs(t.query(select="[-/n/a]"))[0]["n"] == {"b": 2}
    assert docs(t.query(select="[-/,+/n/b]")) == [{"n": {"b": 2}}]
    assert docs(t.query(select="[+/subId]"))[0]["clientName"] == "tracked"
    assert t.query().records[0].doc["n"] == {"a": 1, "b": 2}  # stored record untouched
    with pytest.raises(CommandError) as e:
        t.query(select="[subId]")
    assert e.value.reason == INVALID_OPTIONS


def test_sow_keys(sf):
    t = keyed(sf)
    res = load(t, ROWS)
    k1, k3 = res[0].sow_key, res[2].sow_key
    q = t.query(sow_keys=f"{k1}, {k3},nosuchkey")
    assert sorted(d["id"] for d in docs(q)) == [1, 3] and q.plan.startswith("sow_keys")
    q = t.query("/px > 15", sow_keys=[k1, k3])
    assert [d["id"] for d in docs(q)] == [3]
    assert t.query(sow_keys="").records == []


def test_bad_filter(sf):
    t = keyed(sf)
    with pytest.raises(CommandError) as e:
        t.query("/a = = 1")
    assert e.value.reason == BAD_FILTER


def test_filter_context_functions(sf):
    t = keyed(sf)
    res = load(t, ROWS)
    q = t.query(f"SOW_KEY() = '{res[1].sow_key}'")
    assert [d["id"] for d in docs(q)] == [2]
    assert t.query("TOPIC_NAME() = 'orders'").matches == 5


def test_reads_see_uncommitted_writes_and_commit(sf):
    t = keyed(sf)
    load(t, ROWS)
    assert sf.store.in_batch == sf.persistent
    assert t.query("/sym = 'IBM'").matches == 2
    sf.store.commit()
    assert not sf.store.in_batch
    t.publish(js({"id": 9, "sym": "IBM"}))
    assert t.query("/sym = 'IBM'").matches == 3


# ---- deletes --------------------------------------------------------------------------------

def test_delete_by_filter(sf):
    t = keyed(sf)
    load(t, ROWS)
    d = t.delete_by_filter("/sym = 'IBM'")
    assert d.records_deleted == 2 and d.matches == 2 and d.topic_matches == 5
    assert sorted(r.doc["id"] for r in d.records) == [1, 3]
    assert t.count() == 3 and t.query("/sym = 'IBM'").matches == 0
    d = t.delete_by_filter("1=1")
    assert d.records_deleted == 3 and d.topic_matches == 3 and t.count() == 0
    d = t.delete_by_filter("1=1")
    assert d.records_deleted == d.matches == d.topic_matches == 0


def test_delete_by_keys(sf):
    t = keyed(sf)
    res = load(t, ROWS)
    d = t.delete_by_keys(f"{res[0].sow_key},{res[4].sow_key},missing")
    assert d.records_deleted == 2 and d.topic_matches == 5
    assert t.count() == 3 and t.get(res[0].sow_key) is None


def test_delete_by_data(sf):
    t = keyed(sf)
    load(t, ROWS)
    d = t.delete_by_data(js({"id": 2, "whatever": 1}))
    assert [r.doc["id"] for r in d.records] == [2] and t.count() == 4
    assert t.delete_by_data(js({"id": 99})).records_deleted == 0
    raw = sf.topic("raw")
    raw.publish(b"x", sow_key="AA")
    assert raw.delete_by_data(b"x", sow_key="AA").records_deleted == 1
    # data without the Key field names the record a publish of it would update (the
    # empty-value key, sow/keys.py): none here; a body that does not parse names none
    assert t.delete_by_data(js({"nokey": 1})).records_deleted == 0
    with pytest.raises(CommandError):
        t.delete_by_data(b"not json")


def test_delete_removes_index_entries(sf):
    t = keyed(sf, hash_indexes=(("/sym",),), indexes=("/px",))
    load(t, ROWS)
    t.delete_by_filter("/px = 20")
    assert t.query("/sym = 'AAPL'").records == []
    assert t.query("/px > 15").matches == 1
    assert {i["kind"]: i["entries"] for i in t.index_info() if i["fields"] == ["/px"]} == \
        {"memo": 2}


# ---- expiration -----------------------------------------------------------------------------

def test_topic_expiration(sf):
    t = keyed(sf, expiration=30)
    load(t, ROWS[:3])
    sf.clock.advance(10)
    t.publish(js({"id": 4}))
    assert t.next_expiration() == pytest.approx(sf.clock.t - 10 + 30)
    sf.clock.advance(25)  # first three are due, not yet swept
    q = t.query()
    assert [d["id"] for d in docs(q)] == [4] and q.topic_matches == 1
    assert t.count() == 1 and t.query("/id = 1").records == []
    assert t.get(t.key_for({"id": 1})) is None
    d = t.delete_by_filter("1=1")  # expired records are not deleted as matches
    assert d.records_deleted == 1 and d.topic_matches == 1
    swept = t.sweep_expired()
    assert sorted(r.doc["id"] for r in swept) == [1, 2, 3]
    assert t.sweep_expired() == [] and t.next_expiration() is None


def test_per_message_expiration_overrides_topic(sf):
    t = keyed(sf, expiration=100)
    t.publish(js({"id": 1}), expiration=5)
    t.publish(js({"id": 2}), expiration=0)  # never
    t.publish(js({"id": 3}))  # topic default
    t.publish(js({"id": 4}), expiration="7")
    sf.clock.advance(6)
    assert sorted(d["id"] for d in docs(t.query())) == [2, 3, 4]
    sf.clock.advance(1000)
    assert [d["id"] for d in docs(t.query())] == [2]
    assert sorted(r.doc["id"] for r in t.sweep_expired()) == [1, 3, 4]


def test_expiration_enabled_means_per_message_only(sf):
    t = keyed(sf, expiration="enabled")
    t.publish(js({"id": 1}))
    t.publish(js({"id": 2}), expiration=1)
    sf.clock.advance(10_000)
    assert [d["id"] for d in docs(t.query())] == [1]
    assert [r.doc["id"] for r in t.sweep_expired()] == [2]


def test_expiration_disabled_keeps_deadline_but_never_expires(sf):
    t = keyed(sf)
    r = t.publish(js({"id": 1}), expiration=1)
    assert r.record.expiration == sf.clock.t + 1
    sf.clock.advance(100)
    assert t.count() == 1 and t.sweep_expired() == [] and t.next_expiration() is None


def test_update_resets_expiration(sf):
    t = keyed(sf, expiration=45)
    t.publish(js({"id": 1, "v": 1}))
    sf.clock.advance(15)
    t.delta_publish(js({"id": 1, "v": 2}))
    sf.clock.advance(40)  # 55 s after the first publish, 40 after the update
    assert docs(t.query()) == [{"id": 1, "v": 2}]
    assert t.sweep_expired() == []
    sf.clock.advance(6)
    assert [r.doc for r in t.sweep_expired()] == [{"id": 1, "v": 2}]


def test_publish_over_expired_record(sf):
    t = keyed(sf, expiration=10)
    t.publish(js({"id": 1, "v": "old"}))
    sf.clock.advance(11)
    r = t.publish(js({"id": 1, "v": "new"}))
    assert r.previous is None and r.inserted
    assert t.next_expiration() == 0.0
    assert [x.doc["v"] for x in t.sweep_expired()] == ["old"]
    assert docs(t.query()) == [{"id": 1, "v": "new"}]
    d = t.delta_publish(js({"id": 1, "w": 1}), now=sf.clock.t + 20)  # expired again: no merge
    assert d.record.doc == {"id": 1, "w": 1}


def test_sweep_limit(sf):
    t = keyed(sf, expiration=1)
    load(t, [{"id": i} for i in range(10)])
    sf.clock.advance(2)
    got = t.sweep_expired(limit=4)
    assert len(got) == 4
    assert t.count() == 0  # the six still due are hidden from counts until swept
    assert len(t.sweep_expired()) == 6 and t.sweep_expired() == []


# ---- indexes and planner ---------------------------------------------------------------------

def test_planner_uses_configured_indexes(sf, caplog):
    t = keyed(sf, hash_indexes=(("/sym", "/qty"),), indexes=("/px",))
    load(t, ROWS)
    caplog.set_level("DEBUG", logger="amps_emulator.sow.planner")
    q = t.query("/sym = 'IBM' AND /qty = 5")
    assert q.plan.startswith("hash[/sym,/qty]") and [d["id"] for d in docs(q)] == [1]
    assert "plan=hash[/sym,/qty]" in caplog.text
    q = t.query("/sym = 'IBM'")  # not the exact field set: no hash index
    assert not q.plan.startswith("hash") and q.matches == 2
    q = t.query("/id = 4")
    assert q.plan.startswith("hash[/id]") and q.matches == 1
    q = t.query("/px BETWEEN 15 AND 25")
    assert q.plan.startswith("memo[/px]") and q.matches == 2
    assert t.query("/px BETWEEN 15 AND 25", plan="scan").plan == "scan"


def test_memo_index_created_on_first_use_and_maintained(sf):
    t = keyed(sf)
    load(t, ROWS)
    q = t.query("/qty > 4")
    assert q.plan.startswith("memo[/qty] (created)") and q.matches == 3
    t.publish(js({"id": 6, "qty": 100}))
    t.publish(js({"id": 1, "qty": 0}))
    q = t.query("/qty > 4")
    assert q.plan.startswith("memo[/qty] (") and sorted(d["id"] for d in docs(q)) == [2, 4, 6]


def test_updates_maintain_indexes(sf):
    t = keyed(sf, hash_indexes=(("/sym",),), indexes=("/px",))
    load(t, ROWS)
    t.publish(js({"id": 5, "sym": "IBM", "px": 50}))  # into both indexes
    t.publish(js({"id": 1, "sym": "XYZ"}))  # out of /px, moved in /sym
    t.delta_publish(js({"id": 2, "px": 99}))  # delta changes an indexed field
    for flt, want in (("/sym = 'IBM'", [3, 5]), ("/sym = 'XYZ'", [1]), ("/px > 40", [2, 5]),
                      ("/px = 10", []), ("/px = 30", [])):
        for plan in ("auto", "hash", "memo"):
            assert sorted(d["id"] for d in docs(t.query(flt, plan=plan))) == want, (flt, plan)
    entries = {tuple(i["fields"]): i["entries"] for i in t.index_info()}
    # no stale rows: one /sym token per record with a sym, one /px entry per record with a px;
    # the Key index keeps no row for a whole-number key (its token names the SowKey)
    assert entries[("/sym",)] == 5 and entries[("/px",)] == 4 and entries[("/id",)] == 0


def test_auto_memo_off(sf):
    sf.open(auto_memo=False)
    t = keyed(sf)
    load(t, ROWS)
    assert t.query("/qty > 4").plan == "scan"
