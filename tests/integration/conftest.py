"""Fixtures for every integration test (helpers are in ``tests/support/``, not here):

* ``server``: a default-config server thread (data under ``tmp_path``);
* ``client_factory``: ``make(name)`` gives logged-on official clients of ``server``;
* ``collector``: the :class:`~tests.support.clients.Collector` class;
* ``clients_with(extra_xml, **config_xml_kwargs)``: a server with ``extra_xml`` added to
  :func:`~tests.support.servers.config_xml`, and its client factory;
* ``server_factory(**config_xml_kwargs)``: one more server on a fresh data directory.
"""

from __future__ import annotations

import pytest

from amps_emulator.pytest_plugin import clients_for
from tests.support.clients import Collector
from tests.support.servers import ServerThread, config_xml, start_server


@pytest.fixture
def server(tmp_path):
    from amps_emulator.config import default_config

    srv = ServerThread(default_config(data_dir=str(tmp_path / "amps-data"))).start()
    yield srv
    srv.stop()


@pytest.fixture
def client_factory(server):
    yield from clients_for(server.uri)


@pytest.fixture
def collector():
    return Collector


@pytest.fixture
def clients_with(tmp_path):
    """``clients_with(extra_xml, **config_xml_kwargs)`` starts a server whose config adds
    ``extra_xml`` (``{d}`` in it: the data directory) and returns ``make`` as
    :func:`clients_for` does; servers and clients end with the test."""
    started = []

    def start(extra: str, **kwargs):
        srv = start_server(config_xml(tmp_path, extra=extra.format(d=tmp_path), **kwargs))
        clients = clients_for(srv.uri)
        started.append((srv, clients))
        return next(clients)

    yield start
    for srv, clients in reversed(started):
        clients.close()
        srv.stop()


@pytest.fixture
def server_factory(tmp_path):
    made = []

    def make(**kwargs) -> ServerThread:
        srv = start_server(config_xml(tmp_path / f"srv{len(made)}", **kwargs))
        made.append(srv)
        return srv

    yield make
    for srv in made:
        srv.stop()
