"""``--memory`` writes no files at all, and the environment variables reach the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import AMPS
import pytest

from amps_emulator.server.ops.cli import _parser, apply_environment
from tests.support.paths import ROOT
from tests.support.procserver import free_port

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


@pytest.mark.parametrize("memory", [True, False], ids=["memory", "files"])
def test_journal_records_are_stamped_on_the_server_clock(tmp_path, collector, memory):
    """With ``--test-clock`` the transaction log stamps records with the server's (test) time,
    in memory as on disk: a subscription from a timestamp bookmark replays what was published
    after that instant of the server clock (which here is years before real time)."""
    from amps_emulator.config import loads_config
    from amps_emulator.server.core.clock import TestClock
    from tests.support.servers import ServerThread

    start = 1735787045.0  # 2025-01-02T03:04:05Z
    clock = TestClock(start=start)
    xml = CONFIG.format(d=tmp_path / "data", port=0).replace(
        "<Name>memory-mode</Name>", "<Name>memory-mode</Name><Admin><InetAddr>127.0.0.1:0</InetAddr></Admin>")
    srv = ServerThread(loads_config(xml, "memory.xml"), memory=memory, timebase=clock).start()
    c = AMPS.Client("stamped")
    try:
        c.connect(srv.uris[0])
        c.logon(5000)
        c.publish("orders", json.dumps({"id": 1}))
        c.publish("orders", json.dumps({"id": 2}))
        c.flush(5000)
        srv.http("/emulator/clock/advance?seconds=60", "POST")
        c.publish("orders", json.dumps({"id": 3}))
        c.flush(5000)
        got = collector(lambda m: json.loads(m.get_data())["id"])
        c.bookmark_subscribe(got, "orders", "20250102T030435", timeout=5000)  # start + 30 s
        c.publish("orders", json.dumps({"id": 4}))  # live, after the replay
        assert got.wait_for(2) == [3, 4]
    finally:
        c.close()
        srv.stop()


async def test_reset_of_a_memory_server_wipes_its_journal_without_touching_files(tmp_path):
    """``/emulator/reset`` on a ``--memory`` server empties the in-memory journal; the journal
    directory of the config (never created in memory mode) is not listed or removed."""
    from amps_emulator.config import loads_config
    from amps_emulator.server.app import Server
    from amps_emulator.server.ops.reset import reset_all

    cfg = loads_config(CONFIG.format(d=tmp_path / "data", port=0), "memory.xml")
    server = Server(cfg, memory=True)
    await server.start()
    try:
        txlog = server.txlog
        assert txlog is not None
        txlog.append("orders", b'{"id":1}')
        assert txlog.journal.last_position > 0
        assert (await reset_all(server))["reset"] == "all"
        assert txlog.is_open and txlog.journal.last_position == 0
    finally:
        await server.stop()
    assert not (tmp_path / "data").exists()
