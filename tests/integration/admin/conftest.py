"""Fixtures of the Admin interface's tests: ``pair``, instances A and B replicating to each
other (sync), each with the SOW topic ``orders``, the queue ``work`` and an Admin interface."""

from __future__ import annotations

import pytest

from tests.support.servers import replicated_pair

QUEUE = ("<Queue><Name>work</Name><MessageType>json</MessageType><LeasePeriod>30s</LeasePeriod>"
         "</Queue>")


@pytest.fixture
def pair(tmp_path):
    servers = replicated_pair(tmp_path, QUEUE)
    yield servers
    for s in servers:
        s.stop()
