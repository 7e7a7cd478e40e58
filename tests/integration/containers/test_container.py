"""The container: its health probe, a Dockerfile that copies every part, and (opt-in, since
it builds an image) the image itself: build, run with a user's config, connect from the host,
see the health check turn healthy.

The image test runs with ``AMPS_EMULATOR_IMAGE_TESTS=1`` and podman or docker on the path:
``AMPS_EMULATOR_IMAGE_TESTS=1 pytest -m container``. ``AMPS_EMULATOR_IMAGE_BUILD_ARGS`` and
``AMPS_EMULATOR_IMAGE_RUN_ARGS`` add engine options where the host needs them (e.g. podman
without systemd or cgroup v2: ``--isolation chroot`` to build, ``--runtime runc`` to run).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import time
import tomllib

import pytest

from amps_emulator import probe
from tests.support.paths import ROOT
from tests.support.procserver import free_port


def test_probe_succeeds_on_a_logon_ack_and_fails_with_a_reason(server, capsys):
    assert probe.main([f"127.0.0.1:{server.port}"]) == 0
    closed = free_port()
    assert probe.main([f"127.0.0.1:{closed}", "--timeout", "2"]) == 1
    assert f"probe 127.0.0.1:{closed}: " in capsys.readouterr().err
    assert probe.probe_address("0.0.0.0:9007") == ("127.0.0.1", 9007)
    assert probe.probe_address("[::]:9100") == ("127.0.0.1", 9100)
    assert probe.probe_address("10.0.0.5:9007") == ("10.0.0.5", 9007)


def test_the_image_copies_every_installed_part():
    """A package the wheel installs but the Dockerfile does not copy (or .dockerignore keeps
    out) would build an image that fails at its first import."""
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    parts = set(cfg["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"])
    assert parts == {"amps_emulator"}
    dockerfile = (ROOT / "Dockerfile").read_text()
    copied = set(re.findall(r"^COPY (\S+) \./\1$", dockerfile, re.M))
    assert parts <= copied, parts - copied
    allowed = set(re.findall(r"^!(\S+?)/?$", (ROOT / ".dockerignore").read_text(), re.M))
    assert parts | {"pyproject.toml", "README.md"} <= allowed


#: a user's config whose transport says localhost:9007, with relative data paths
CONFIG = (ROOT / "tests" / "fixtures" / "users-app.xml").read_text()


def _engine() -> str | None:
    for name in ("podman", "docker"):
        if shutil.which(name):
            return name
    return None


@pytest.mark.container
@pytest.mark.skipif(os.environ.get("AMPS_EMULATOR_IMAGE_TESTS") != "1" or _engine() is None,
                    reason="builds an image: set AMPS_EMULATOR_IMAGE_TESTS=1 (needs podman or docker)")
def test_image_serves_a_users_localhost_config_to_the_host_and_turns_healthy(tmp_path):
    import AMPS

    engine = _engine()
    tag = "localhost/amps-emulator:test"
    build = [engine, "build", *shlex.split(os.environ.get("AMPS_EMULATOR_IMAGE_BUILD_ARGS", "")),
             "-t", tag, str(ROOT)]
    if engine == "podman":
        build[2:2] = ["--format", "docker"]  # OCI images drop HEALTHCHECK
    subprocess.run(build, check=True, timeout=1800, capture_output=True)
    cfg = tmp_path / "amps.xml"
    cfg.write_text(CONFIG)
    cfg.chmod(0o644)
    port = free_port()
    name = f"amps-emulator-test-{port}"
    subprocess.run([engine, "run", *shlex.split(os.environ.get("AMPS_EMULATOR_IMAGE_RUN_ARGS", "")),
                    "-d", "--name", name, "-p", f"127.0.0.1:{port}:9007",
                    "-v", f"{cfg}:/etc/amps.xml:ro", tag, "/etc/amps.xml"],
                   check=True, timeout=60, capture_output=True)
    try:
        deadline = time.monotonic() + 60
        follow = subprocess.Popen([engine, "logs", "-f", name], stdout=subprocess.PIPE, text=True)
        line = follow.stdout.readline()  # the ready line (or EOF when the server exited)
        follow.kill()
        assert line == "ready: tcp://0.0.0.0:9007/amps/json\n", line
        c = AMPS.Client("from-the-host")
        c.connect(f"tcp://127.0.0.1:{port}/amps/json")
        c.logon(5000)
        c.publish("orders", json.dumps({"id": 1}))
        assert [json.loads(m.get_data()) for m in c.sow("orders") if m.get_command() == "sow"] \
            == [{"id": 1}]
        c.close()
        uid = subprocess.run([engine, "exec", name, "id", "-u"], capture_output=True, text=True)
        assert uid.stdout.strip() == "10001"
        files = subprocess.run([engine, "exec", name, "ls", "/data"], capture_output=True, text=True)
        assert set(files.stdout.split()) == {"journal", "sow"}  # the config's relative paths
        if engine == "podman":
            assert subprocess.run([engine, "healthcheck", "run", name]).returncode == 0
        status = ""
        while status != "healthy" and time.monotonic() < deadline + 60:
            status = subprocess.run(
                [engine, "inspect", "-f", "{{.State.Health.Status}}", name],
                capture_output=True, text=True).stdout.strip()
        assert status == "healthy"
    finally:
        subprocess.run([engine, "rm", "-f", name], capture_output=True, timeout=60)
