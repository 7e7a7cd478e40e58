"""examples/ha-pair: the docker-compose file is valid YAML of the Compose shape, every file it
mounts exists, and the two configs load and name each other as a sync pair."""

from __future__ import annotations

import yaml

from amps_emulator.config import load_config
from tests.support.paths import ROOT

HERE = ROOT / "examples" / "ha-pair"


def test_compose_file_mounts_the_two_configs_and_publishes_distinct_ports():
    doc = yaml.safe_load((HERE / "docker-compose.yml").read_text())
    services = doc["services"]
    assert set(services) == {"a", "b"}
    host_ports = []
    for name, svc in services.items():
        assert svc["hostname"] == name
        assert (HERE / svc["build"] / "Dockerfile").is_file()
        mounts = [v.split(":") for v in svc["volumes"]]
        config = next(m for m in mounts if m[1] == "/etc/amps.xml")
        assert (HERE / config[0]).is_file() and config[2] == "ro"
        assert svc["command"] == ["/etc/amps.xml"]
        assert any(m[0] in doc["volumes"] and m[1] == "/data" for m in mounts)
        host_ports += [p.split(":")[0] for p in svc["ports"]]
    assert len(host_ports) == len(set(host_ports))


def test_the_configs_form_a_sync_pair():
    a, b = load_config(HERE / "a.xml"), load_config(HERE / "b.xml")
    for me, peer in ((a, b), (b, a)):
        assert me.group == peer.group == "ha-pair"
        (dest,) = me.replication.destinations
        assert dest.name == peer.name and dest.sync
        (addr,) = dest.transports[0].addresses
        assert (addr.host, addr.port) == (peer.name.lower(), peer.replication_listener.port)
