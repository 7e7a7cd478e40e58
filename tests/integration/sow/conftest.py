"""Fixtures of the SOW tests: ``sow_server`` runs :data:`tests.support.sow.SOW_XML`;
``sow_clients`` is the factory of logged-on official clients of it (``sow_clients(name)``)."""

from __future__ import annotations

import pytest

from tests.support.clients import clients_for
from tests.support.servers import start_server
from tests.support.sow import sow_config


@pytest.fixture
def sow_server(tmp_path):
    srv = start_server(sow_config(tmp_path), "sow.xml")
    yield srv
    srv.stop()


@pytest.fixture
def sow_clients(sow_server):
    yield from clients_for(sow_server.uri)
