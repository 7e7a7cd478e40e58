"""ampServer habits end to end: -D, --dump-config, --version, the 00-0015 line, seed data and
the init directory, seen through the official client."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import AMPS
import pytest

from tests.support.paths import ROOT

INIT_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{7}[+-]\d\d:\d\d \[\d+\] info: "
                       r"00-0015 AMPS initialization completed \(\d+ seconds\)\.$")
CONFIG = """<AMPSConfig>
  <Name>${NAME}</Name>
  <Transports><Transport><Name>t</Name><Type>tcp</Type><InetAddr>127.0.0.1:${PORT}</InetAddr>
    <MessageType>json</MessageType><Protocol>amps</Protocol></Transport></Transports>
  <TransactionLog><JournalDirectory>./journal</JournalDirectory>
    <Topic><Name>.*</Name><MessageType>json</MessageType></Topic></TransactionLog>
  <SOW><Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
    <FileName>./sow/%n.sow</FileName></Topic></SOW>
</AMPSConfig>
"""
SEED = [
    {"topic": "orders", "data": {"id": 1, "qty": 5}},
    {"topic": "orders", "data": {"id": 2, "qty": 7}},
    {"topic": "orders", "data": {"id": 1, "qty": 6}},  # replaces the first
    {"topic": "fills", "data": {"fill": 1}},  # no SOW: only in the transaction log
]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AMPS_EMULATOR_")}
    return {**env, "PYTHONPATH": str(ROOT), **extra}


def _cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "amps_emulator.server", *args]


def _write(tmp_path: Path, name: str, lines: list[dict] | str) -> Path:
    path = tmp_path / name
    path.write_text(lines if isinstance(lines, str) else "".join(json.dumps(x) + "\n" for x in lines))
    return path


def _start(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(_cmd(*args), cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env or _env())
    assert proc.stdout is not None
    ready = proc.stdout.readline()  # the ready line stays first: tests and benches read it
    if not ready.startswith("ready: "):
        proc.kill()
        raise AssertionError(f"no ready line: {ready!r} {proc.communicate()[1]}")
    init = proc.stdout.readline()  # then AMPS's own line, which AMPS harnesses wait for
    assert INIT_LINE.match(init.rstrip("\n")), init
    return proc, ready.split()[1]


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    assert proc.wait(30) == 0
    assert proc.stderr is not None
    assert "Traceback" not in proc.stderr.read()


def _sow(uri: str, topic: str) -> list[dict]:
    c = AMPS.Client("habits-probe")
    c.connect(uri)
    c.logon(5000)
    try:
        return sorted((json.loads(m.get_data()) for m in c.sow(topic, timeout=5000)
                       if m.get_command() == "sow"), key=lambda d: d.get("id", 0))
    finally:
        c.close()


def _first_replayed(uri: str, topic: str) -> dict:
    """The first message the transaction log replays for ``topic`` (a bookmark subscription
    from the start of the log)."""
    c = AMPS.Client("habits-replay")
    c.connect(uri)
    c.logon(5000)
    try:
        for m in c.bookmark_subscribe(topic, AMPS.Client.Bookmarks.EPOCH, timeout=5000):
            if m.get_command() in ("p", "publish"):
                return json.loads(m.get_data())
        raise AssertionError(f"nothing replayed for {topic}")
    finally:
        c.close()


def test_defines_seed_and_initialization_line(tmp_path):
    cfg = _write(tmp_path, "amps.xml", CONFIG)
    seed = _write(tmp_path, "seed.jsonl", SEED)
    proc, uri = _start(tmp_path, "-DNAME=habits", "-D", "PORT=0", "--seed", str(seed), str(cfg),
                       env=_env(NAME="not-this-one"))
    try:
        assert _sow(uri, "orders") == [{"id": 1, "qty": 6}, {"id": 2, "qty": 7}]
        assert _first_replayed(uri, "fills") == {"fill": 1}
    finally:
        _stop(proc)
    # the seed went through the transaction log: a restart without it replays the same SOW
    proc, uri = _start(tmp_path, "-DNAME=habits", "-DPORT=0", str(cfg))
    try:
        assert _sow(uri, "orders") == [{"id": 1, "qty": 6}, {"id": 2, "qty": 7}]
    finally:
        _stop(proc)


def test_bad_seed_line_fails_start_up_with_file_and_line(tmp_path):
    cfg = _write(tmp_path, "amps.xml", CONFIG)
    seed = _write(tmp_path, "seed.jsonl", '{"topic": "orders", "data": {"id": 1}}\n'
                                          '{"topic": "orders", "data": null}\n')
    res = subprocess.run(_cmd("-DNAME=x", "-DPORT=0", "--seed", str(seed), str(cfg)), cwd=tmp_path,
                         capture_output=True, text=True, env=_env(), timeout=60)
    assert res.returncode == 1
    assert "ready:" not in res.stdout and "00-0015" not in res.stdout
    assert f"{seed}:2: publish to 'orders' refused: bad sow key" in res.stderr
    bad = _write(tmp_path, "bad.jsonl", '{"topic": "orders"}\n')
    res = subprocess.run(_cmd("-DNAME=x", "-DPORT=0", "--seed", str(bad), str(cfg)), cwd=tmp_path,
                         capture_output=True, text=True, env=_env(), timeout=60)
    assert res.returncode == 1 and f"{bad}:1: \"data\" is required" in res.stderr


def test_init_dir_gives_config_and_seeds_in_name_order(tmp_path):
    init = tmp_path / "init.d"
    init.mkdir()
    _write(init, "amps.xml", CONFIG.replace("${NAME}", "init").replace("${PORT}", "0"))
    _write(init, "20-later.jsonl", [{"topic": "orders", "data": {"id": 1, "qty": 2}}])
    _write(init, "10-first.jsonl", [{"topic": "orders", "data": {"id": 1, "qty": 1}}])
    proc, uri = _start(tmp_path, env=_env(AMPS_EMULATOR_INIT_DIR=str(init)))
    try:
        assert _sow(uri, "orders") == [{"id": 1, "qty": 2}]
    finally:
        _stop(proc)


def test_version_and_dump_config(tmp_path):
    res = subprocess.run(_cmd("--version", "--server-version", "5.3.5.1"), capture_output=True,
                         text=True, env=_env(), timeout=60)
    assert res.returncode == 0
    assert res.stdout.startswith("amps-emulator ") and "5.3.5.1" in res.stdout
    cfg = _write(tmp_path, "amps.xml", CONFIG)
    res = subprocess.run(_cmd("-DNAME=dumped", "-DPORT=9100", "--dump-config", str(cfg)),
                         capture_output=True, text=True, env=_env(), timeout=60)
    assert res.returncode == 0, res.stderr
    assert "<Name>dumped</Name>" in res.stdout and "127.0.0.1:9100" in res.stdout
    res = subprocess.run(_cmd("--dump-config", str(cfg)), capture_output=True, text=True,
                         env=_env(), timeout=60)
    assert res.returncode == 1 and "NAME is not set" in res.stderr


@pytest.mark.parametrize("value", ["5.3", "x.y.z.w"])
def test_bad_server_version_is_refused(value):
    res = subprocess.run(_cmd("--version", "--server-version", value), capture_output=True,
                         text=True, env=_env(), timeout=60)
    assert res.returncode == 2 and "want a version X.Y.Z.W" in res.stderr


def _announced(uri: str) -> int:
    """The server version the official client read from the logon ack (5.3.5.1: 5030501)."""
    c = AMPS.Client("habits-version")
    c.connect(uri)
    c.logon(5000)
    try:
        return c.get_server_version_info().get_old_style_version()  # an int: 5030501
    finally:
        c.close()


def test_two_servers_in_one_process_announce_their_own_versions(tmp_path):
    import urllib.request

    from amps_emulator.config import default_config
    from amps_emulator.embedded import EmbeddedServer

    old = EmbeddedServer(default_config(tmp_path / "a"), memory=True)
    new = EmbeddedServer(default_config(tmp_path / "b"), memory=True, server_version="5.3.5.1",
                         admin="127.0.0.1:0")
    with old, new:
        assert _announced(old.uri) == 5030400
        assert _announced(new.uri) == 5030501
        assert new.server is not None and new.server.admin is not None
        admin_uri = new.server.admin.uri
        with urllib.request.urlopen(f"{admin_uri}/amps/instance/version.json", timeout=10) as r:
            assert "5.3.5.1" in r.read().decode()


def test_server_version_option_reaches_logon_acks_and_amps_version(tmp_path):
    cfg = _write(tmp_path, "amps.xml", CONFIG.replace("<Name>${NAME}</Name>",
                                                      "<Name>v${AMPS_VERSION}</Name>"))
    proc, uri = _start(tmp_path, "-DPORT=0", str(cfg),
                       env=_env(AMPS_EMULATOR_SERVER_VERSION="5.3.5.1"))
    try:
        assert _announced(uri) == 5030501
    finally:
        _stop(proc)
    res = subprocess.run(_cmd("-DPORT=0", "--server-version", "6.0.1.0", "--dump-config", str(cfg)),
                         capture_output=True, text=True, env=_env(), timeout=60)
    assert "<Name>v6.0.1.0</Name>" in res.stdout
