"""The command line: readiness line, clean shutdown on signals, sample and verify config."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import AMPS
import pytest

from tests.support.paths import ROOT


def start(tmp_path: Path, *args: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "amps_emulator.server", "--data-dir", str(tmp_path / "data"),
         "--listen", "127.0.0.1:0", *args],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**_env(), "PYTHONPATH": str(ROOT)},
    )
    line = proc.stdout.readline()  # blocks until the server says it is ready (or exits)
    if not line.startswith("ready: "):
        proc.kill()
        raise AssertionError(f"no ready line: {line!r} {proc.stderr.read()}")
    return proc, line.split()[1]


def _env() -> dict:
    import os

    return dict(os.environ)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_ready_line_then_clean_shutdown(tmp_path, sig):
    proc, uri = start(tmp_path)
    assert uri.startswith("tcp://127.0.0.1:") and uri.endswith("/amps/json")
    c = AMPS.Client("cli-probe")
    c.connect(uri)
    c.logon(5000)
    c.publish("t", "{}")
    c.flush(5000)
    c.close()
    proc.send_signal(sig)
    assert proc.wait(10) == 0
    assert "Traceback" not in proc.stderr.read()


def test_the_builtin_config_answers_a_first_sow_on_orders(tmp_path):
    """The README's first steps with the official client: publish orders keyed by /id, then
    query them, with no config file (AMPS needs SOW topics configured; the built-in has one)."""
    proc, uri = start(tmp_path)
    try:
        c = AMPS.Client("first-steps")
        c.connect(uri)
        c.logon(5000)
        for body in ('{"id": 1, "qty": 500}', '{"id": 2, "qty": 5}', '{"id": 1, "qty": 600}'):
            c.publish("orders", body)
        c.flush(5000)
        rows = sorted(m.get_data() for m in c.sow("orders", timeout=5000)
                      if m.get_command() == "sow")
        assert rows == ['{"id": 1, "qty": 600}', '{"id": 2, "qty": 5}']
        c.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    assert (tmp_path / "data" / "sow").is_dir()


def test_sample_config_is_printed_and_verifies(tmp_path):
    out = subprocess.run([sys.executable, "-m", "amps_emulator.server", "--sample-config"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    assert "<AMPSConfig>" in out and "<!--" in out
    sample = tmp_path / "sample.xml"
    sample.write_text(out)
    res = subprocess.run([sys.executable, "-m", "amps_emulator.server", "--verify-config", str(sample)],
                         cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_verify_config_lists_every_error_with_location(tmp_path):
    bad = tmp_path / "bad.xml"
    bad.write_text(
        "<AMPSConfig>\n"
        "  <Name>bad</Name>\n"
        "  <Transports>\n"
        "    <Transport>\n"
        "      <Name>json-tcp</Name>\n"
        "      <Type>tcp</Type>\n"
        "      <InetAddr>not-a-port</InetAddr>\n"
        "      <MessageType>json</MessageType>\n"
        "      <Protocol>amps</Protocol>\n"
        "    </Transport>\n"
        "  </Transports>\n"
        "  <SOW>\n"
        "    <Topic>\n"
        "      <Name>orders</Name>\n"
        "      <MessageType>json</MessageType>\n"
        "      <Kye>/id</Kye>\n"
        "    </Topic>\n"
        "  </SOW>\n"
        "</AMPSConfig>\n"
    )
    res = subprocess.run([sys.executable, "-m", "amps_emulator.server", "--verify-config", str(bad)],
                         cwd=ROOT, capture_output=True, text=True)
    assert res.returncode != 0
    assert f"{bad}:7:" in res.stderr and f"{bad}:16:" in res.stderr


def test_bad_config_fails_fast_when_starting(tmp_path):
    bad = tmp_path / "broken.xml"
    bad.write_text("<AMPSConfig><Name>x</Name>\n<Transports><Transport>\n</AMPSConfig>\n")
    res = subprocess.run([sys.executable, "-m", "amps_emulator.server", str(bad)], cwd=ROOT,
                         capture_output=True, text=True, timeout=30)
    assert res.returncode != 0
    assert str(bad) in res.stderr


@pytest.mark.parametrize("mode", [(), ("--verify-config",), ("--dump-config",)])
@pytest.mark.parametrize("name, why", [("missing.xml", "No such file or directory"),
                                       ("a-directory", "Is a directory")])
def test_a_config_file_that_cannot_be_read_is_named_without_a_line_number(tmp_path, mode, name, why):
    (tmp_path / "a-directory").mkdir()
    path = tmp_path / name
    res = subprocess.run([sys.executable, "-m", "amps_emulator.server", *mode, str(path)],
                         cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert res.returncode == 1
    assert f"{path}: cannot read configuration file: {why}" in res.stderr.splitlines()[0]
    assert f"{path}:0:" not in res.stderr and "Traceback" not in res.stderr


def test_engine_level_config_rules_fail_fast_with_location(tmp_path):
    from tests.support.servers import config_xml

    cfg = tmp_path / "tqd.xml"
    cfg.write_text(config_xml(tmp_path / "data", extra=(
        "<SOW><Queue><Name>q</Name><MessageType>json</MessageType>"
        "<TargetQueueDepth>5</TargetQueueDepth></Queue></SOW>")))
    res = subprocess.run([sys.executable, "-m", "amps_emulator.server", str(cfg), "--listen", "127.0.0.1:0"],
                         cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert res.returncode != 0
    assert f"{cfg}:7:" in res.stderr and "TargetQueueDepth" in res.stderr
