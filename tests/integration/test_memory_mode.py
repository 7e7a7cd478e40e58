"""``--memory`` writes no files at all, and the environment variables reach the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import AMPS
import pytest

from amps_emulator.server.__main__ import _parser, apply_environment
from tests.procserver import free_port

ROOT = Path(__file__).resolve().parents[2]

CONFIG = """<AMPSConfig>
  <Name>memory-mode</Name>
  <Transports><Transport><Name>json-tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:{port}</InetAddr>
    <MessageType>json</MessageType><Protocol>amps</Protocol></Transport></Transports>
  <TransactionLog><JournalDirectory>{d}/journal</JournalDirectory>
    <Topic><Name>.*</Name><MessageType>json</MessageType></Topic></TransactionLog>
  <SOW>
    <Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
      <FileName>{d}/sow/%n.sow</FileName></Topic>
    <Queue><Name>work</Name><MessageType>json</MessageType></Queue>
  </SOW>
</AMPSConfig>
"""


def test_memory_mode_from_the_environment_leaves_no_file(tmp_path, collector):
    data, run = tmp_path / "data", tmp_path / "run"
    run.mkdir()
    cfg = tmp_path / "amps.xml"
    port = free_port()
    cfg.write_text(CONFIG.format(d=data, port=port))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AMPS_EMULATOR_MEMORY": "1",
           "AMPS_EMULATOR_LISTEN": "127.0.0.1:0", "AMPS_EMULATOR_CONFIG": str(cfg),
           "AMPS_EMULATOR_LOG_LEVEL": "warning"}
    proc = subprocess.Popen([sys.executable, "-m", "amps_emulator.server"], cwd=run, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("ready: "), proc.stderr.read()
        uri = line.split()[1]
        assert f":{port}/" not in uri  # AMPS_EMULATOR_LISTEN replaced the config's address
        c = AMPS.Client("memory-mode")
        c.connect(uri)
        c.logon(5000)
        for i in range(3):
            c.publish("orders", json.dumps({"id": i, "v": i}))
            c.publish("work", json.dumps({"job": i}))
        c.flush(5000)
        assert sorted(json.loads(m.get_data())["id"] for m in c.sow("orders")
                      if m.get_command() == "sow") == [0, 1, 2]
        replay = collector()
        c.bookmark_subscribe(replay, "orders", AMPS.Client.Bookmarks.EPOCH, timeout=5000)
        got = [json.loads(data)["id"] for cmd, _, data, *_ in replay.wait_for(3) if cmd == "publish"]
        assert got == [0, 1, 2]  # the transaction log is there, in memory
        c.close()
    finally:
        proc.terminate()
        rc = proc.wait(10)
    assert rc == 0, proc.stderr.read()
    assert not data.exists()
    assert list(run.iterdir()) == []


def test_command_line_wins_over_environment_and_bad_values_name_the_variable():
    env = {"AMPS_EMULATOR_LISTEN": "0.0.0.0:9007", "AMPS_EMULATOR_DURABILITY": "strict",
           "AMPS_EMULATOR_DATA_DIR": "/data", "AMPS_EMULATOR_MEMORY": "no"}
    args = apply_environment(_parser().parse_args(["--listen", "127.0.0.1:0"]), env)
    assert (args.listen, args.durability, args.data_dir, args.memory, args.log_level) == (
        "127.0.0.1:0", "strict", "/data", False, "INFO")
    assert apply_environment(_parser().parse_args(["--memory"]), {}).memory is True
    assert apply_environment(_parser().parse_args([]), {}).data_dir == "./amps-data"
    with pytest.raises(SystemExit, match="AMPS_EMULATOR_DURABILITY='fast'"):
        apply_environment(_parser().parse_args([]), {"AMPS_EMULATOR_DURABILITY": "fast"})
    with pytest.raises(SystemExit, match="AMPS_EMULATOR_MEMORY='maybe'"):
        apply_environment(_parser().parse_args([]), {"AMPS_EMULATOR_MEMORY": "maybe"})
