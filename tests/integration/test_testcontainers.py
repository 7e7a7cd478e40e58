"""``amps_emulator.testcontainers.AmpsContainer``: what it mounts and sets (needs the optional
``testcontainers`` extra), and (opt-in, since it builds an image) a container started under
podman, waited for on its ``00-0015`` line, serving its seed to the official client.

The container test runs with ``AMPS_EMULATOR_IMAGE_TESTS=1`` and podman on the path (its
socket as ``DOCKER_HOST``, which testcontainers-python reads; Ryuk is turned off for podman);
``AMPS_EMULATOR_IMAGE_BUILD_ARGS`` as for tests/integration/test_container.py.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

tc = pytest.importorskip("amps_emulator.testcontainers", exc_type=ImportError,
                         reason="the optional extra is not installed: "
                                "pip install 'amps-emulator[testcontainers]'")

ROOT = Path(__file__).resolve().parents[2]


def test_config_and_seeds_are_mounted_into_the_init_directory(tmp_path):
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


def _podman_socket() -> str | None:
    if shutil.which("podman") is None:
        return None
    out = subprocess.run(["podman", "info", "--format", "{{.Host.RemoteSocket.Path}}"],
                         capture_output=True, text=True)
    path = out.stdout.strip()
    return path if out.returncode == 0 and path else None


@pytest.mark.container
@pytest.mark.skipif(os.environ.get("AMPS_EMULATOR_IMAGE_TESTS") != "1" or _podman_socket() is None,
                    reason="builds an image: set AMPS_EMULATOR_IMAGE_TESTS=1 (needs podman)")
def test_container_under_podman_waits_for_00_0015_and_serves_its_seed(tmp_path, monkeypatch):
    import AMPS

    socket = _podman_socket()
    assert socket is not None
    monkeypatch.setenv("DOCKER_HOST", socket if "://" in socket else f"unix://{socket}")
    monkeypatch.setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
    tag = "localhost/amps-emulator:test"
    subprocess.run(["podman", "build", "--format", "docker",
                    *shlex.split(os.environ.get("AMPS_EMULATOR_IMAGE_BUILD_ARGS", "")),
                    "-t", tag, str(ROOT)], check=True, timeout=1800, capture_output=True)
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
