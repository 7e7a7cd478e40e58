"""The one exception the filter package raises for a filter it cannot accept."""

from __future__ import annotations

from amps_emulator.protocol.reasons import BAD_FILTER, CommandError

__all__ = ["FilterError"]


class FilterError(CommandError):
    """A filter or expression that does not parse or compile.

    The server turns it into a failure ack with reason ``bad filter`` (the official clients
    raise ``BadFilterException``).  ``position`` is the 0-based character offset of the
    problem in the filter text when known (else ``None``); ``detail`` describes it.
    """

    def __init__(self, detail: str, position: int | None = None, text: str | None = None):
        where = f" at position {position}" if position is not None else ""
        super().__init__(BAD_FILTER, f"{detail}{where}")
        self.detail = detail
        self.position = position
        self.text = text
