"""Located configuration problems: :class:`ConfigIssue` and :class:`ConfigError`.

Every problem the loader finds is a ``ConfigIssue(file, line, reason)``. Errors are collected
for the whole file (and every included file) before anything is raised: one
:class:`ConfigError` carries all of them, and ``str()`` of it
lists one per line as ``file:line: reason``. Warnings (real AMPS elements the emulator does
not implement) use the same record and end up in ``Config.warnings``.

A line of 0 means the problem has no position inside a file (e.g. the file cannot be read);
it is then written ``file: reason``, with no line number.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple


class ConfigIssue(NamedTuple):
    """One located error or warning."""

    file: str
    line: int
    reason: str

    def __str__(self) -> str:
        if self.line <= 0:  # about the file as a whole: no line to point at
            return f"{self.file}: {self.reason}"
        return f"{self.file}:{self.line}: {self.reason}"


class ConfigError(Exception):
    """Raised by the loaders when a configuration has one or more errors.

    ``errors`` holds every :class:`ConfigIssue` found, in discovery (document) order.
    """

    def __init__(self, errors: Iterable[ConfigIssue]) -> None:
        self.errors: list[ConfigIssue] = list(errors)
        super().__init__("\n".join(str(e) for e in self.errors))

    def __str__(self) -> str:
        return "\n".join(str(e) for e in self.errors)
