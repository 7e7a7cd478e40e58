"""ampServer habits without a process: -D defines, --dump-config, the AMPS log line, seed
files and init directories (the command line end to end: tests/integration/cli/test_habits.py)."""

from __future__ import annotations

import re
import time

import pytest

from amps_emulator.config import ConfigError, default_config, load_config, loads_config
from amps_emulator.config.dump import dump_config_file, dump_config_object
from amps_emulator.server.ops.cli import (
    _parser,
    apply_environment,
    config_environment,
    initialization_line,
    parse_defines,
    version_text,
)
from amps_emulator.server.ops.seed import SeedError, parse_seed_line, read_seed, scan_init_dir
from amps_emulator.server.services.log_targets import amps_line, amps_timestamp

CONFIG = """<AMPSConfig>
  <Name>${NAME}</Name>
  <Description>on ${AMPS_VERSION} &amp; more</Description>
  <Include>transports.xml</Include>
  <SOW>
    <Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
      <Durability>transient</Durability></Topic>
  </SOW>
</AMPSConfig>
"""
TRANSPORTS = """<?xml version="1.0"?>
<!-- included -->
<Transports><Transport><Name>t</Name><Type>tcp</Type><InetAddr>${PORT}</InetAddr>
<MessageType>json</MessageType><Protocol>amps</Protocol></Transport></Transports>
"""


def _args(*argv: str, environ: dict[str, str] | None = None):
    return apply_environment(_parser().parse_args(list(argv)), environ or {})


def test_defines_attached_or_separate_and_other_flags_unaffected():
    args = _args("-DNAME=a", "-D", "PORT=9", "--data-dir", "d", "--durability", "strict",
                 "cfg.xml")
    assert args.defines == ["NAME=a", "PORT=9"]
    assert (args.data_dir, args.durability, args.config) == ("d", "strict", "cfg.xml")
    assert parse_defines(args.defines) == {"NAME": "a", "PORT": "9"}
    assert parse_defines(["X=1", "X=a=b"]) == {"X": "a=b"}  # the last one wins, '=' in a value


@pytest.mark.parametrize("word", ["NOVALUE", "=x", "1A=x", "A B=x"])
def test_malformed_define_is_a_usage_error(word):
    with pytest.raises(SystemExit, match="want -DNAME=VALUE"):
        parse_defines([word])


def test_define_wins_over_the_environment():
    env = config_environment({"NAME": "fromD"}, {"NAME": "fromenv", "OTHER": "o"})
    assert env == {"NAME": "fromD", "OTHER": "o"}


def test_server_version_from_option_environment_and_default():
    assert _args().server_version == "5.3.4.0"
    assert _args(environ={"AMPS_EMULATOR_SERVER_VERSION": "5.3.5.1"}).server_version == "5.3.5.1"
    assert _args("--server-version", "6.0.0.0",
                 environ={"AMPS_EMULATOR_SERVER_VERSION": "5.3.5.1"}).server_version == "6.0.0.0"
    with pytest.raises(SystemExit, match="want a version X.Y.Z.W"):
        _args(environ={"AMPS_EMULATOR_SERVER_VERSION": "5.3"})


def test_version_text_names_both_versions():
    text = version_text("5.3.5.1")
    assert text.startswith("amps-emulator ")
    assert "AMPS version announced: 5.3.5.1" in text


def _write_config(tmp_path):
    (tmp_path / "transports.xml").write_text(TRANSPORTS)
    path = tmp_path / "amps.xml"
    path.write_text(CONFIG)
    return path


def test_dump_config_splices_includes_and_substitutes_defines(tmp_path):
    path = _write_config(tmp_path)
    env = config_environment({"NAME": "fromD", "PORT": "127.0.0.1:0"}, {"NAME": "fromenv"})
    text = dump_config_file(path, env=env, amps_version="5.3.5.1", notes=["a note"])
    assert "<Name>fromD</Name>" in text
    assert "<Description>on 5.3.5.1 &amp; more</Description>" in text
    assert "<InetAddr>127.0.0.1:0</InetAddr>" in text
    assert "Include" not in text and "included" not in text and "${" not in text
    assert text.rstrip().endswith("<!-- a note -->")
    # the dump is itself a configuration that loads to the same thing
    again = loads_config(text, env={})
    original = load_config(path, env=env, amps_version="5.3.5.1")
    assert again.name == original.name == "fromD"
    assert [t.inet_addr for t in again.transports] == ["127.0.0.1:0"]
    assert [t.name for t in again.sow_topics] == ["orders"]


def test_dump_config_refuses_what_start_up_refuses(tmp_path):
    path = _write_config(tmp_path)
    with pytest.raises(ConfigError) as err:
        dump_config_file(path, env={"NAME": "x"})
    assert "PORT is not set" in str(err.value)
    assert "transports.xml:3" in str(err.value)


def test_dump_of_the_builtin_default_loads_back(tmp_path):
    cfg = default_config(data_dir=str(tmp_path / "d"))
    again = loads_config(dump_config_object(cfg), env={})
    assert again.name == cfg.name
    assert [(t.name, t.inet_addr, t.message_type) for t in again.transports] == \
        [(t.name, t.inet_addr, t.message_type) for t in cfg.transports]
    assert again.transaction_log is not None and cfg.transaction_log is not None
    assert again.transaction_log.journal_directory == cfg.transaction_log.journal_directory
    assert again.sow_directory == cfg.sow_directory
    assert [(t.name, t.message_type, t.keys, t.resolved_file_name) for t in again.sow_topics] == \
        [(t.name, t.message_type, t.keys, t.resolved_file_name) for t in cfg.sow_topics]


def test_amps_log_line_format():
    now = 1_700_000_000.25
    stamp = amps_timestamp(now)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{7}[+-]\d\d:\d\d", stamp), stamp
    assert stamp.split(".")[1].startswith("2500000")
    local = time.localtime(now)
    assert stamp.startswith(time.strftime("%Y-%m-%dT%H:%M:%S", local))
    assert amps_line(now, 7, "info", "00-0015", "AMPS initialization completed (0 seconds).") == \
        f"{stamp} [7] info: 00-0015 AMPS initialization completed (0 seconds)."
    assert amps_timestamp(10.99999999).split(".")[1].startswith("0000000")  # rounds up a second


def test_initialization_line_counts_whole_seconds():
    line = initialization_line(time.monotonic() - 2.5)
    assert re.fullmatch(r"\S+ \[\d+\] info: 00-0015 AMPS initialization completed "
                        r"\(2 seconds\)\.", line), line


def _cfg():
    return loads_config("""<AMPSConfig><Name>s</Name>
      <SOW><Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
      <Durability>transient</Durability></Topic></SOW></AMPSConfig>""", env={})


def test_seed_lines():
    cfg = _cfg()
    msg = parse_seed_line('{"topic": "orders", "data": {"id": 1}, "expiration": 60}', "f", 3, cfg)
    assert msg is not None
    assert (msg.topic, msg.data, msg.type, msg.expiration, msg.line) == \
        ("orders", b'{"id":1}', "json", 60, 3)
    text = parse_seed_line('{"topic": "t", "data": "{\\"a\\": 1}"}', "f", 1, cfg)
    assert text is not None and text.data == b'{"a": 1}'  # a string is the body text as is
    assert parse_seed_line("   ", "f", 1, cfg) is None
    assert parse_seed_line("# a comment", "f", 1, cfg) is None


@pytest.mark.parametrize("line, reason", [
    ('{"topic": "t"', "not a JSON line"),
    ('[1, 2]', "want a JSON object"),
    ('{"data": {}}', '"topic" is required'),
    ('{"topic": "t"}', '"data" is required'),
    ('{"topic": "t", "data": {}, "colour": 1}', "unknown field(s) 'colour'"),
    ('{"topic": "t", "data": "not json"}', "not JSON"),
    ('{"topic": "t", "data": {}, "type": "nosuch"}', "'nosuch' is not declared"),
    ('{"topic": "orders", "data": "8=FIX", "type": "fix"}', "SOW topic of message type 'json'"),
    ('{"topic": "t", "data": {"a": 1}, "type": "fix"}', "must be a string"),
    ('{"topic": "t", "data": {}, "expiration": -1}', '"expiration" must be'),
    ('{"topic": "t", "data": {}, "expiration": true}', '"expiration" must be'),
])
def test_bad_seed_line_names_file_line_and_reason(line, reason):
    with pytest.raises(SeedError) as err:
        parse_seed_line(line, "seed.jsonl", 4, _cfg())
    assert str(err.value).startswith("seed.jsonl:4: ")
    assert reason in str(err.value)


def test_read_seed_reports_the_line_of_the_bad_one(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text('{"topic": "a", "data": {}}\n\n{"topic": 5, "data": {}}\n')
    with pytest.raises(SeedError, match=r"s\.jsonl:3: \"topic\" is required"):
        read_seed(str(path))
    with pytest.raises(SeedError, match="cannot read the seed file"):
        read_seed(str(tmp_path / "missing.jsonl"))


def test_init_dir_scan(tmp_path):
    (tmp_path / "20-b.jsonl").write_text("")
    (tmp_path / "10-a.jsonl").write_text("")
    (tmp_path / "amps.xml").write_text("<AMPSConfig/>")
    (tmp_path / "README").write_text("")
    found = scan_init_dir(str(tmp_path))
    assert [p.rsplit("/", 1)[1] for p in found.seeds] == ["10-a.jsonl", "20-b.jsonl"]
    assert found.config == str(tmp_path / "amps.xml")
    assert found.ignored == ["README"]
    (tmp_path / "other.xml").write_text("<AMPSConfig/>")
    with pytest.raises(SeedError, match="more than one"):
        scan_init_dir(str(tmp_path))
    with pytest.raises(SeedError, match="cannot read the init directory"):
        scan_init_dir(str(tmp_path / "missing"))
