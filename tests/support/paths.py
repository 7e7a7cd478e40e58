"""Where things are, for tests that read files or start programs: the repository, the test
tree, its data fixtures and the official JavaScript client's directory. A test names these
instead of counting ``parents[...]`` from its own file, so moving a test never breaks it."""

from __future__ import annotations

from pathlib import Path

#: the repository's root (``pyproject.toml``, ``amps_emulator/``, ``examples/``, ``bench/``)
ROOT = Path(__file__).resolve().parents[2]
#: ``tests/``
TESTS = ROOT / "tests"
#: ``tests/fixtures/``: configs and seed files read by tests
FIXTURES = TESTS / "fixtures"
#: ``tests/js/``: the pinned official JavaScript client (``npm ci`` there) and its scenarios
JS_DIR = TESTS / "js"
