"""Fixtures of the SOW engine tests: ``sf``, a :class:`~amps_emulator.sow.testing.StoreFactory`
for each backend (persistent LMDB under ``tmp_path``, and transient): a test taking it runs
once on each."""

from __future__ import annotations

import pytest

from amps_emulator.sow.testing import StoreFactory


@pytest.fixture(params=["persistent", "transient"])
def sf(request, tmp_path):
    f = StoreFactory(request.param, tmp_path)
    yield f
    f.close()
