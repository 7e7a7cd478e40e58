"""The commented sample configuration printed by ``--sample-config``.

The text lives in ``config/sample.xml`` (package data) so it can be read, copied and
diffed as a plain file; the unit tests load it to keep it valid and warning-free.
"""

from __future__ import annotations

from importlib import resources


def sample_config() -> str:
    """A commented AMPS configuration that loads without errors or warnings."""
    return resources.files(__package__).joinpath("sample.xml").read_text(encoding="utf-8")
