"""The compiled extension for the tests of the hot paths that have a pure-Python twin:
``speedups`` (None when it is not built) and the ``compiled`` mark that skips a test then."""

from __future__ import annotations

from types import ModuleType

import pytest

speedups: ModuleType | None
try:
    from amps_emulator import _speedups as speedups
except ImportError:
    speedups = None

compiled = pytest.mark.skipif(speedups is None, reason="the compiled extension is not built")
