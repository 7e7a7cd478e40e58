"""``amps_emulator.testcontainers.AmpsContainer``: what it mounts and sets (needs the optional
``testcontainers`` extra), and (opt-in, since it builds an image) a container started under
podman, waited for on its ``00-0015`` line, serving its seed to the official client.

testcontainers-python talks to the Docker API: these tests start podman's own
(``podman system service``) on a socket of their own and point ``DOCKER_HOST`` at it, with
Ryuk (the reaper, an image from Docker Hub) turned off; without podman the mount test uses
whatever ``DOCKER_HOST`` says, and skips when no engine answers there. The container test runs
with ``AMPS_EMULATOR_IMAGE_TESTS=1`` on the image tests/support/images.py builds (as
test_container.py does; ``.ci/image test`` runs both).
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.support import images

tc = pytest.importorskip("amps_emulator.testcontainers", exc_type=ImportError,
                         reason="the optional extra is not installed: "
                                "pip install 'amps-emulator[testcontainers]'")



@pytest.fixture(scope="module")
def podman_api(tmp_path_factory):
    """``unix://...`` of a Docker API served by podman for these tests, or None without podman."""
    if shutil.which("podman") is None:
        yield None
        return
    sock = tmp_path_factory.mktemp("podman") / "docker.sock"
    proc = subprocess.Popen(["podman", "system", "service", "--time=0", f"unix://{sock}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        try:
            _until_it_answers(proc, sock)
        except AssertionError as exc:  # podman installed, but it cannot serve here
            pytest.skip(f"podman's Docker API did not come up: {exc}")
        yield f"unix://{sock}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _until_it_answers(proc: subprocess.Popen, sock: Path, timeout: float = 60.0) -> None:
    """Return once the API answers its ping on ``sock`` (fail if the service exits first)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(5)
                s.connect(str(sock))
                s.sendall(b"GET /_ping HTTP/1.0\r\n\r\n")
                if s.recv(4096).startswith(b"HTTP/1."):
                    return
        except OSError:
            pass
        assert time.monotonic() < deadline, "podman system service did not answer"
        try:  # the pause between tries doubles as the check that the service still runs
            proc.wait(timeout=0.1)
        except subprocess.TimeoutExpired:
            continue
        raise AssertionError(f"podman system service exited: {proc.stderr.read() if proc.stderr else ''}")


@pytest.fixture
def engine(podman_api, monkeypatch):
    """Point testcontainers at podman's API when there is one: Ryuk off (its image is on Docker
    Hub), and ports reached on this host (a ``/.dockerenv`` here would make testcontainers
    look the container up on a bridge network, through fields podman's API leaves out)."""
    from testcontainers.core.config import ConnectionMode, testcontainers_config

    if podman_api is not None:
        monkeypatch.setenv("DOCKER_HOST", podman_api)
        monkeypatch.setattr(testcontainers_config, "ryuk_disabled", True)
        monkeypatch.setattr(testcontainers_config, "connection_mode_override",
                            ConnectionMode.docker_host)
    return podman_api


def test_config_and_seeds_are_mounted_into_the_init_directory(tmp_path, engine):
    cfg = tmp_path / "amps.xml"
    seed_a, seed_b = tmp_path / "orders.jsonl", tmp_path / "prices"
    from docker.errors import DockerException

    try:  # testcontainers asks the engine for its version as the container is built
        container = tc.AmpsContainer("amps-emulator:test", server_version="5.3.5.1")
    except DockerException as exc:
        pytest.skip(f"no container engine reachable (DOCKER_HOST): {exc}")
    container.with_config(cfg).with_seed(seed_a).with_seed(seed_b)
    assert container.env["AMPS_EMULATOR_INIT_DIR"] == tc.INIT_DIR
    assert container.env["AMPS_EMULATOR_SERVER_VERSION"] == "5.3.5.1"
    mounts = {str(host): spec["bind"] for host, spec in container.volumes.items()}
    assert mounts == {str(cfg): f"{tc.INIT_DIR}/amps.xml",
                      str(seed_a): f"{tc.INIT_DIR}/01-orders.jsonl",
                      str(seed_b): f"{tc.INIT_DIR}/02-prices.jsonl"}
    assert all(spec["mode"] == "ro" for spec in container.volumes.values())
    assert tc.READY_LOG.search("2024-01-01T00:00:00.0000000+00:00 [1] info: 00-0015 "
                               "AMPS initialization completed (0 seconds).")
    assert not tc.READY_LOG.search("ready: tcp://0.0.0.0:9007/amps/json")


@pytest.mark.container
@pytest.mark.skipif(not images.enabled() or shutil.which("podman") is None,
                    reason="builds an image: set AMPS_EMULATOR_IMAGE_TESTS=1 (needs podman)")
def test_container_under_podman_waits_for_00_0015_and_serves_its_seed(tmp_path, engine):
    import AMPS

    assert engine is not None
    tag = images.build()
    cfg = tmp_path / "amps.xml"
    cfg.write_text("""<AMPSConfig><Name>tc</Name>
      <Transports><Transport><Name>t</Name><Type>tcp</Type><InetAddr>localhost:9007</InetAddr>
        <MessageType>json</MessageType><Protocol>amps</Protocol></Transport></Transports>
      <SOW><Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
        <Durability>transient</Durability></Topic></SOW></AMPSConfig>""")
    seed = tmp_path / "orders.jsonl"
    seed.write_text('{"topic": "orders", "data": {"id": 1}}\n{"topic": "orders", "data": {"id": 2}}\n')
    for path in (cfg, seed):
        path.chmod(0o644)
    with tc.AmpsContainer(tag).with_config(cfg).with_seed(seed) as amps:
        client = AMPS.Client("tc-probe")
        client.connect(amps.get_connection_uri())
        client.logon(5000)
        try:
            ids = sorted(json.loads(m.get_data())["id"] for m in client.sow("orders", timeout=5000)
                         if m.get_command() == "sow")
        finally:
            client.close()
    assert ids == [1, 2]
