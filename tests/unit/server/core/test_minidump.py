"""The emulator's minidump file: every thread's and task's stack and the state given, under a
name of its own, with the mask applied, and bounded."""

from __future__ import annotations

import asyncio
import os
import stat
import threading

from amps_emulator.server.core import minidump
from amps_emulator.server.core.minidump import NAME_RE, write_minidump


async def _parked_deep_inside(ready: asyncio.Event) -> None:
    ready.set()
    await asyncio.sleep(3600)


async def _waiting_for_it(ready: asyncio.Event) -> None:
    await _parked_deep_inside(ready)


async def test_a_dump_holds_the_threads_the_tasks_and_the_state(tmp_path):
    ready = asyncio.Event()
    task = asyncio.create_task(_waiting_for_it(ready), name="the-waiter")
    await ready.wait()
    release = threading.Event()
    worker = threading.Thread(target=release.wait, name="side-worker", daemon=True)
    worker.start()
    try:
        path = write_minidump(str(tmp_path / "made" / "here"), {"clients": "2: a, b"}, "a test",
                              "inst", 0o604, asyncio.get_running_loop())
    finally:
        release.set()
        task.cancel()
    assert os.path.dirname(path) == str(tmp_path / "made" / "here")  # created
    assert NAME_RE.fullmatch(os.path.basename(path))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o604
    text = open(path).read()
    assert "instance: inst" in text and "reason: a test" in text and "clients: 2: a, b" in text
    threads = text[text.index("== threads"):text.index("== asyncio tasks")]
    assert "-- thread side-worker" in threads and "in wait" in threads
    assert "-- thread MainThread" in threads and "in write_minidump" in threads
    tasks = text[text.index("== asyncio tasks"):]
    waiter = tasks[tasks.index("-- task the-waiter"):]
    # the awaited coroutines, outermost first
    assert waiter.index("in _waiting_for_it") < waiter.index("in _parked_deep_inside") \
        < waiter.index("in sleep")


def test_each_dump_has_a_new_name_and_a_bounded_size(tmp_path, monkeypatch):
    monkeypatch.setattr(minidump, "MAX_BYTES", 2000)
    paths = {write_minidump(str(tmp_path), {"big": "x" * 5000}, "r") for _ in range(3)}
    assert len(paths) == 3
    for path in paths:
        text = open(path).read()
        assert len(text) <= 2000 + 40 and text.endswith("... cut at 2000 bytes\n")
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o640  # the default mask


def test_the_bound_counts_bytes_not_characters(tmp_path, monkeypatch):
    monkeypatch.setattr(minidump, "MAX_BYTES", 2000)
    lines = {f"k{i}": "\u20ac" * 50 for i in range(100)}  # 3 bytes each
    path = write_minidump(str(tmp_path), lines, "r")
    data = open(path, "rb").read()
    assert len(data) <= 2000 + 40 and data.endswith(b"... cut at 2000 bytes\n")
