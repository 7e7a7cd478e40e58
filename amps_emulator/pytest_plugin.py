"""pytest plugin (entry point ``pytest11``): an AMPS emulator for any project's tests.

Installed with the package; nothing to import or enable::

    def test_orders(amps_clean, amps_client):       # amps_clean: an empty server
        client = amps_client()                      # a logged-on AMPS.Client
        client.publish("orders", '{"id": 1}')

Fixtures ``amps_server``, ``amps_clean``, ``amps_client``, ``amps_servers``, ``amps_pair`` and
``amps_pair_async``; the config comes from the ``amps_config`` ini value or marker. The server
runs in memory on a thread of the test process, so a start or a reset takes milliseconds.
docs/getting-started/pytest.md is the user's guide.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

log = logging.getLogger("amps_emulator.pytest")

_names = itertools.count(1)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("amps_config", "AMPS XML config file for the amps_server fixture "
                  "(relative to the ini file; default: the emulator's built-in config)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "amps_config(path): the AMPS config file for amps_server in this module "
                   "(relative to the module's directory)")


class AmpsServers:
    """The session's emulators, one per configuration file (``None``: the built-in config)."""

    def __init__(self) -> None:
        self._servers: dict[Path | None, Any] = {}

    def get(self, path: str | Path | None = None) -> Any:
        key = None if path is None else Path(path).resolve()
        srv = self._servers.get(key)
        if srv is None:
            from amps_emulator.config import default_config, load_config
            from amps_emulator.embedded import EmbeddedServer

            config = default_config() if key is None else load_config(key)
            for w in getattr(config, "warnings", ()):
                log.warning("config: %s", w)
            srv = self._servers[key] = EmbeddedServer(config, memory=True).start()
        return srv

    def close(self) -> None:
        for srv in self._servers.values():
            srv.stop()
        self._servers.clear()


@pytest.fixture(scope="session")
def amps_servers() -> Iterator[AmpsServers]:
    """The session's emulators: ``amps_servers.get(config_path_or_None)``."""
    servers = AmpsServers()
    yield servers
    servers.close()


def _config_path(request: pytest.FixtureRequest) -> Path | None:
    marker = request.node.get_closest_marker("amps_config")
    if marker is not None:
        if len(marker.args) != 1:
            raise pytest.UsageError("amps_config marker wants one argument: the config file")
        return Path(request.node.path).parent / marker.args[0]
    value = request.config.getini("amps_config")
    if not value:
        return None
    base = request.config.inipath.parent if request.config.inipath else request.config.rootpath
    return base / value


@pytest.fixture(scope="module")
def amps_server(request: pytest.FixtureRequest, amps_servers: AmpsServers) -> Any:
    """A running emulator (``.uri``) on the config of the ``amps_config`` marker or ini
    value; started once per session per config, in memory."""
    return amps_servers.get(_config_path(request))


@pytest.fixture
def amps_clean(amps_server: Any) -> Any:
    """``amps_server``, emptied before this test (earlier clients are disconnected)."""
    amps_server.reset()
    return amps_server


def clients_for(uri: str) -> Iterator[Callable[..., Any]]:
    """A generator fixture body: yields ``make(name=None, logon=True)`` making official
    clients of ``uri`` and closes every client made when resumed."""
    import AMPS

    made = []

    def make(name: str | None = None, logon: bool = True) -> AMPS.Client:
        c = AMPS.Client(name or f"test-client-{next(_names)}")
        c.connect(uri)
        if logon:
            c.logon(5000)
        made.append(c)
        return c

    yield make
    for c in made:
        try:
            c.close()
        except Exception:
            pass


@pytest.fixture
def amps_pair() -> Iterator[Any]:
    """Two in-memory emulators replicating ``sync`` both ways (``.uris`` for an HAClient)."""
    from amps_emulator.pair import EmbeddedPair

    with EmbeddedPair(sync_type="sync") as pair:
        yield pair


@pytest.fixture
def amps_pair_async() -> Iterator[Any]:
    """Two in-memory emulators replicating ``async`` both ways."""
    from amps_emulator.pair import EmbeddedPair

    with EmbeddedPair(sync_type="async") as pair:
        yield pair


@pytest.fixture
def amps_client(request: pytest.FixtureRequest, amps_server: Any) -> Iterator[Callable[..., Any]]:
    """``amps_client(name=None, logon=True)``: an official AMPS.Client connected to
    ``amps_server``; closed after the test."""
    try:
        import AMPS  # noqa: F401
    except ImportError:
        pytest.fail("amps_client needs the official AMPS client: pip install amps-python-client",
                    pytrace=False)
    if "amps_clean" in request.fixturenames:
        request.getfixturevalue("amps_clean")  # reset first, or it would drop these clients
    yield from clients_for(amps_server.uri)
