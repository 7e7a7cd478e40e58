"""The --sample-config / --verify-config helpers the server wires to its command line."""

from __future__ import annotations

import io
from pathlib import Path

from amps_emulator.config import loads_config
from amps_emulator.server.ops.verify import run_sample_config, run_verify_config

GOOD = """<AMPSConfig>
  <Name>ok</Name>
  <Transports>
    <Transport><Name>t</Name><Type>tcp</Type><InetAddr>9007</InetAddr></Transport>
  </Transports>
  <Modules><Module><Name>m</Name></Module></Modules>
</AMPSConfig>
"""

BAD = """<AMPSConfig>
  <Name>bad</Name>
  <Transports>
    <Transport><Name>t</Name><Type>tcp</Type><InetAddr>port</InetAddr></Transport>
  </Transports>
  <SOW>
    <Queue><Name>q</Name><MessageType>json</MessageType><LeasePeriod>5x</LeasePeriod></Queue>
  </SOW>
</AMPSConfig>
"""


def test_verify_good_config_exits_zero_and_prints_warnings(tmp_path: Path) -> None:
    path = tmp_path / "good.xml"
    path.write_text(GOOD)
    out, err = io.StringIO(), io.StringIO()
    assert run_verify_config(str(path), out, err) == 0
    assert "configuration OK (1 transport(s)" in out.getvalue()
    assert err.getvalue() == f"warning: {path}:6: <Module> needs a <Name> and a <Library>; the module is ignored\n"


def test_verify_bad_config_lists_every_error_and_exits_non_zero(tmp_path: Path) -> None:
    path = tmp_path / "bad.xml"
    path.write_text(BAD)
    out, err = io.StringIO(), io.StringIO()
    assert run_verify_config(str(path), out, err) == 1
    lines = err.getvalue().splitlines()
    assert lines[0].startswith(f"error: {path}:4: invalid <InetAddr>")
    assert lines[1].startswith(f"error: {path}:7: invalid <LeasePeriod>")
    assert lines[2] == f"{path}: 2 error(s); configuration rejected"
    assert out.getvalue() == ""


def test_sample_config_option_prints_a_loadable_sample() -> None:
    out = io.StringIO()
    assert run_sample_config(out) == 0
    assert loads_config(out.getvalue()).name == "amps-emulator-sample"
