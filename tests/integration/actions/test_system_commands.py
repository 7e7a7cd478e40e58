"""``amps-action-do-execute-system`` in a running server: the command runs as a shell command
in the server's working directory, off its event loop, and the action's next steps run once
it is done (AMPS runs it in its action thread)."""

from __future__ import annotations

from xml.sax.saxutils import escape

from tests.integration.actions.test_actions import action, keyed, module, publish_to, started, watch

__all__ = ["started"]  # the fixture, used by name


def test_a_publish_runs_a_command_then_the_steps_after_it(started, tmp_path):
    out = tmp_path / "seen.txt"
    run = module("Do", "do-execute-system",
                 Command=escape(f"sleep 0.2; printf '%s' '{{{{AMPS_SOW_KEY}}}}' > {out}; cat {out} >&2"))
    s = started(action(module("On", "on-publish-message", Topic="jobs", MessageType="json"), run,
                       publish_to("done", '{"after":"{{AMPS_SOW_KEY}}"}')),
                sow=keyed("jobs", tmp_path))
    c = s.client("worker")
    box = watch(c, "done")
    c.publish("jobs", '{"id":7}')
    assert box.wait_for(1)
    [done] = box.bodies("done")
    assert done["after"] and out.read_text() == done["after"]  # the command ran first


def test_a_slow_command_does_not_hold_other_clients(started, tmp_path):
    gate = tmp_path / "gate"
    # the command waits for a file the test writes only after the server answered a client
    run = module("Do", "do-execute-system", Command=escape(f"while [ ! -e {gate} ]; do sleep 0.02; done"),
                 Timeout="20s")
    s = started(action(module("On", "on-publish-message", Topic="slow", MessageType="json"), run,
                       publish_to("done", '{"ok":1}')))
    c = s.client("a")
    box = watch(c, "done", "other")
    c.publish("slow", '{"x":1}')
    c.publish("other", '{"y":2}')  # delivered while the command still runs
    assert box.wait_until(lambda items: any(t == "other" for _, t, _ in items))
    assert box.bodies("done") == []
    gate.write_text("")
    assert box.wait_until(lambda items: any(t == "done" for _, t, _ in items))
