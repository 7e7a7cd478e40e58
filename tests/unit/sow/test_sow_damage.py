"""A damaged SOW environment is moved aside and replaced by an empty one (the server then
rebuilds the topics from the transaction log); a clean or same-boot one is trusted as is."""

from __future__ import annotations

import glob
import json
import os

import pytest

from amps_emulator.sow import Sow, TopicSpec
from amps_emulator.sow.storage.lmdbenv import LmdbEnv
from amps_emulator.sow.testing import js


def make(d, n=3000, close=True):
    spec = [TopicSpec("orders", keys=("/id",), file_name=f"{d}/sow/orders.sow")]
    s = Sow(spec, default_dir=str(d), sync=False)
    t = s.topic("orders")
    for i in range(n):
        t.publish(js({"id": i, "v": "x" * 100}))
    s.commit()
    if close:
        s.close()
    return spec, f"{d}/sow/amps-sow.lmdb"


def damage_pages(env_dir):
    p = os.path.join(env_dir, "data.mdb")
    data = bytearray(open(p, "rb").read())
    for off in range(3 * 4096, len(data), 4096):
        data[off + 100:off + 200] = bytes(range(100))
    open(p, "wb").write(data)


def set_state(env_dir, **state):
    with open(os.path.join(env_dir, "emulator-state.json"), "w") as f:
        json.dump(state, f)


def test_an_env_that_is_not_lmdb_is_moved_aside_and_replaced(tmp_path, caplog):
    spec, env_dir = make(tmp_path)
    with open(os.path.join(env_dir, "data.mdb"), "wb") as f:
        f.write(b"not an lmdb file" * 1000)
    s = Sow(spec, default_dir=str(tmp_path), sync=False)
    assert s.topic("orders").count() == 0
    s.topic("orders").publish(js({"id": 1}))  # the new one works
    s.commit()
    s.close()
    assert len(glob.glob(env_dir + ".damaged-*")) == 1
    assert "is damaged" in caplog.text


def test_damaged_pages_after_a_machine_crash_are_found_at_open(tmp_path):
    spec, env_dir = make(tmp_path)
    damage_pages(env_dir)
    set_state(env_dir, boot="an-earlier-boot", clean=False)  # written, never closed, rebooted
    env = LmdbEnv(env_dir, sync=False)
    # (which error LMDB reports depends on which damaged page the read-through meets first)
    assert env.replaced is not None and ("Corrupted" in env.replaced
                                         or "PAGE_NOTFOUND" in env.replaced)
    env.close()
    assert glob.glob(env_dir + ".damaged-*")


@pytest.mark.parametrize("state", [{"boot": "an-earlier-boot", "clean": True},
                                   {"boot": "this-boot", "clean": False}])
def test_a_clean_close_or_a_process_crash_is_trusted_without_reading_it_all(tmp_path, state):
    spec, env_dir = make(tmp_path)
    damage_pages(env_dir)  # (not something a clean close or a process crash can cause)
    set_state(env_dir, **state)
    env = LmdbEnv(env_dir, sync=False, boot="this-boot")
    assert env.replaced is None
    env.close()
    assert not glob.glob(env_dir + ".damaged-*")


def test_open_and_close_record_the_state(tmp_path):
    env = LmdbEnv(str(tmp_path / "e"), sync=False, boot="b1")
    state = lambda: json.load(open(tmp_path / "e" / "emulator-state.json"))  # noqa: E731
    assert state() == {"boot": "b1", "clean": False}
    env.close()
    assert state() == {"boot": "b1", "clean": True}
