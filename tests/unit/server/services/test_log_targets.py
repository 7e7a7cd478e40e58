"""``Logging/Target`` from a config, through Python logging: levels, file names, rotation."""

from __future__ import annotations

import gzip
import logging

import pytest

from amps_emulator.config import loads_config
from amps_emulator.server.services import log_targets as logtargets


def _targets(tmp_path, body: str):
    cfg = loads_config(f"<AMPSConfig><Name>l</Name><Logging>{body}</Logging></AMPSConfig>")
    return cfg.logging


@pytest.fixture
def logger():
    lg = logging.getLogger("amps_emulator.test_log_targets")
    yield lg
    logtargets.remove(list(lg.handlers), lg)


def test_file_target_levels_and_rotation_by_threshold(tmp_path, logger):
    targets = _targets(tmp_path, f"""
      <Target><Protocol>file</Protocol><FileName>{tmp_path}/logs/%Y-amps-%n.log</FileName>
        <RotationThreshold>1KB</RotationThreshold><Level>warning</Level><Levels>stats</Levels></Target>""")
    handlers = logtargets.install(targets, logger)
    assert logger.level == logtargets.PY_LEVEL["stats"]  # the lowest level any target logs
    logger.info("not logged: below warning")
    logger.log(logtargets.PY_LEVEL["stats"], "stats line")  # one of Levels
    for i in range(40):
        logger.warning("warning line %03d %s", i, "x" * 40)
    logtargets.remove(handlers, logger)
    files = sorted((tmp_path / "logs").iterdir())
    assert len(files) >= 3 and files[0].name.endswith("-amps-00000.log")
    assert files[1].name.endswith("-amps-00001.log")
    text = "".join(f.read_text() for f in files)
    assert "not logged" not in text and "stats line" in text
    assert text.count("warning line") == 40
    assert all(f.stat().st_size <= 1000 for f in files)  # decimal units, as AMPS


def test_static_name_appends_and_rotates_aside(tmp_path, logger):
    (tmp_path / "amps.log").write_text("kept\n")
    targets = _targets(tmp_path, f"""<Target><Protocol>file</Protocol><FileName>{tmp_path}/amps.log</FileName>
        <RotationThreshold>200</RotationThreshold><Level>info</Level></Target>""")
    handlers = logtargets.install(targets, logger)
    for i in range(5):
        logger.info("line %d %s", i, "y" * 60)
    logtargets.remove(handlers, logger)
    assert (tmp_path / "amps.log.1").read_text().startswith("kept\n")
    assert "line 4" in (tmp_path / "amps.log").read_text()


def test_gzip_target_and_excluded_ids(tmp_path, logger):
    targets = _targets(tmp_path, f"""<Target><Protocol>gzip</Protocol><FileName>{tmp_path}/l.log.gz</FileName>
        <Level>error</Level><IncludeErrors>00-0015</IncludeErrors><ExcludeErrors>12-.*</ExcludeErrors></Target>""")
    handlers = logtargets.install(targets, logger)
    logger.error("an error")
    logger.error("excluded error", extra={"amps_id": "12-0001"})
    logger.info("included info", extra={"amps_id": "00-0015"})
    logger.info("plain info")
    logtargets.remove(handlers, logger)
    text = gzip.open(tmp_path / "l.log.gz", "rt").read()
    assert "an error" in text and "included info" in text
    assert "excluded error" not in text and "plain info" not in text


def test_stdout_target(tmp_path, logger, capsys):
    handlers = logtargets.install(_targets(tmp_path, "<Target><Protocol>stdout</Protocol><Level>info</Level></Target>"),
                                  logger)
    logger.info("to stdout")
    logger.debug("not at info")
    logtargets.remove(handlers, logger)
    out = capsys.readouterr().out
    assert "to stdout" in out and "not at info" not in out
