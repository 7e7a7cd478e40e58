"""``--verify-config`` and start-up agree, and start-up never ends in a traceback.

Every config in ``tests/fixtures/configs`` is verified and then started for real (in a
scratch working directory, port 0): ``ok-*`` must pass both, ``bad-*`` must be refused by
both with the same ``file:line: reason`` lines, and a refusal at start-up must be a
:class:`ConfigError` (the server prints its lines), never another exception.
"""

from __future__ import annotations

import asyncio
import io
import logging
import os
import pathlib

import pytest

from amps_emulator.config import ConfigError, load_config
from amps_emulator.server.app import Server
from amps_emulator.server.ops.preflight import WarningCollector
from amps_emulator.server.ops.verify import run_verify_config
from amps_emulator.server.services import log_targets as logtargets
from tests.support.paths import FIXTURES
from tests.support.tls import self_signed

CONFIGS = sorted((FIXTURES / "configs").glob("*.xml"))
#: where the official client's source package may have been unpacked (GUIDE.md)
SAMPLE_XML_CANDIDATES = [os.environ.get("AMPS_CLIENT_SAMPLE_XML", ""),
                         os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
                                      "amps-emulator", "amps-python-client-5.3.4.0", "samples",
                                      "sample.xml")]


def verify(path: pathlib.Path, warnings: list[str] | None = None) -> tuple[int, list[str]]:
    err = io.StringIO()
    rc = run_verify_config(str(path), io.StringIO(), err)
    lines = err.getvalue().splitlines()
    if warnings is not None:
        warnings.extend(line[len("warning: "):] for line in lines if line.startswith("warning: "))
    return rc, [line[len("error: "):] for line in lines if line.startswith("error: ")]


def start_up(path: pathlib.Path, any_port: bool = False, warnings: list[str] | None = None) -> list[str]:
    """Start the server on ``path`` as ``amps-emulator PATH`` does, then stop it. Returns the
    error lines it would print (empty: it started); ``warnings`` collects what it logs at
    WARNING and above. Any other exception propagates."""
    try:
        cfg = load_config(path)
    except ConfigError as e:
        return [str(i) for i in e.errors]
    if any_port:  # the file unchanged; only where it listens, as --listen does
        import msgspec

        cfg = msgspec.structs.replace(cfg, transports=tuple(
            msgspec.structs.replace(t, host="127.0.0.1", port=0) for t in cfg.transports))
    handlers = logtargets.install(cfg.logging)
    seen = WarningCollector()
    logging.getLogger("amps_emulator").addHandler(seen)
    try:
        async def run() -> None:
            srv = Server(cfg)
            try:
                await srv.start()
            finally:
                await srv.stop()

        asyncio.run(run())
    except ConfigError as e:
        return [str(i) for i in e.errors]
    finally:
        logging.getLogger("amps_emulator").removeHandler(seen)
        logtargets.remove(handlers)
        if warnings is not None:
            warnings.extend(seen.messages)
    return []


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_verify_and_start_up_agree(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    self_signed(tmp_path)  # ./cert.pem and ./key.pem for the configs' TLS transports
    verify_warnings: list[str] = []
    startup_warnings: list[str] = []
    rc, verify_errors = verify(path, verify_warnings)
    started = start_up(path, warnings=startup_warnings)
    assert verify_errors == started
    # what start-up warns about, verify showed too (the log-target ones aside: verify opens none)
    assert [w for w in startup_warnings if "syslog target" not in w and w not in verify_warnings] == []
    if path.name.startswith("ok-"):
        assert rc == 0 and started == []
    else:
        assert rc == 1 and started, "a bad-* fixture must be refused"
        assert all(f"{path}:" in line and f"{path}:0:" not in line for line in started)  # located


def test_60east_sample_xml_starts_unchanged(tmp_path, monkeypatch):
    path = next((pathlib.Path(p) for p in SAMPLE_XML_CANDIDATES if p and os.path.exists(p)), None)
    if path is None:
        pytest.skip("the amps-python-client source package (samples/sample.xml) is not unpacked here")
    monkeypatch.chdir(tmp_path)
    rc, errors = verify(path)
    assert (rc, errors) == (0, [])
    assert start_up(path, any_port=True) == []
    assert list((tmp_path / "logs").iterdir())  # its file log target was opened


def test_server_process_logs_to_the_configured_targets_and_refuses_in_one_line(tmp_path):
    from tests.support.procserver import ProcServer

    def xml(data) -> str:
        return f"""<AMPSConfig><Name>logs</Name>
          <Transports><Transport><Name>t</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
            <Protocol>amps</Protocol></Transport></Transports>
          <Logging><Target><Protocol>file</Protocol><Level>info</Level>
            <FileName>{data}/logs/amps-%n.log</FileName></Target></Logging>
          <SOW><Queue><Name>q</Name><MessageType>json</MessageType><Filter>/a = = 1</Filter></Queue></SOW>
          <TransactionLog><JournalDirectory>{data}/journal</JournalDirectory>
            <Topic><Name>q</Name><MessageType>json</MessageType></Topic></TransactionLog>
        </AMPSConfig>"""

    cfg = tmp_path / "amps.xml"
    cfg.write_text(xml(tmp_path / "data"))
    refused = ProcServer(tmp_path / "data", cfg).run_to_exit()
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines()[-1].startswith(f"{cfg}:6: queue q: bad filter")
    assert "Traceback" not in refused.stderr
    cfg.write_text(xml(tmp_path / "data").replace("<Filter>/a = = 1</Filter>", ""))
    srv = ProcServer(tmp_path / "data", cfg).start()
    assert srv.stop() == 0
    (log,) = (tmp_path / "data" / "logs").iterdir()
    assert log.name == "amps-00000.log" and "shut down cleanly" in log.read_text()
