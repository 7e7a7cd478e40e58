"""The container: its health probe, a Dockerfile that copies every part and keeps build tools
out of the final stage, and (opt-in, since it builds an image) the image itself: built, run with
a user's config, the init directory and in memory, reached from the host with the official
client, its health check passed, stopped with SIGTERM and started again on its volume.

The image tests run with ``AMPS_EMULATOR_IMAGE_TESTS=1`` and podman or docker on the path
(``.ci/image test``, or ``AMPS_EMULATOR_IMAGE_TESTS=1 pytest -m container``); see
tests/support/images.py for the build and the options a host may need.
"""

from __future__ import annotations

import json
import re
import tomllib
import uuid

import pytest

from amps_emulator import probe
from tests.support import images
from tests.support.clients import Collector
from tests.support.paths import FIXTURES, ROOT
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


def test_the_final_stage_installs_nothing_and_copies_only_the_venv():
    """The image's last stage adds a user and copies the built virtual environment: no pip,
    no package manager, no compiler run there (they would stay in its layers)."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    final = dockerfile[dockerfile.rindex("\nFROM "):]
    assert final.startswith("\nFROM base\n"), final.splitlines()[1]
    runs = re.findall(r"^RUN (.*(?:\\\n.*)*)", final, re.M)
    assert len(runs) == 1 and runs[0].startswith("useradd "), runs
    assert re.findall(r"^COPY (.*)$", final, re.M) == [
        "--from=build /opt/amps-emulator /opt/amps-emulator", "--from=app /app/ /"]


#: a user's config whose transport says localhost:9007, with relative data paths
CONFIG = (FIXTURES / "users-app.xml").read_text()


@pytest.fixture(scope="module")
def image():
    if not images.enabled():
        pytest.skip("builds an image: set AMPS_EMULATOR_IMAGE_TESTS=1 (needs podman or docker)")
    return images.build()


@pytest.fixture
def container():
    """``start(*options, "--", *arguments)`` a container of the image on a free host port; its
    name and port. Containers (and the volumes the test names in ``volumes``) end with the test."""
    started: list[str] = []
    volumes: list[str] = []

    def start(*args: str) -> tuple[str, int]:
        port = free_port()
        name = f"amps-emulator-test-{uuid.uuid4().hex[:12]}"
        images.start(name, "-p", f"127.0.0.1:{port}:9007", *args)
        started.append(name)
        return name, port

    start.volumes = volumes  # type: ignore[attr-defined]
    yield start
    images.remove(*started)
    for volume in volumes:
        images.run("volume", "rm", "-f", volume, check=False)


def _uri(port: int) -> str:
    return f"tcp://127.0.0.1:{port}/amps/json"


def _client(port: int, name: str):
    import AMPS

    c = AMPS.Client(name)
    c.connect(_uri(port))
    c.logon(5000)
    return c


def _sow(port: int, topic: str) -> list[dict]:
    c = _client(port, "sow-reader")
    try:
        return sorted((json.loads(m.get_data()) for m in c.sow(topic, timeout=5000)
                       if m.get_command() == "sow"), key=lambda d: d["id"])
    finally:
        c.close()


@pytest.mark.container
def test_image_serves_a_users_localhost_config_to_the_host_and_turns_healthy(image, container, tmp_path):
    cfg = tmp_path / "amps.xml"
    cfg.write_text(CONFIG)
    cfg.chmod(0o644)
    name, port = container("-v", f"{cfg}:/etc/amps.xml:ro", "--", "/etc/amps.xml")
    assert images.first_line(name) == "ready: tcp://0.0.0.0:9007/amps/json\n"
    sub, pub = _client(port, "subscriber"), _client(port, "publisher")
    try:
        got = Collector(lambda m: json.loads(m.get_data()))
        sub.subscribe(got, "orders")
        pub.publish("orders", json.dumps({"id": 1}))
        assert got.wait_for(1) == [{"id": 1}]
    finally:
        sub.close()
        pub.close()
    assert _sow(port, "orders") == [{"id": 1}]
    assert images.run("exec", name, "id", "-u").stdout.strip() == "10001"
    files = images.run("exec", name, "ls", "/data").stdout.split()
    assert set(files) == {"journal", "sow"}  # the config's relative paths, in the volume
    images.wait_healthy(name)
    assert images.health(name) == "healthy"


@pytest.mark.container
def test_the_init_directory_gives_the_config_and_the_seeds(image, container, tmp_path):
    init = tmp_path / "init"
    init.mkdir()
    # a SOW topic the built-in config does not have: served only if this config was read
    (init / "amps.xml").write_text(CONFIG.replace("<Name>orders</Name>", "<Name>seeded</Name>"))
    (init / "01-first.jsonl").write_text('{"topic": "seeded", "data": {"id": 1}}\n'
                                         '{"topic": "seeded", "data": {"id": 2}}\n')
    (init / "02-then.jsonl").write_text('{"topic": "seeded", "data": {"id": 2, "v": "later"}}\n')
    init.chmod(0o755)
    for path in init.iterdir():
        path.chmod(0o644)
    name, port = container("-v", f"{init}:/docker-entrypoint-init.d:ro")
    assert images.first_line(name) == "ready: tcp://0.0.0.0:9007/amps/json\n"
    # published before the ready line, in name order (the later file's record wins)
    assert _sow(port, "seeded") == [{"id": 1}, {"id": 2, "v": "later"}]


@pytest.mark.container
def test_in_memory_it_serves_and_writes_no_file(image, container):
    name, port = container("-e", "AMPS_EMULATOR_MEMORY=1")
    assert images.first_line(name).startswith("ready: tcp://0.0.0.0:9007/")
    c = _client(port, "publisher")
    try:
        c.publish("orders", json.dumps({"id": 7}))
    finally:
        c.close()
    assert _sow(port, "orders") == [{"id": 7}]
    assert images.run("exec", name, "ls", "-A", "/data").stdout.split() == []


@pytest.mark.container
def test_sigterm_stops_it_cleanly_and_the_volume_keeps_the_data(image, container):
    volume = f"amps-emulator-test-{uuid.uuid4().hex[:12]}"
    container.volumes.append(volume)
    name, port = container("-v", f"{volume}:/data")
    assert images.first_line(name).startswith("ready: ")
    c = _client(port, "publisher")
    try:
        for i in range(3):
            c.publish("orders", json.dumps({"id": i, "qty": 10 * i}))
    finally:
        c.close()
    assert len(_sow(port, "orders")) == 3
    images.run("stop", "-t", "30", name)  # SIGTERM, SIGKILL only after 30 s
    assert images.run("inspect", "-f", "{{.State.ExitCode}}", name).stdout.strip() == "0"
    assert "shut down cleanly" in images.run("logs", name).stderr + images.run("logs", name).stdout
    images.remove(name)
    again, port2 = container("-v", f"{volume}:/data")
    assert images.first_line(again).startswith("ready: ")
    assert _sow(port2, "orders") == [{"id": i, "qty": 10 * i} for i in range(3)]


@pytest.mark.container
def test_the_image_holds_the_server_and_no_build_tools(image):
    """What the final stage has: the compiled hot path and bytecode for the server, and no pip,
    compiler, build backend or optional extra (testcontainers, spark)."""
    script = ("import importlib.util as u, os, shutil, amps_emulator._speedups; "
              "print([m for m in ('pip', 'setuptools', 'hatchling', 'testcontainers', 'pyspark') "
              "if u.find_spec(m)]); "
              "print([c for c in ('pip', 'pip3', 'gcc', 'cc', 'python3-config') if shutil.which(c)]); "
              "print(os.path.isfile(u.find_spec('amps_emulator.server').cached))")
    done = images.run("run", "--rm", "--entrypoint", "python", image, "-c", script)
    assert done.stdout.splitlines() == ["[]", "[]", "True"]  # bytecode: bench/bench_image_startup.py
