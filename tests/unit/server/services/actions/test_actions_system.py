"""``amps-action-do-execute-system``: the command runs as ``/bin/sh -c`` off the event loop,
one at a time, bounded in time and output, and the action's next steps wait for it."""

from __future__ import annotations

import asyncio
import logging
import os

import pytest

from amps_emulator.server.core.clock import TestClock
from amps_emulator.server.messaging.broker import Broker
from amps_emulator.server.services.actions import Actions
from amps_emulator.server.services.actions.system import OUTPUT_LIMIT
from tests.unit.server.services.actions.test_actions_steps import START, _Host, _Turn, action, step

SYSTEM = "amps-action-do-execute-system"


@pytest.fixture
def engine():
    broker = Broker(instance_name="inst", timebase=TestClock(start=START), turn=_Turn())
    return Actions("inst", [], broker, host=_Host())


def _recorder(engine):
    """A step that records the variable WHO (and what the file F holds then) and goes on."""
    got: list = []

    def record(s, v):
        path = v.get("F")
        got.append((v.get("WHO"), open(path).read() if path and os.path.exists(path) else None))
        return True

    engine._steps["test-record"] = record
    return got


async def _until_settled(engine) -> None:
    while engine.pending:
        await asyncio.wait(list(engine.pending))


async def test_the_next_steps_run_after_the_command_with_its_variables(engine, tmp_path, caplog):
    got = _recorder(engine)
    out = tmp_path / "out.txt"
    act = action(step(SYSTEM, Command="printf '%s' '{{WHO}}' > '{{F}}'; echo done; echo oops >&2"),
                 step("test-record"))
    with caplog.at_level(logging.INFO, logger="amps_emulator.actions"):
        assert engine.run(act, {"WHO": "alice", "F": str(out)})
        assert got == []  # not yet: the command runs off the loop
        await _until_settled(engine)
    assert got == [("alice", "alice")]  # the step after it saw what the command wrote
    line = next(r for r in caplog.records if "exited with status" in r.getMessage())
    assert line.levelno == logging.INFO
    assert "status 0" in line.getMessage() and "'done'" in line.getMessage() \
        and "'oops'" in line.getMessage()


async def test_it_runs_in_the_working_directory_with_the_environment(engine, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AMPS_TEST_MARK", "xyz")
    engine.run(action(step(SYSTEM, Command='echo "$AMPS_TEST_MARK" > here.txt; cat')), {})
    await _until_settled(engine)  # (cat ends at once: stdin is closed)
    assert (tmp_path / "here.txt").read_text() == "xyz\n"


async def test_a_failing_command_logs_a_warning_and_the_action_goes_on(engine, caplog):
    got = _recorder(engine)
    with caplog.at_level(logging.INFO, logger="amps_emulator.actions"):
        engine.run(action(step(SYSTEM, Command="echo bad >&2; exit 3"), step("test-record")),
                   {"WHO": "w"})
        await _until_settled(engine)
    line = next(r for r in caplog.records if "exited with status" in r.getMessage())
    assert line.levelno == logging.WARNING and "status 3" in line.getMessage() \
        and "'bad'" in line.getMessage()
    assert got == [("w", None)]


async def test_a_command_past_its_timeout_is_killed(engine, tmp_path, caplog):
    got = _recorder(engine)
    child = tmp_path / "child.txt"
    # the shell and its child both go (the whole process group)
    act = action(step(SYSTEM, Command=f"(sleep 30; echo late > {child}) & sleep 30",
                      Timeout="200ms"), step("test-record"))
    with caplog.at_level(logging.INFO, logger="amps_emulator.actions"):
        engine.run(act, {"WHO": "t"})
        await asyncio.wait_for(_until_settled(engine), 10)
    assert any(r.levelno == logging.WARNING and "killed after its 0.2s timeout" in r.getMessage()
               for r in caplog.records)
    assert got == [("t", None)]
    assert not child.exists()


async def test_output_is_bounded(engine, caplog):
    with caplog.at_level(logging.INFO, logger="amps_emulator.actions"):
        engine.run(action(step(SYSTEM, Command="head -c 200000 /dev/zero | tr '\\0' x")), {})
        await _until_settled(engine)
    line = next(r.getMessage() for r in caplog.records if "exited with status" in r.getMessage())
    assert "x" * OUTPUT_LIMIT in line and "x" * (OUTPUT_LIMIT + 1) not in line
    assert f"({200000 - OUTPUT_LIMIT} more output bytes dropped)" in line


async def test_commands_run_one_at_a_time_in_order_and_the_loop_is_not_held(engine, tmp_path):
    log_file = tmp_path / "order.txt"
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    beat = asyncio.create_task(ticker())
    for who in ("a", "b", "c"):
        engine.run(action(step(SYSTEM, Command=f"echo {who}1 >> {log_file}; sleep 0.1; "
                                               f"echo {who}2 >> {log_file}")), {})
    assert len(engine.pending) == 3
    await _until_settled(engine)
    beat.cancel()
    assert log_file.read_text().split() == ["a1", "a2", "b1", "b2", "c1", "c2"]
    assert ticks > 5  # the loop ran other work while the commands ran


async def test_settle_waits_then_stops_what_still_runs(engine, tmp_path):
    got = _recorder(engine)
    engine.run(action(step(SYSTEM, Command="true"), step("test-record")), {"WHO": "quick"})
    engine.run(action(step(SYSTEM, Command="sleep 30", Timeout="60s"), step("test-record")),
               {"WHO": "slow"})
    await asyncio.wait_for(engine.settle(0.5), 10)
    await asyncio.sleep(0)
    assert got == [("quick", None)]
    assert not engine.pending


@pytest.mark.parametrize("timeout", ["0s", "-1s"])
async def test_a_bad_timeout_or_no_command_fails_the_step(engine, caplog, timeout):
    got = _recorder(engine)
    assert not engine.run(action(step(SYSTEM, Command="true", Timeout=timeout),
                                 step("test-record")), {})
    assert not engine.run(action(step(SYSTEM, Command="  "), step("test-record")), {})
    assert got == [] and not engine.pending
