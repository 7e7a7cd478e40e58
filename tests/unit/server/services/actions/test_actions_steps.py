"""The actions engine's steps and variables, one by one, on an engine over a bare broker
(no server, no sockets): what each If holds and each Do sets or asks of its host."""

from __future__ import annotations

import logging
import shutil
from collections import namedtuple

import pytest

from amps_emulator.config.model import Action, ActionOption, ActionStep
from amps_emulator.server.core.clock import TestClock
from amps_emulator.server.messaging.broker import Broker
from amps_emulator.server.services.actions import Actions, expand
from amps_emulator.server.services.actions.steps import ECHO_ID, format_value
from amps_emulator.server.services.actions.variables import clock_variables

START = 1_700_000_000.0


class _Turn:
    def __init__(self) -> None:
        self.requests = 0

    def request(self) -> None:
        self.requests += 1

    def dirty(self, client) -> None:
        pass


class _Host:
    """What the engine asks of the server, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.transports = ["a", "b"]

    def action_set_transport(self, name, enabled):
        if name is not None and name not in self.transports:
            raise LookupError(f"no transport {name!r}")
        self.calls.append(("transport", name, enabled))
        return [name] if name else list(self.transports)

    def action_switch_security(self, what, enabled):
        self.calls.append(("switch", what, enabled))

    def action_reset_security(self, what, transport, user):
        self.calls.append(("reset", what, transport, user))
        return 2

    def request_shutdown(self):
        self.calls.append(("shutdown",))

    def journal_pins(self):
        return []

    def action_truncate_statistics(self, age):
        self.calls.append(("truncate-statistics", age))
        return "removed what was older"


def step(module: str, kind: str = "do", **options: str | list[str]) -> ActionStep:
    opts = []
    for name, value in options.items():
        for v in value if isinstance(value, list) else [value]:
            opts.append(ActionOption(name, v))
    return ActionStep(file="t.xml", line=7, kind=kind, module=module, options=tuple(opts))


def action(*steps: ActionStep, on: ActionStep | None = None) -> Action:
    on = on or step("amps-action-on-startup", "on")
    return Action(file="t.xml", line=3, on=(on,), steps=steps)


@pytest.fixture
def engine():
    broker = Broker(instance_name="inst", timebase=TestClock(start=START), turn=_Turn())
    return Actions("inst", [], broker, host=_Host())


def run(engine: Actions, *steps: ActionStep, **variables) -> tuple[bool, dict]:
    """Run the steps as one action; (ran to the end?, the variables the last step saw)."""
    seen: dict = {}

    def capture(s, v):
        seen.update(v)
        return True

    engine._steps["test-capture"] = capture
    ok = engine.run(action(*steps, step("test-capture")), dict(variables))
    return ok, seen


def test_expansion_defaults_bytes_and_undefined():
    v = {"A": "x", "DATA": b'{"n":1}'}
    assert expand("{{A}}-{{ A }}-{{NOPE}}|{{DATA}}", v) == b'x-x-|{"n":1}'
    assert expand("id=1{{AMPS_BYTE_01}}x=2{{AMPS_BYTE_01}}", {}) == b"id=1\x01x=2\x01"
    assert expand("{{AMPS_BYTE_7f}}{{AMPS_BYTE_FF}}", {}) == b"\xff"  # hex digits are uppercase
    assert clock_variables(START) == {"AMPS_DATETIME": "2023-11-14T22:13:20.000000Z",
                                      "AMPS_UNIX_TIMESTAMP": "1700000000"}


def test_every_run_has_the_instance_and_the_server_clock(engine):
    engine.broker.timebase.advance(5)
    ok, seen = run(engine)
    assert ok and seen["AMPS_INSTANCE_NAME"] == "inst"
    assert seen["AMPS_UNIX_TIMESTAMP"] == str(int(START) + 5)


def test_if_condition(engine, caplog):
    assert run(engine, step("amps-action-if-condition", "if", Condition='"{{EV}}" = "late"'),
               EV="late")[0]
    assert not run(engine, step("amps-action-if-condition", "if", Condition='"{{EV}}" = "late"'),
                   EV="done")[0]
    # against the triggering message
    assert run(engine, step("amps-action-if-condition", "if", Condition="/qty > 3"),
               AMPS_DATA=b'{"qty":5}')[0]
    with caplog.at_level(logging.ERROR, logger="amps_emulator.actions"):
        assert not run(engine, step("amps-action-if-condition", "if", Condition="/a = = {{X}}"))[0]
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "invalid condition" in errors[0].getMessage()


def test_if_file_system_usage(engine, tmp_path):
    usage = shutil.disk_usage(tmp_path)
    used = 100.0 * (usage.total - usage.free) / usage.total
    ok, seen = run(engine, step("amps-action-if-file-system-usage", "if", Path=str(tmp_path),
                                GreaterThan="0%"))
    assert ok and float(seen["AMPS_FILE_SYSTEM_USAGE"]) == pytest.approx(used, abs=1)
    if used < 99.9:
        assert not run(engine, step("amps-action-if-file-system-usage", "if", Path=str(tmp_path),
                                    GreaterThan="99.9"))[0]
    # a path that cannot be read counts as false, never as passed
    assert not run(engine, step("amps-action-if-file-system-usage", "if",
                                Path=str(tmp_path / "missing"), GreaterThan="0%"))[0]


def test_an_if_module_without_an_implementation_is_false(engine):
    assert not run(engine, step("amps-action-if-something-new", "if"))[0]


def test_extract_values_through_the_filter_engine(engine):
    ok, seen = run(engine, step("amps-action-do-extract-values", MessageType="json",
                                Value=["SYM=/symbol", "Q=/qty * 2", "HALF=/qty * 0.5",
                                       "MISSING=/nope", "BIG=/qty > 3"]),
                   AMPS_DATA=b'{"symbol":"IBM","qty":5}')
    assert ok
    assert (seen["SYM"], seen["Q"], seen["HALF"], seen["MISSING"], seen["BIG"]) == \
        ("IBM", "10", "2.5", "", "true")
    ok, _ = run(engine, step("amps-action-do-extract-values", MessageType="json", Value="nonsense"),
                AMPS_DATA=b"{}")
    assert not ok


def test_extract_values_of_another_message_type(engine):
    ok, seen = run(engine, step("amps-action-do-extract-values", MessageType="nvfix",
                                Data="{{MSG}}", Value="X=/x"), MSG=b"id=1\x01x=abc\x01")
    assert ok and seen["X"] == "abc"


def test_format_value():
    assert [format_value(v) for v in (None, True, 3, 3.0, 2.5, "s")] == \
        ["", "true", "3", "3", "2.5", "s"]


def test_translate_data(engine):
    t = step("amps-action-do-translate-data", Data="{{S}}", Value="OUT",
             Case=["N=new", "F=filled"], Default="unknown")
    assert run(engine, t, S="F")[1]["OUT"] == "filled"
    assert run(engine, t, S="Z")[1]["OUT"] == "unknown"
    no_default = step("amps-action-do-translate-data", Data="{{S}}", Value="OUT", Case="N=new")
    assert run(engine, no_default, S="Z")[1]["OUT"] == "Z"


def test_increment_counter_keeps_counting_across_runs(engine):
    inc = step("amps-action-do-increment-counter", Key="orders-{{K}}", Value="N")
    assert [run(engine, inc, K="a")[1]["N"] for _ in range(3)] == ["1", "2", "3"]
    assert run(engine, inc, K="b")[1]["N"] == "1"
    assert engine.counters == {"orders-a": 3, "orders-b": 1}


def test_server_steps_ask_the_host(engine):
    host = engine.host
    assert run(engine, step("amps-action-do-disable-transport", Transport="a"),
               step("amps-action-do-enable-transport"),
               step("amps-action-do-disable-entitlement"),
               step("amps-action-do-reset-authentication", AuthenticationId="bob"),
               step("amps-action-do-shutdown"))[0]
    assert host.calls == [("transport", "a", False), ("transport", None, True),
                          ("switch", "entitlement", False),
                          ("reset", "authentication", None, "bob"), ("shutdown",)]
    # a transport that does not exist fails the step: the rest does not run
    host.calls.clear()
    assert not run(engine, step("amps-action-do-disable-transport", Transport="nope"),
                   step("amps-action-do-shutdown"))[0]
    assert host.calls == []


def test_echo_logs_29_0103(engine, caplog):
    with caplog.at_level(logging.INFO, logger="amps_emulator.actions"):
        assert run(engine, step("amps-action-do-echo-message", Message="instance={{AMPS_INSTANCE_NAME}}"),
                   step("amps-action-do-compact-sow"))[0]
    echo = [r for r in caplog.records if getattr(r, "amps_id", None) == ECHO_ID]
    assert [r.getMessage() for r in echo] == ["instance=inst"]
    assert echo[0].levelno == logging.INFO
    assert any("compact-sow" in r.getMessage() for r in caplog.records)


def test_compact_sow_skips_what_is_in_memory_and_wants_topic_with_message_type(engine, caplog):
    """Nothing on disk to compact: one line saying why (no SOW; --memory; a transient topic);
    a Topic without its MessageType (or the reverse) fails the step."""
    from types import SimpleNamespace

    from amps_emulator.sow import Sow, TopicSpec

    def lines():
        return [r.getMessage() for r in caplog.records if "compact-sow" in r.getMessage()]

    with caplog.at_level(logging.INFO, logger="amps_emulator.actions"):
        assert run(engine, step("amps-action-do-compact-sow"))[0]
        assert lines()[-1].endswith("no SOW topic is persistent")
        sow = Sow([TopicSpec("scratch", durability="transient")])
        engine.broker.sow_service = SimpleNamespace(  # type: ignore[assignment]
            sow=sow, topics_for=lambda name: [sow.topic(name)] if name in sow else [])
        engine.broker.memory = True
        assert run(engine, step("amps-action-do-compact-sow"))[0]
        assert lines()[-1].endswith("the SOW is kept in memory (--memory)")
        engine.broker.memory = False
        assert run(engine, step("amps-action-do-compact-sow", Topic="scratch",
                                MessageType="json"))[0]
        assert lines()[-1].endswith("'scratch' are kept in memory (transient)")
        assert run(engine, step("amps-action-do-compact-sow", Topic="nope",
                                MessageType="json"))[0]
        assert lines()[-1].endswith("no SOW topic matches 'nope' (json)")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="amps_emulator.actions"):
        assert not run(engine, step("amps-action-do-compact-sow", Topic="scratch"))[0]
    assert "go together" in caplog.records[-1].getMessage()


def test_truncate_statistics_asks_the_host_and_vacuum_is_deprecated(engine, caplog):
    with caplog.at_level(logging.INFO, logger="amps_emulator.actions"):
        assert run(engine, step("amps-action-do-truncate-statistics", Age="{{AGE}}"), AGE="2h")[0]
        assert run(engine, step("amps-action-do-vacuum-statistics"))[0]
        assert not run(engine, step("amps-action-do-truncate-statistics", Age="soon"))[0]
    assert engine.host.calls == [("truncate-statistics", 7200.0)]
    said = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert (logging.INFO, "amps-action-do-truncate-statistics: removed what was older") in said
    assert any(level == logging.WARNING and "vacuum-statistics is deprecated" in text
               for level, text in said)


def test_execute_event_runs_the_actions_listening_for_it(engine):
    got = []
    engine._steps["test-record"] = lambda s, v: got.append(v["WHO"]) or True
    listener = action(step("test-record"), on=step("amps-action-on-execute-event", "on",
                                                   Event="ping"))
    from amps_emulator.server.services.actions.engine import _Trigger

    engine.triggers["amps-action-on-execute-event"] = [_Trigger(listener.on[0], listener)]
    assert run(engine, step("amps-action-do-execute-event", Event="ping"), WHO="a")[0]
    assert run(engine, step("amps-action-do-execute-event", EventVariable="E"), E="ping", WHO="b")[0]
    assert run(engine, step("amps-action-do-execute-event", Event="other"), WHO="c")[0]
    assert got == ["a", "b"]
    assert not run(engine, step("amps-action-do-execute-event"))[0]  # no event named


def test_replication_steps_use_the_injected_control(engine, caplog):
    with caplog.at_level(logging.INFO, logger="amps_emulator.actions"):
        assert run(engine, step("amps-action-do-downgrade-replication", Age="1m"))[0]
    assert any("no replication destinations" in r.getMessage() for r in caplog.records)
    calls = []
    Control = namedtuple("Control", "downgrade upgrade")
    engine.replication_control = Control(
        lambda age, grace: calls.append(("down", age, grace)) or ["B"],
        lambda age, grace: calls.append(("up", age, grace)) or [])
    assert run(engine, step("amps-action-do-downgrade-replication", Age="1m", GracePeriod="10s"),
               step("amps-action-do-upgrade-replication", Age="5s"))[0]
    assert calls == [("down", 60.0, 10.0), ("up", 5.0, 0.0)]


def test_a_chain_stops_at_the_depth_limit(engine):
    from amps_emulator.server.services.actions import MAX_DEPTH

    depth = []

    def again(s, v):
        depth.append(engine._depth)
        engine.run(loop, {})
        return True

    engine._steps["test-again"] = again
    loop = action(step("test-again"))
    assert engine.run(loop, {})
    assert depth == list(range(1, MAX_DEPTH + 1))


@pytest.mark.parametrize("on, words", [
    ("<Module>amps-action-on-publish-message</Module><Options><Topic>a</Topic>"
     "<MessageType>json</MessageType><Filter>/a = = 1</Filter></Options>", "invalid <Filter>"),
    ("<Module>amps-action-on-schedule</Module><Options><Every>{{X}}</Every></Options>",
     "expected a duration"),
    ("<Module>amps-action-on-oof-message</Module><Options><Topic>a</Topic>"
     "<MessageType>json</MessageType><Type>sometimes</Type></Options>", "invalid <Type>"),
])
def test_what_only_the_engine_can_check_fails_the_start_with_file_and_line(on, words):
    from amps_emulator.config import ConfigError, loads_config
    from amps_emulator.server.app import Server

    xml = ("<AMPSConfig><Name>x</Name><Transports><Transport><Name>t</Name><Type>tcp</Type>"
           "<InetAddr>127.0.0.1:0</InetAddr><Protocol>amps</Protocol></Transport></Transports>\n"
           f"<Actions><Action>\n<On>{on}</On><Do><Module>amps-action-do-nothing</Module></Do>"
           "</Action></Actions></AMPSConfig>")
    with pytest.raises(ConfigError) as err:
        Server(loads_config(xml, "bad.xml"))
    assert "bad.xml:3:" in str(err.value) and words in str(err.value)


def test_rotate_logs_starts_the_next_file_of_each_file_target(engine, tmp_path):
    from amps_emulator.server.services.log_targets import RotatingFileTarget

    target = RotatingFileTarget(str(tmp_path / "amps-%n.log"))
    logger = logging.getLogger("amps_emulator")
    logger.addHandler(target)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    try:
        logger.info("before")
        assert run(engine, step("amps-action-do-rotate-logs"))[0]
        logger.info("after")
    finally:
        logger.removeHandler(target)
        logger.setLevel(old_level)
        target.close()
    first, second = (tmp_path / "amps-00000.log").read_text(), (tmp_path / "amps-00001.log").read_text()
    assert "before" in first and "after" not in first
    assert "after" in second and "rotated 1 log file(s)" in second


def test_a_dry_start_reads_the_actions_but_runs_none():
    from amps_emulator.config import loads_config
    from amps_emulator.server.ops.preflight import dry_start

    def xml(flt: str) -> str:
        return ("<AMPSConfig><Name>x</Name><Transports><Transport><Name>t</Name><Type>tcp</Type>"
                "<InetAddr>127.0.0.1:0</InetAddr><Protocol>amps</Protocol></Transport></Transports>\n"
                "<Actions><Action><On><Module>amps-action-on-startup</Module></On>"
                "<Do><Module>amps-action-do-execute-system</Module><Options><Command>x</Command>"
                "</Options></Do><Do><Module>amps-action-do-shutdown</Module></Do></Action>\n"
                "<Action><On><Module>amps-action-on-publish-message</Module><Options><Topic>a</Topic>"
                f"<MessageType>json</MessageType><Filter>{flt}</Filter></Options></On>"
                "<Do><Module>amps-action-do-nothing</Module></Do></Action></Actions></AMPSConfig>")

    assert dry_start(loads_config(xml("/x = 2"), "ok.xml")) == ([], [])  # no step ran: no warning
    issues, _ = dry_start(loads_config(xml("/x = = 2"), "bad.xml"))
    assert [(i.line, "invalid <Filter>" in i.reason) for i in issues] == [(3, True)]


def test_a_message_no_trigger_watches_is_not_decoded(engine, monkeypatch):
    """The message path tells every observer of a message another observer covers (a view
    over ``other``, say): the actions decode only what one of theirs looks at."""
    from amps_emulator.server.core.message import Message
    from amps_emulator.server.services.actions.engine import _Trigger

    got = []
    engine._steps["test-record"] = lambda s, v: got.append(v["AMPS_TOPIC"]) or True
    on = step("amps-action-on-publish-message", "on", Topic="orders", MessageType="json",
              Filter="/qty > 1")
    engine.triggers["amps-action-on-publish-message"] = [_Trigger(on, action(step("test-record"),
                                                                             on=on))]
    decoded = []
    real = engine.broker.bodies

    class Counting:
        def decode(self, body, topic):
            decoded.append(topic)
            return real.decode(body, topic)

    monkeypatch.setattr(engine.broker, "bodies", Counting())
    engine.message_published(Message("other", b'{"qty":5}'), None)
    engine.message_published(Message("other", b'{"qty":5}', sow_key="k1"), None)
    assert decoded == [] and got == []
    engine.message_published(Message("orders", b'{"qty":5}'), None)
    assert decoded == ["orders"] and got == ["orders"]
