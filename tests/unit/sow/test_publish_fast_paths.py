"""The publish hot path's shortcuts give exactly what the general paths give.

* ``Topic.upsert`` (body decoded and SowKey computed by the caller, positional arguments: what
  the server's ``store_publish`` calls) vs ``Topic.publish``: the same results, records, index
  rows, expiry rows, applied position and expired-record reports, on both backends.
* ``Message.previous_doc`` read lazily from the replaced record (``set_previous``) vs set
  eagerly.
* ``Command.acks`` shared per ``a`` text vs computed per command.
* ``Record`` built with positional arguments vs keywords.
* The cached index decoder follows the index set when a memo index is added.
"""

from __future__ import annotations

import msgspec
import pytest

from amps_emulator.protocol.codec import parse_command
from amps_emulator.server.core.message import UNDECODED, Message
from amps_emulator.sow.record import Record, decode_record, encode_record
from amps_emulator.sow.testing import StoreFactory, js


def _rec_fields(r):
    if r is None:
        return None
    return (r.sow_key, bytes(r.data), r.bookmark, r.timestamp, r.expiration, r.position,
            r.headers, r.doc)


def _result(res):
    return (_rec_fields(res.record), _rec_fields(res.previous), res.inserted, res.delta)


def _state(sf, t):
    """Everything the topic stores: records, index tables, expiry rows, metadata."""
    b = t._b
    if sf.persistent:
        sf.store.commit()
        dbs = {"r": b.rec_db, "m": b.meta_db, **{n: tb.db for n, tb in b._tables.items()}}
        out = {}
        with b.env.reading() as txn:
            for name, db in dbs.items():
                out[name] = [(bytes(k), bytes(v)) for k, v in txn.cursor(db)]
        return out
    out = {"r": {k: _rec_fields(r) for k, r in b.records.items()},
           "seq": {k: r.seq for k, r in b.records.items()}}
    for name, tb in b._tables.items():
        if hasattr(tb, "_d"):
            out[name] = {k: list(v) for k, v in tb._d.items()}
        else:
            out[name] = tb.range(None, None)
    return out


# (body, header kwargs, clock advance before)
OPS = [
    ({"id": 1, "sym": "A", "px": 1.5}, {}, 0),
    ({"id": 2, "sym": "B", "px": 2}, {"expiration": 5}, 0),
    ({"id": 1, "sym": "A", "px": 1.6}, {}, 1),  # same index values
    ({"id": 1, "sym": "C", "px": 1.7}, {"expiration": "7"}, 0),  # index value changes
    ({"id": "2", "sym": ["B", "D"]}, {"expiration": 0}, 0),  # "2" keys like 2; array field
    ({"id": 3, "sym": "E"}, {"headers": {"o": "x"}}, 0),
    ({"id": 1, "sym": "C"}, {"expiration": 2}, 10),  # replaces an expired record
    ({"id": 4, "sym": None, "px": 1e400}, {}, 0),
    ({"id": 3, "sym": "E"}, {"timestamp": 123.0}, 0),
]


@pytest.mark.parametrize("kind", ["persistent", "transient"])
@pytest.mark.parametrize("lifetime", [None, 30])
def test_upsert_matches_publish(tmp_path, kind, lifetime):
    sfa = StoreFactory(kind, tmp_path / "a")
    sfb = StoreFactory(kind, tmp_path / "b")
    spec = dict(keys=("/id",), hash_indexes=(("/sym",),), indexes=("/px",), expiration=lifetime)
    ta = sfa.topic("orders", **spec)
    tb = sfb.topic("orders", **spec)
    try:
        for i, (body, kw, dt) in enumerate(OPS, 1):
            sfa.clock.advance(dt)
            sfb.clock.advance(dt)
            data = js(body)
            bm = f"9|{i}|"
            ra = ta.publish(data, bookmark=bm, position=i, **kw)
            doc = msgspec.json.decode(data)
            key = tb.key_for(doc, None)
            if kw:
                rb = tb.upsert(key, data, doc, kw.get("expiration"), bm, i,
                               timestamp=kw.get("timestamp"), headers=kw.get("headers"))
            else:
                rb = tb.upsert(key, data, doc, None, bm, i)  # the server's call
            assert _result(ra) == _result(rb)
            assert ta.applied_position == tb.applied_position
            assert ta.next_expiration() == tb.next_expiration()
        assert _state(sfa, ta) == _state(sfb, tb)
        ea = ta.sweep_expired()
        eb = tb.sweep_expired()
        assert [_rec_fields(r) for r in ea] == [_rec_fields(r) for r in eb]
        assert _state(sfa, ta) == _state(sfb, tb)
    finally:
        sfa.close()
        sfb.close()


@pytest.mark.parametrize("kind", ["persistent", "transient"])
def test_index_decoder_cache_follows_a_new_memo_index(tmp_path, kind):
    sf = StoreFactory(kind, tmp_path)
    try:
        t = sf.topic("orders", keys=("/id",), hash_indexes=(("/sym",),))
        t.publish(js({"id": 1, "sym": "A", "qty": 5}))
        t.publish(js({"id": 1, "sym": "A", "qty": 6}))  # caches the decoder for /id, /sym
        t.add_memo_index("/qty")
        t.publish(js({"id": 1, "sym": "A", "qty": 7}))  # must read the old /qty to move it
        # (the Key index keeps no row for a whole-number key: its token names the SowKey)
        assert [e["entries"] for e in t.index_info()] == [0, 1, 1]
        assert t.query("/qty = 7", plan="memo").matches == 1
        assert t.query("/qty = 6", plan="memo").matches == 0
        assert t.query("/qty > 0", plan="scan").matches == 1
    finally:
        sf.close()


def test_lazy_previous_doc_matches_eager():
    prev = decode_record("k", encode_record(Record("k", b'{"id":1,"a":2}', "1|1|", 5.0)))
    lazy = Message("t", b'{"id":1,"a":3}', doc={"id": 1, "a": 3})
    eager = Message("t", b'{"id":1,"a":3}', doc={"id": 1, "a": 3})
    lazy.key_fields = eager.key_fields = ("/id",)
    assert lazy.previous_doc is UNDECODED  # not a SOW publish
    lazy.set_previous(prev)
    eager.previous_doc = prev.doc
    assert lazy.previous_doc == eager.previous_doc == {"id": 1, "a": 2}
    assert lazy.delta() == eager.delta()
    new = Message("t", b"{}")
    new.set_previous(None)
    assert new.previous_doc is None and new.delta() is None
    bad = Message("t", b"{}")
    bad.set_previous(Record("k", b"not json"))
    assert bad.previous_doc is None  # like Record.doc
    bad.previous_doc = {"x": 1}  # the setter still works
    assert bad.previous_doc == {"x": 1}


def test_message_positional_and_keyword_construction_agree():
    a = Message("t", b"{}", "1|2|", "cx", "k", 5, "me", {"a": 1})
    b = Message("t", b"{}", bookmark="1|2|", correlation_id="cx", sow_key="k", expiration=5,
                client_name="me", doc={"a": 1})
    slots = [s for s in Message.__slots__ if s != "_previous_rec"]
    assert [getattr(a, s) for s in slots] == [getattr(b, s) for s in slots]


def test_record_positional_and_keyword_construction_agree():
    a = Record("k", b"{}", "1|2|", 3.5, 9.0, 7, {"o": "x"}, {"a": 1}, 4)
    b = Record("k", b"{}", bookmark="1|2|", timestamp=3.5, expiration=9.0, position=7,
               headers={"o": "x"}, doc={"a": 1}, seq=4)
    assert a == b and a.doc == b.doc and a.seq == b.seq
    assert decode_record("k", memoryview(encode_record(a))) == a


@pytest.mark.parametrize("a", ["processed,persisted", "persisted", "received,,completed",
                               "", None])
def test_shared_ack_sets(a):
    header = {"c": "p", "t": "x"}
    if a is not None:
        header["a"] = a
    payload = msgspec.json.encode(header) + b"{}"
    c1 = parse_command(payload)
    c2 = parse_command(payload)
    expected = frozenset(p for p in (a or "").split(",") if p)
    assert c1.acks == c2.acks == expected
    assert c1.acks is c1.acks


def test_a_runs_bookmarks_are_its_records_bookmark_strs() -> None:
    """``bookmark_strs`` (the keyed run's bookmarks, without a property call per record)
    gives each record's ``bookmark_str``."""
    from amps_emulator.journal.record import JournalRecord, bookmark_strs

    recs = [JournalRecord(p, 1, "t", pid, seq, 1_700_000_000_000_000 + p, "c")
            for p, (pid, seq) in enumerate([(1, 1), (0, 0), (2**64 - 1, 2**63 + 5),
                                            (1234567890, 42)], 1)]
    assert bookmark_strs(recs) == [r.bookmark_str for r in recs]
    assert bookmark_strs([]) == []
