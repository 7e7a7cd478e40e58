"""The emulator as a `testcontainers-python <https://testcontainers-python.readthedocs.io>`_
module (``pip install 'amps-emulator[testcontainers]'``)::

    from amps_emulator.testcontainers import AmpsContainer

    with AmpsContainer().with_config("amps.xml").with_seed("orders.jsonl") as amps:
        client = AMPS.Client("test")
        client.connect(amps.get_connection_uri())
        client.logon()

The container runs the emulator's image (build it from the repository's ``Dockerfile``:
``docker build -t amps-emulator .``) and counts as started once it prints AMPS's
``00-0015 ... AMPS initialization completed`` line, which the emulator prints after every
transport accepts connections and every seed message is published (see
:mod:`amps_emulator.server.ops.seed`).

A configuration is mounted read-only as the image's init directory's ``amps.xml``
(``/docker-entrypoint-init.d``), seed files beside it as ``NN-name.jsonl`` in the order they
were added; whatever address the configuration gives its first transport, the image listens
on ``0.0.0.0:9007`` (``AMPS_EMULATOR_LISTEN``), which :meth:`AmpsContainer.get_connection_uri`
maps to the host.
"""

from __future__ import annotations

import importlib.util
import os
import re
from datetime import timedelta

try:
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.waiting_utils import wait_for_logs
except ImportError as exc:  # the optional extra is not installed
    raise ImportError("amps_emulator.testcontainers needs testcontainers-python: "
                      "pip install 'amps-emulator[testcontainers]'") from exc
#: testcontainers has structured wait strategies (newer 4.x releases, where ``wait_for_logs``
#: with a pattern is deprecated); older 4.x releases wait with ``wait_for_logs`` after start
HAS_WAIT_STRATEGIES = importlib.util.find_spec("testcontainers.core.wait_strategies") is not None

#: the image ``docker build -t amps-emulator .`` makes from the repository's Dockerfile
DEFAULT_IMAGE = "amps-emulator:latest"
#: where the image reads its init directory (``AMPS_EMULATOR_INIT_DIR``)
INIT_DIR = "/docker-entrypoint-init.d"
#: the port the image's first transport listens on
PORT = 9007
#: the line the container is waited for (``amps-emulator`` prints it once it serves)
READY_LOG = re.compile(r"00-0015 .*AMPS initialization completed")


def _ready(logs: str) -> bool:
    """Whether the container's output so far holds the ``00-0015`` line."""
    return READY_LOG.search(logs) is not None


class AmpsContainer(DockerContainer):
    """The AMPS emulator in a container, started once it logs ``00-0015``.

    ``message_type`` and ``protocol`` make up the URI of :meth:`get_connection_uri` (they
    must match the first transport of a mounted configuration; the built-in configuration's
    is ``json`` over ``amps``). ``server_version`` sets what the server announces
    (``AMPS_EMULATOR_SERVER_VERSION``). ``startup_timeout`` bounds the wait for the line.
    Everything else testcontainers offers goes through its ``with_*`` methods
    (``with_name``, ``with_env``, ``with_kwargs`` for the engine's create options, ...).
    """

    def __init__(self, image: str = DEFAULT_IMAGE, *, message_type: str = "json",
                 protocol: str = "amps", server_version: str | None = None,
                 startup_timeout: float = 60.0) -> None:
        super().__init__(image)
        self.message_type = message_type
        self.protocol = protocol
        self.startup_timeout = startup_timeout
        self._seeds = 0
        self.with_exposed_ports(PORT)
        if HAS_WAIT_STRATEGIES:
            from testcontainers.core.wait_strategies import LogMessageWaitStrategy

            self.waiting_for(LogMessageWaitStrategy(READY_LOG).with_startup_timeout(
                timedelta(seconds=startup_timeout)))
        self.with_env("AMPS_EMULATOR_INIT_DIR", INIT_DIR)
        if server_version is not None:
            self.with_env("AMPS_EMULATOR_SERVER_VERSION", server_version)

    def with_config(self, path: str | os.PathLike[str]) -> AmpsContainer:
        """Serve the AMPS configuration file at ``path`` (mounted read-only)."""
        self.with_volume_mapping(os.path.abspath(path), f"{INIT_DIR}/amps.xml", "ro")
        return self

    def with_seed(self, path: str | os.PathLike[str]) -> AmpsContainer:
        """Publish the JSON lines of ``path`` before the container counts as started (seed
        files are applied in the order they are added)."""
        self._seeds += 1
        name = os.path.basename(os.fspath(path))
        stem = name[:-len(".jsonl")] if name.endswith(".jsonl") else name
        self.with_volume_mapping(os.path.abspath(path),
                                 f"{INIT_DIR}/{self._seeds:02d}-{stem}.jsonl", "ro")
        return self

    def start(self) -> AmpsContainer:
        super().start()  # waits for READY_LOG through the wait strategy, where there is one
        if not HAS_WAIT_STRATEGIES:
            wait_for_logs(self, _ready, timeout=self.startup_timeout)
        return self

    def get_connection_uri(self) -> str:
        """``tcp://HOST:PORT/amps/json``: where a client on this host reaches the server."""
        host = self.get_container_host_ip()
        port = self.get_exposed_port(PORT)
        return f"tcp://{host}:{port}/{self.protocol}/{self.message_type}"
