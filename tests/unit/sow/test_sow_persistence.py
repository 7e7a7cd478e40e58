"""Persistent (LMDB) topics across restarts: durability of committed batches, the applied
journal position, key stability, expiry at start-up, index metadata, no rebuild when current."""

from __future__ import annotations

import pytest

from amps_emulator.sow import SowStore, TopicSpec
from amps_emulator.sow.testing import FakeClock, js
from amps_emulator.sow.topic import Topic


@pytest.fixture
def clock():
    return FakeClock()


def open_store(tmp_path, clock, **kw):
    return SowStore(str(tmp_path / "env"), clock=clock, sync=kw.pop("sync", False), **kw)


def spec(**kw):
    kw.setdefault("keys", ("/id",))
    return TopicSpec("orders", **kw)


def test_committed_data_survives_reopen(tmp_path, clock):
    st = open_store(tmp_path, clock, sync=True)
    t = st.open_topic(spec(hash_indexes=(("/sym",),), indexes=("/px",)))
    keys = [t.publish(js({"id": i, "sym": "S%d" % (i % 3), "px": i}), bookmark=f"1|{i}|",
                      position=i).sow_key for i in range(1, 31)]
    t.delete_by_keys(keys[:5])
    st.commit()
    st.close()
    st = open_store(tmp_path, clock)
    t = st.open_topic(spec(hash_indexes=(("/sym",),), indexes=("/px",)))
    assert t.count() == 25 and t.applied_position == 30
    r = t.get(keys[10])
    assert r.doc == {"id": 11, "sym": "S2", "px": 11} and r.bookmark == "1|11|" and r.position == 11
    assert t.query("/sym = 'S1'").matches == 8
    assert t.query("/sym = 'S1'").plan.startswith("hash[/sym]")
    assert t.query("/px > 20").plan.startswith("memo[/px] (")
    assert t.query("/px > 20").matches == 10
    st.close()


def test_generated_keys_stable_across_reopen(tmp_path, clock):
    st = open_store(tmp_path, clock)
    k = st.open_topic(spec()).publish(js({"id": "abc"})).sow_key
    st.close()
    st = open_store(tmp_path, clock)
    t = st.open_topic(spec())
    assert t.publish(js({"id": "abc", "v": 2})).sow_key == k
    assert t.count() == 1
    st.close()


def test_applied_position_is_atomic_with_records(tmp_path, clock):
    st = open_store(tmp_path, clock)
    t = st.open_topic(spec())
    t.publish(js({"id": 1, "v": 1}), position=5)
    st.commit()
    t.publish(js({"id": 1, "v": 2}), position=6)
    t.publish(js({"id": 2, "v": 1}), position=7)
    assert t.applied_position == 7
    st.abort()  # the batch is lost (as in a crash before commit)
    assert t.applied_position == 5
    assert t.query().records[0].doc == {"id": 1, "v": 1}
    st.close()
    st = open_store(tmp_path, clock)
    t = st.open_topic(spec())
    assert t.applied_position == 5 and t.count() == 1
    t.set_applied_position(9)  # e.g. journal records for other topics
    st.commit()
    st.close()
    st = open_store(tmp_path, clock)
    t = st.open_topic(spec())
    assert t.applied_position == 9
    d = t.delete_by_filter("1=1", position=12)  # a journaled sow_delete
    assert d.records_deleted == 1 and t.applied_position == 12
    t.delete_by_keys("nosuch", position=10)  # lower positions never move it back
    assert t.applied_position == 12
    st.commit()
    st.close()
    st = open_store(tmp_path, clock)
    assert st.open_topic(spec()).applied_position == 12
    st.close()


def test_uncommitted_batch_lost_on_crash(tmp_path, clock):
    st = open_store(tmp_path, clock)
    t = st.open_topic(spec())
    t.publish(js({"id": 1}), position=1)
    st.commit()
    t.publish(js({"id": 2}), position=2)
    st.env.abort()  # simulate the process dying: the open transaction never commits
    st.env.env.close()
    st = open_store(tmp_path, clock)
    t = st.open_topic(spec())
    assert t.count() == 1 and t.applied_position == 1
    st.close()


def test_expired_records_swept_at_startup(tmp_path, clock):
    st = open_store(tmp_path, clock)
    t = st.open_topic(spec(expiration=60))
    t.publish(js({"id": 1}))
    t.publish(js({"id": 2}), expiration=0)
    st.close()
    clock.advance(3600)  # the server was down for an hour
    st = open_store(tmp_path, clock)
    t = st.open_topic(spec(expiration=60))
    assert t.next_expiration() is not None and t.next_expiration() <= clock.t
    assert t.count() == 1 and [r.doc["id"] for r in t.query().records] == [2]
    assert [r.doc["id"] for r in t.sweep_expired()] == [1]
    st.close()


def test_expiration_disabled_after_restart_keeps_records(tmp_path, clock):
    st = open_store(tmp_path, clock)
    st.open_topic(spec(expiration=1)).publish(js({"id": 1}))
    st.close()
    clock.advance(100)
    st = open_store(tmp_path, clock)
    t = st.open_topic(spec())  # Expiration removed from the config
    assert t.count() == 1 and t.sweep_expired() == []
    st.close()


def test_no_index_rebuild_when_current(tmp_path, clock, monkeypatch):
    st = open_store(tmp_path, clock)
    t = st.open_topic(spec(hash_indexes=(("/a",),), indexes=("/b",)))
    for i in range(50):
        t.publish(js({"id": i, "a": i % 5, "b": i}))
    t.query("/c > 3")  # memo index created on first use, persisted
    st.close()
    builds = []
    monkeypatch.setattr(Topic, "_build", lambda self, ixs: builds.append(ixs))
    st = open_store(tmp_path, clock)
    t = st.open_topic(spec(hash_indexes=(("/a",),), indexes=("/b",)))
    assert builds == []
    assert t.query("/c > 3").plan.startswith("memo[/c] (")  # reused, not created
    st.close()


def test_index_added_in_config_is_built(tmp_path, clock):
    st = open_store(tmp_path, clock)
    t = st.open_topic(spec())
    for i in range(20):
        t.publish(js({"id": i, "a": i % 4}))
    st.close()
    st = open_store(tmp_path, clock)
    t = st.open_topic(spec(hash_indexes=(("/a",),)))
    q = t.query("/a = 1")
    assert q.plan.startswith("hash[/a]") and q.matches == 5
    st.close()
    st = open_store(tmp_path, clock)  # and removed again
    t = st.open_topic(spec())
    assert [i["kind"] for i in t.index_info()] == ["hash"]  # only the Key index
    assert t.query("/a = 1").matches == 5
    st.close()


def test_key_definition_change_drops_records(tmp_path, clock, caplog):
    st = open_store(tmp_path, clock)
    t = st.open_topic(spec())
    t.publish(js({"id": 1, "other": 2}), position=3)
    st.close()
    st = open_store(tmp_path, clock)
    t = st.open_topic(spec(keys=("/other",)))
    assert t.count() == 0 and t.applied_position == 0  # rebuild from the journal
    assert "Key/KeyDomain changed" in caplog.text
    st.close()


def test_many_topics_one_environment(tmp_path, clock):
    st = open_store(tmp_path, clock)
    ts = [st.open_topic(TopicSpec(f"t{i}", keys=("/id",))) for i in range(20)]
    for i, t in enumerate(ts):
        t.publish(js({"id": i}), position=i + 1)
    st.commit()
    st.close()
    st = open_store(tmp_path, clock)
    ts = [st.open_topic(TopicSpec(f"t{i}", keys=("/id",))) for i in range(20)]
    assert [t.count() for t in ts] == [1] * 20
    assert [t.applied_position for t in ts] == list(range(1, 21))
    with pytest.raises(ValueError):
        st.open_topic(TopicSpec("t0", keys=("/id",)))
    st.close()


def test_long_topic_name(tmp_path, clock):
    name = "/very/" + "long" * 100
    st = open_store(tmp_path, clock)
    st.open_topic(TopicSpec(name, keys=("/id",))).publish(js({"id": 1}))
    st.close()
    st = open_store(tmp_path, clock)
    assert st.open_topic(TopicSpec(name, keys=("/id",))).count() == 1
    st.close()
