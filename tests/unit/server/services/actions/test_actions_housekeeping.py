"""The housekeeping steps through the engine: their file work runs in worker threads and the
action's later steps run after it, in order; refusals and bad options in one line; at
shutdown the work gets until the settling deadline, then stops after the file in hand."""

from __future__ import annotations

import asyncio
import gzip
import logging
import os
import threading

from amps_emulator.server.services.actions import Actions, files
from tests.unit.server.services.actions.test_actions_steps import START, action, engine, step

__all__ = ["engine"]  # the fixture

DAY = 86400.0


def old_file(path, days: float, data: bytes = b"log line\n" * 50) -> str:
    path.write_bytes(data)
    t = START - days * DAY
    os.utime(path, (t, t))
    return str(path)


def capture(engine: Actions) -> list[list[str]]:
    """A step that records which files exist when it runs."""
    seen: list[list[str]] = []

    def look(s, v):
        seen.append(sorted(os.listdir(v["DIR"])))
        return True

    engine._steps["test-look"] = look
    return seen


async def test_remove_files_then_the_next_step(engine, tmp_path, caplog):
    for i in range(4):
        old_file(tmp_path / f"app{i}.log", 10 - i)
    old_file(tmp_path / "fresh.log", 0.1)
    seen = capture(engine)
    caplog.set_level(logging.INFO, logger="amps_emulator.actions")
    assert engine.run(action(step("amps-action-do-remove-files", Age="1d",
                                  Pattern=str(tmp_path / "*.log"), Keep="1"),
                             step("test-look")), {"DIR": str(tmp_path)})
    await engine.settle()
    assert seen == [["app3.log", "fresh.log"]]  # the newest old one kept, the young one too
    lines = [r.getMessage() for r in caplog.records]
    assert sum("amps-action-do-remove-files: removed /" in m for m in lines) == 3
    assert any("removed 3 of 5 file(s)" in m for m in lines)


async def test_compress_files_writes_gzip_before_the_next_step(engine, tmp_path):
    data = b"an old log\n" * 200
    old_file(tmp_path / "a.log", 5, data)
    old_file(tmp_path / "b.log", 4, data)
    seen = capture(engine)
    assert engine.run(action(step("amps-action-do-compress-files", Age="2d",
                                  Pattern=str(tmp_path / "*.log"), Count="1"),
                             step("test-look")), {"DIR": str(tmp_path)})
    await engine.settle()
    assert seen == [["a.log.gz", "b.log"]]
    with gzip.open(tmp_path / "a.log.gz") as f:
        assert f.read() == data


async def test_a_journal_matching_the_pattern_is_an_error(engine, tmp_path, caplog):
    old_file(tmp_path / "00000000000000000001.journal", 5)
    caplog.set_level(logging.INFO, logger="amps_emulator.actions")
    engine.run(action(step("amps-action-do-remove-files", Age="1d", Pattern=str(tmp_path / "*"))),
               {})
    await engine.settle()
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "00000000000000000001.journal" in errors[0].getMessage()
    assert os.path.exists(tmp_path / "00000000000000000001.journal")


async def test_age_and_pattern_are_required_and_checked(engine, tmp_path, caplog):
    old_file(tmp_path / "a.log", 5)
    seen = capture(engine)
    for options in ({"Pattern": str(tmp_path / "*")}, {"Age": "1d"},
                    {"Age": "LastThursday", "Pattern": str(tmp_path / "*")},
                    {"Age": "1d", "Pattern": str(tmp_path / "*"), "Keep": "-1"}):
        assert not engine.run(action(step("amps-action-do-remove-files", **options),
                                     step("test-look")), {"DIR": str(tmp_path)})
    await engine.settle()
    assert seen == [] and os.path.exists(tmp_path / "a.log")
    assert sum("do-remove-files failed" in r.getMessage() for r in caplog.records) == 4


async def test_journal_steps_without_a_transaction_log_say_so(engine, caplog):
    caplog.set_level(logging.INFO, logger="amps_emulator.actions")
    assert engine.run(action(step("amps-action-do-archive-journal", Age="1d"),
                             step("amps-action-do-compress-journal", Age="1d")), {})
    assert sum("no journal files to" in r.getMessage() for r in caplog.records) == 2
    assert not engine.run(action(step("amps-action-do-archive-journal")), {})  # no Age


async def test_at_shutdown_the_work_under_way_and_the_later_steps_finish(engine, tmp_path):
    old_file(tmp_path / "a.log", 5)
    seen = capture(engine)
    engine.run(action(step("amps-action-do-remove-files", Age="1d", Pattern=str(tmp_path / "*.log")),
                      step("test-look")), {"DIR": str(tmp_path)})
    engine.stop()
    await engine.settle()
    assert seen == [[]] and not engine.pending


async def test_past_the_settling_deadline_the_later_steps_do_not_run(engine, tmp_path):
    old_file(tmp_path / "a.log", 5)
    seen = capture(engine)
    engine.run(action(step("amps-action-do-remove-files", Age="1d", Pattern=str(tmp_path / "*.log")),
                      step("test-look")), {"DIR": str(tmp_path)})
    engine.stop()
    await engine.settle(0)
    assert seen == [] and os.path.exists(tmp_path / "a.log") and not engine.pending


async def test_stopped_at_the_deadline_a_step_finishes_the_file_in_hand(engine, tmp_path,
                                                                         monkeypatch):
    for name in ("a.log", "b.log"):
        old_file(tmp_path / name, 5 if name == "a.log" else 4)
    seen = capture(engine)
    in_hand, release = threading.Event(), threading.Event()
    compress = files.compress

    def held(path, **kw):
        in_hand.set()
        release.wait(10)
        return compress(path, **kw)

    monkeypatch.setattr(files, "compress", held)
    engine.run(action(step("amps-action-do-compress-files", Age="1d",
                           Pattern=str(tmp_path / "*.log")), step("test-look")),
               {"DIR": str(tmp_path)})
    await asyncio.to_thread(in_hand.wait, 10)
    settling = asyncio.create_task(engine.settle(0))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not settling.done()  # cancelled, it waits for the copy it started
    release.set()
    await asyncio.wait_for(settling, 10)
    assert sorted(os.listdir(tmp_path)) == ["a.log.gz", "b.log"] and seen == []


def test_without_an_event_loop_a_file_step_fails(engine, tmp_path, caplog):
    old_file(tmp_path / "a.log", 5)
    seen = capture(engine)
    assert not engine.run(action(step("amps-action-do-remove-files", Age="1d",
                                      Pattern=str(tmp_path / "*.log")), step("test-look")),
                          {"DIR": str(tmp_path)})
    assert seen == [] and os.path.exists(tmp_path / "a.log") and not engine.pending
    assert any("no event loop" in r.getMessage() for r in caplog.records)
