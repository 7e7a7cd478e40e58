"""``Logging/Target`` ``IncludeErrors`` / ``ExcludeErrors`` on the emulator's own log lines: the
command line run as a child process, an official client and the Admin interface making the
events, each target's file read after a clean stop.

The User Guide's own examples: a target with ``IncludeErrors`` 00-0015 and no level records
only the initialization line (logging is opt-in: a target without ``Level``/``Levels`` logs by
level nothing); a client disconnect is 07-0013, a logon 1F-0004, a transport disabled 07-0047;
an excluded id never reaches its target whatever its level."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import AMPS

from tests.support.paths import ROOT

CONFIG = """<AMPSConfig>
  <Name>logids</Name>
  <Admin><InetAddr>127.0.0.1:0</InetAddr></Admin>
  <Transports><Transport><Name>json-tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
    <MessageType>json</MessageType><Protocol>amps</Protocol></Transport></Transports>
  <Logging>
    <!-- only the initialization message -->
    <Target><Protocol>file</Protocol><FileName>./logs/init.log</FileName>
      <IncludeErrors>00-0015</IncludeErrors></Target>
    <!-- info and up, but no logons and nothing of the start-up category -->
    <Target><Protocol>file</Protocol><FileName>./logs/clients.log</FileName><Level>info</Level>
      <ExcludeErrors>1F-0004,00-.*</ExcludeErrors></Target>
    <!-- errors, plus the initialization and a transport disabled -->
    <Target><Protocol>stdout</Protocol><Level>error</Level>
      <IncludeErrors>00-0015,07-0047</IncludeErrors></Target>
  </Logging>
</AMPSConfig>
"""


def test_targets_select_the_emulators_lines_by_their_amps_ids(tmp_path: Path) -> None:
    (tmp_path / "amps.xml").write_text(CONFIG)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AMPS_EMULATOR_")}
    proc = subprocess.Popen([sys.executable, "-m", "amps_emulator.server", "amps.xml"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**env, "PYTHONPATH": str(ROOT)})
    assert proc.stdout is not None
    try:
        ready = proc.stdout.readline()
        assert ready.startswith("ready: "), ready + proc.stderr.read() if proc.stderr else ""
        admin = proc.stdout.readline().split()[1]
        assert " 00-0015 AMPS initialization completed" in proc.stdout.readline()
        c = AMPS.Client("watcher")
        c.connect(ready.split()[1])
        c.logon(5000)
        c.close()
        with urllib.request.urlopen(f"{admin}/amps/administrator/transports/json-tcp/disable",
                                    timeout=10) as r:
            assert json.loads(r.read())["is_enabled"] is False
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    stdout_lines = [ln for ln in out.splitlines() if ln]
    # the initialization line once (the printed one: the stdout target leaves its copy out)
    # and the transport disabled, by its id, though below the target's level
    assert sum("00-0015" in ln for ln in stdout_lines) == 0
    assert [ln for ln in stdout_lines if "07-0047" in ln] and all(
        re.search(r" 07-0047 Transport\[json-tcp\] being disabled\.$", ln)
        for ln in stdout_lines if "07-0047" in ln)
    assert not [ln for ln in stdout_lines if "07-0013" in ln or "1F-0004" in ln]
    init = (tmp_path / "logs" / "init.log").read_text().splitlines()
    assert len(init) == 1 and " 00-0015 AMPS initialization completed (" in init[0]
    clients = (tmp_path / "logs" / "clients.log").read_text()
    assert re.search(r" 07-0013 client\[watcher\] disconnected\.\n", clients)
    assert " 07-0047 Transport[json-tcp] being disabled." in clients
    assert "1F-0004" not in clients and "AMPS client session logon" not in clients
    assert "00-0001" not in clients and "00-0015" not in clients
