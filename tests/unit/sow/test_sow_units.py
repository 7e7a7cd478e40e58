"""Unit tests of the SOW building blocks (keys, records, orderby/select, delta, tables, LMDB env)."""

from __future__ import annotations

import os

import lmdb
import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amps_emulator.protocol.reasons import BAD_SOW_KEY, INVALID_OPTIONS, INVALID_ORDER_BY, CommandError
from amps_emulator.sow import (
    Sow,
    TopicSpec,
    amps_timestamp,
    apply_select,
    changed_fields,
    delta_message,
    env_directory,
    expand_file_name,
    generate_sow_key,
    merge,
    parse_order_by,
    parse_select,
    parse_sow_keys,
    validate_sow_key,
)
from amps_emulator.sow.expiry import deadline, deadline_of_key, expiry_bound, expiry_key, skey_of_key
from amps_emulator.sow.keys import KeyGenerator
from amps_emulator.sow.paths import PathError, parse_path
from amps_emulator.sow.record import Record, body_of, decode_record, encode_record
from amps_emulator.sow.storage.lmdb_tables import LmdbOrderedSet
from amps_emulator.sow.storage.lmdbenv import LmdbEnv
from amps_emulator.sow.storage.memory_tables import MemHashTable, SortedKeys
from amps_emulator.sow.testing import FakeClock

# ---- keys -----------------------------------------------------------------------------------

def test_generated_key_golden_value():
    # Stored SOW files depend on this value never changing.
    assert generate_sow_key("orders", ["1"]) == generate_sow_key("orders", ["1"])
    assert generate_sow_key("orders", ["1"]) == "6230933949360593558"
    assert generate_sow_key("orders", ["1", "2"]) != generate_sow_key("orders", ["12"])
    assert generate_sow_key("orders", ["1", "2"]) != generate_sow_key("orders1", ["2"])


def test_key_generator_values():
    kg = KeyGenerator("t", ["/a", "/n/b"])
    assert kg.values({"a": 5, "n": {"b": True}}) == ["5", "true"]
    assert kg({"a": 5, "n": {"b": True}}) == kg({"a": "5", "n": {"b": "true"}})
    assert kg({"a": 5.0, "n": {"b": 1}}) != kg({"a": 5, "n": {"b": 1}})
    assert kg.values({"a": [1, 2], "n": {"b": {"x": 1}}}) == ["[1,2]", '{"x":1}']
    # a Key field without a value is an empty one; partly or entirely missing alike
    assert kg.values({"a": 1}) == ["1", ""]
    assert kg.values({"a": None, "n": {"b": 1}}) == ["", "1"]
    assert kg({"a": 1}) == kg({"a": 1, "n": {"b": ""}}) == generate_sow_key("t", ["1", ""])
    assert kg([1]) == kg("x") == kg({}) == generate_sow_key("t", ["", ""])
    with pytest.raises(CommandError) as e:
        kg(None)  # the body did not parse
    assert e.value.reason == BAD_SOW_KEY
    with pytest.raises(ValueError):
        KeyGenerator("t", ["not a path"])


@given(st.one_of(st.integers(), st.floats(allow_nan=False), st.text(), st.booleans(),
                 st.lists(st.integers(), max_size=3)))
def test_single_key_fast_path_matches_general_digest(v):
    # the one-field fast path must hash exactly the bytes generate_sow_key hashes
    kg = KeyGenerator("orders", ["/id"])
    assert kg({"id": v, "x": 1}) == generate_sow_key("orders", kg.values({"id": v}))


def test_single_key_fast_path_keys_missing_values_as_empty():
    kg = KeyGenerator("orders", ["/id"])
    assert kg({}) == kg({"id": None}) == kg({"id": ""}) == generate_sow_key("orders", [""])
    with pytest.raises(CommandError) as e:
        kg(None)
    assert e.value.reason == BAD_SOW_KEY


def test_validate_and_parse_sow_keys():
    assert validate_sow_key("Ab09+/==") == "Ab09+/=="
    for bad in ("", "a b", "a,b", "ä", None, 5):
        with pytest.raises(CommandError):
            validate_sow_key(bad)
    assert parse_sow_keys(" a, b,,a ,c ") == ["a", "b", "c"]
    assert parse_sow_keys(["x", "x", " y"]) == ["x", "y"]
    assert parse_sow_keys(None) == [] and parse_sow_keys("") == []


# ---- records --------------------------------------------------------------------------------

@pytest.mark.parametrize("bm", ["", "1|2|", "x" * 300])
def test_record_roundtrip(bm):
    r = Record("K", b'{"a":1}', bookmark=bm, timestamp=12.5, expiration=99.25, position=7,
               headers={"x": "c"} if bm else None)
    v = encode_record(r)
    assert bytes(body_of(v)) == b'{"a":1}' and bytes(body_of(memoryview(v))) == b'{"a":1}'
    assert decode_record("K", v) == r
    assert decode_record("K", memoryview(v)).doc == {"a": 1}
    assert Record("K", b"not json").doc is None


def test_amps_timestamp():
    assert amps_timestamp(0) == "19700101T000000.000000Z"
    assert amps_timestamp(1_700_000_000.123456) == "20231114T221320.123456Z"


# ---- paths / spec ---------------------------------------------------------------------------

def test_parse_path():
    assert parse_path("/a/b[2]") == ("a", "b", 2)
    assert parse_path("[/odd name]") == ("odd name",)
    assert parse_path("/") == ()
    for bad in ("a", "/a b", "", "/a/", "//"):
        with pytest.raises(PathError):
            parse_path(bad)


def test_spec_and_file_names():
    s = TopicSpec("/ADMIN/bm", keys=["/a"], file_name="./sow/%n.sow", expiration="30")
    assert s.keys == ("/a",) and s.expiration == 30.0 and s.default_lifetime == 30.0
    assert TopicSpec("t", expiration="ENABLED").expiration == "enabled"
    assert TopicSpec("t", expiration="enabled").default_lifetime is None
    assert expand_file_name(s) == "./sow//ADMIN/bm.sow"
    assert env_directory(s) == os.path.join("./sow", "amps-sow.lmdb")
    assert env_directory(TopicSpec("t/x", file_name="d/%n/f.sow")) == \
        os.path.join("d/t_x", "amps-sow.lmdb")
    assert env_directory(TopicSpec("t")) == os.path.join("./sow", "amps-sow.lmdb")
    assert TopicSpec("t").domain == "t" and TopicSpec("t", key_domain="D").domain == "D"
    with pytest.raises(ValueError):
        TopicSpec("t", durability="disk")
    with pytest.raises(ValueError):
        TopicSpec("t", expiration="sometimes")


# ---- orderby / select -----------------------------------------------------------------------

def test_parse_order_by():
    ob = parse_order_by(" /a DESC , /b/c,[/x y] asc")
    assert ob.keys == ((("a",), True), (("b", "c"), False), (("x y",), False))
    assert parse_order_by(None) is None and parse_order_by("  ") is None
    assert ob.as_text == (False, False, False)
    ob = parse_order_by("/id TEXT, /ts DESC, /n desc text, /m Text Asc")
    assert ob.keys == ((("id",), False), (("ts",), True), (("n",), True), (("m",), False))
    assert ob.as_text == (True, False, True, True)
    for bad in ("a", "/a,", "/a DESC DESC", "/", "/a up", "/a;/b", "/a ASC DESC",
                "/a TEXT TEXT"):
        with pytest.raises(CommandError) as e:
            parse_order_by(bad)
        assert e.value.reason == INVALID_ORDER_BY


def test_order_by_text_sorts_by_the_values_text():
    from amps_emulator.sow import Record
    from amps_emulator.sow.query import sort_records

    vals = [10, 9, "b", None, 1.5, "10", True, [2, 1]]
    recs = [Record(str(i), b"", doc={"v": v}) for i, v in enumerate(vals)]
    as_text = [r.doc["v"] for r in sort_records(recs, parse_order_by("/v TEXT"))]
    assert as_text == [1.5, 10, "10", [2, 1], 9, "b", True, None]  # "1.5" < "10" < "2"
    mixed = [r.doc["v"] for r in sort_records(recs, parse_order_by("/v"))]
    assert mixed[:4] == [True, 1.5, [2, 1], 9]  # numbers by value without the hint
    desc = [r.doc["v"] for r in sort_records(recs, parse_order_by("/v DESC TEXT"))]
    assert desc == [None, True, "b", 9, [2, 1], 10, "10", 1.5]


def test_select():
    doc = {"a": 1, "b": {"c": 2, "d": 3}, "e": [1]}
    snap = msgspec.json.encode(doc)
    sel = lambda t: apply_select(doc, parse_select(t))  # noqa: E731
    assert sel("[-/,+/a]") == {"a": 1}
    assert sel("-/,+/b/c,+/missing") == {"b": {"c": 2}}
    assert sel("[-/b/d,-/e]") == {"a": 1, "b": {"c": 2}}
    assert sel("[-/,+/,-/a]") == {}  # a path named twice: the first directive counts
    assert sel("[+/,-/b]") == {"a": 1, "e": [1]}
    assert sel("[-/b,+/]") == {"a": 1, "e": [1]}  # the most specific directive wins
    assert sel("[-/b,+/b/d]") == {"a": 1, "b": {"d": 3}, "e": [1]}
    assert sel("[-/b,+/b/zz]") == {"a": 1, "e": [1]}  # nothing is created
    assert sel("[-/,+/b,-/b/c]") == {"b": {"d": 3}}
    assert sel("[+/a]") == doc
    assert sel("[-/a/x]") == doc  # a is not an object: nothing removed
    assert msgspec.json.encode(doc) == snap  # original untouched
    assert apply_select([1, 2], parse_select("[-/]")) == [1, 2]
    assert parse_select(None) is None and parse_select("[]") is None
    for bad in ("[a]", "[*/a]", "[+/a[0]]", "[+]"):
        with pytest.raises(CommandError) as e:
            parse_select(bad)
        assert e.value.reason == INVALID_OPTIONS


# ---- delta ----------------------------------------------------------------------------------

def test_merge_rules():
    old = {"id": 1, "n": {"a": 1, "b": {"c": 1}}, "l": [1, 2], "s": "x"}
    d = {"n": {"b": {"d": 2}}, "l": [3], "new": None}
    assert merge(old, d) == {"id": 1, "n": {"a": 1, "b": {"c": 1, "d": 2}}, "l": [3], "s": "x",
                             "new": None}
    assert old == {"id": 1, "n": {"a": 1, "b": {"c": 1}}, "l": [1, 2], "s": "x"}
    assert merge(None, d) is d and merge(old, [1]) == [1] and merge([1], d) is d
    assert merge(old, {"n": 5})["n"] == 5


def test_changed_fields_and_delta_message():
    old = {"id": 3, "cust": "P", "status": "new", "qty": 1000, "n": {"a": 1, "b": 2}, "f": 1}
    new = {"id": 3, "cust": "P", "status": "pending", "qty": 1000, "n": {"a": 1, "b": 3},
           "f": 1.0, "added": [1]}
    assert changed_fields(old, new) == {"status": "pending", "n": {"b": 3}, "f": 1.0,
                                        "added": [1]}
    assert changed_fields(old, old) == {}
    assert changed_fields(None, {"a": 1}) == {"a": 1}
    msg, changed = delta_message(old, new, ["/id"])
    assert changed and msg["id"] == 3 and msg["status"] == "pending" and "cust" not in msg
    msg, changed = delta_message(old, dict(old), ["/id"])
    assert not changed and msg == {"id": 3}
    deep = {"k": {"id": 1, "v": 1}}
    msg, _ = delta_message({"k": {"id": 1, "v": 0}}, deep, ["/k/id"])
    assert msg == {"k": {"id": 1, "v": 1}} and deep == {"k": {"id": 1, "v": 1}}


# ---- expiry ---------------------------------------------------------------------------------

def test_deadline_rules():
    assert deadline(100.0, None, None) is None
    assert deadline(100.0, None, 30.0) == 130.0
    assert deadline(100.0, 5, 30.0) == 105.0
    assert deadline(100.0, "5", None) == 105.0
    assert deadline(100.0, 0, 30.0) is None
    assert deadline(100.0, "", 30.0) == 130.0
    for bad in ("soon", "nan", object()):
        with pytest.raises(CommandError) as e:
            deadline(100.0, bad, None)
        assert e.value.reason == "header malformed"
    k = expiry_key(123.456789, "KEY")
    assert deadline_of_key(k) == pytest.approx(123.456789) and skey_of_key(k) == "KEY"
    assert expiry_key(1.0, "a") < expiry_bound(1.0) <= expiry_key(1.000001, "a")
    assert expiry_key(2.0, "a") > expiry_key(1.5, "zzz")


# ---- tables ---------------------------------------------------------------------------------

@settings(max_examples=40, deadline=None, database=None)
@given(ops=st.lists(st.tuples(st.booleans(), st.binary(max_size=3)), max_size=300),
       lo=st.binary(max_size=2), hi=st.binary(max_size=2))
def test_sorted_keys_matches_model(ops, lo, hi):
    SortedKeys.LOAD = 4  # force splits
    try:
        sk = SortedKeys()
        model: set = set()
        for add, k in ops:
            if add:
                assert sk.add(k) == (k not in model)
                model.add(k)
            else:
                assert sk.discard(k) == (k in model)
                model.discard(k)
        assert len(sk) == len(model)
        assert list(sk.irange()) == sorted(model)
        assert list(sk.irange(lo, hi)) == sorted(k for k in model if lo <= k < hi)
        assert list(sk.irange(lo, None)) == sorted(k for k in model if lo <= k)
        assert all(k in sk for k in model)
        assert sk.first() == (min(model) if model else None)
    finally:
        SortedKeys.LOAD = 512


def test_mem_hash_table():
    t = MemHashTable()
    t.add(b"t", "a")
    t.add(b"t", "a")
    t.add(b"t", "b")
    assert t.get(b"t") == ["a", "b"] and len(t) == 2
    t.discard(b"t", "a")
    t.discard(b"t", "zz")
    assert t.get(b"t") == ["b"] and t.get(b"u") == []


_index_values = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=80),
    st.sampled_from(["5", "5.0", " 7 ", "1e3", "x" * 70, "NaN"]),
    st.lists(st.one_of(st.integers(), st.text(max_size=5)), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


@settings(max_examples=300)
@given(_index_values, _index_values)
def test_single_field_hash_index_fast_paths_match_tokens(a, b):
    from amps_emulator.sow.index import HashIndex

    def rows(t):
        return {(tok, k) for tok, ks in t._d.items() for k in ks}

    fast, ref = MemHashTable(), MemHashTable()
    ix, ref_ix = HashIndex(["/f"], fast), HashIndex(["/f"], ref)
    old, new = {"f": a, "y": 1}, {"f": b}
    ix.add(old, "k")
    for t in ref_ix.tokens(old):
        ref.add(t, "k")
    assert rows(fast) == rows(ref)
    ix.update(old, new, "k")  # must leave exactly the new value's tokens
    assert rows(fast) == {(t, "k") for t in ref_ix.tokens(new)}
    ix.remove(new, "k")
    assert rows(fast) == set()


# ---- LMDB environment ------------------------------------------------------------------------

def test_lmdb_map_grows_and_replays_batch(tmp_path):
    env = LmdbEnv(str(tmp_path / "e"), map_size=1 << 16, sync=False)
    db = env.open_db("x")
    s = LmdbOrderedSet(env, db)
    big = os.urandom(3000)
    for i in range(600):  # ~1.8 MB in one batch, far over the 64 KiB map
        env.put(db, b"k%05d" % i, big)
        s.add(b"o%05d" % i)
    assert env.grows > 0
    env.commit()
    with env.reading() as txn:
        assert bytes(txn.get(b"k00599", db=db)) == big
    assert len(s.range(b"o", b"p")) == 600
    env.close()


def test_lmdb_max_map_size_refuses(tmp_path):
    env = LmdbEnv(str(tmp_path / "e"), map_size=1 << 16, sync=False, max_map_size=1 << 17)
    db = env.open_db("x")
    with pytest.raises(lmdb.MapFullError):
        for i in range(200):
            env.put(db, b"k%05d" % i, os.urandom(3000))
    env.abort()
    env.close()


def test_lmdb_abort_discards_batch(tmp_path):
    env = LmdbEnv(str(tmp_path / "e"), sync=False)
    db = env.open_db("x")
    env.put(db, b"a", b"1")
    env.commit()
    env.put(db, b"b", b"2")
    env.abort()
    with env.reading() as txn:
        assert txn.get(b"a", db=db) is not None and txn.get(b"b", db=db) is None
    env.close()


def test_sow_facade_groups_topics(tmp_path):
    clock = FakeClock()
    d = str(tmp_path)
    specs = [TopicSpec("p1", keys=("/id",), file_name=f"{d}/sow/%n.sow", expiration=5),
             TopicSpec("p2", keys=("/id",), file_name=f"{d}/sow/%n.sow"),
             TopicSpec("tr", keys=("/id",), durability="transient", expiration=1)]
    sow = Sow(specs, clock=clock, sync=False)
    assert len(sow.stores) == 1 and "tr" in sow and "p1" in sow
    sow.topic("p1").publish(b'{"id":1}')
    sow.topic("tr").publish(b'{"id":2}')
    assert sow.next_expiration() == clock.t + 1
    clock.advance(10)
    swept = sow.sweep_expired()
    assert sorted(t.name for t, recs in swept) == ["p1", "tr"]
    sow.commit()
    sow.close()
    sow = Sow(specs, clock=clock, sync=False)
    assert sow.topic("p1").count() == 0 and sow.topic("tr").count() == 0
    sow.topic("p2").publish(b'{"id":3}')
    sow.close()
    sow = Sow(specs, clock=clock, sync=False)
    assert sow.topic("p2").count() == 1
    with pytest.raises(ValueError):
        sow.add_topic(specs[0])
    sow.close()


def test_auto_memo_index_only_on_topics_small_enough_to_index_inside_a_query():
    from amps_emulator.sow import TransientStore

    store = TransientStore(clock=FakeClock())
    small = store.open_topic(TopicSpec("small", keys=("/id",)))
    big = store.open_topic(TopicSpec("big", keys=("/id",)))
    small.auto_memo_limit = big.auto_memo_limit = 10
    for i in range(10):
        small.publish(msgspec.json.encode({"id": i, "px": i}))
    for i in range(11):
        big.publish(msgspec.json.encode({"id": i, "px": i}))
    assert small.query("/px > 5").plan.startswith("memo")
    q = big.query("/px > 5")
    assert q.plan.startswith("scan") and len(q.records) == 5
    assert big.memo_indexes == {}


@settings(max_examples=500, deadline=None)
@given(n=st.integers(min_value=-(1 << 60), max_value=1 << 60)
       | st.sampled_from([0, 1, -1, (1 << 53) - 1, 1 << 53, (1 << 53) + 1, -(1 << 53),
                          -(1 << 53) - 1, 10**15, 10**16, -(10**16), 10**400]))
def test_an_int_s_hash_token_is_its_float_s(n: int) -> None:
    """``_num_token``'s short way for an int (its digits + ".0") is the float's repr."""
    from amps_emulator.sow.index import _num_token

    try:
        f = float(n) + 0.0
    except OverflowError:
        want = b"I" + str(n).encode()
    else:
        want = b"N" + repr(f).encode()
    assert _num_token(n) == want
