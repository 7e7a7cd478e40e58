"""What the actions engine needs of the server that runs it, as Protocols.

The composition root (:class:`server.app.Server`) satisfies :class:`ActionHost` for the
steps that act on the server as a whole (its transports, its security, its life); the rest
the engine reaches through the :class:`~server.messaging.broker.Broker` (the message path, the SOW,
the journal, the clock).
"""

from __future__ import annotations

from typing import Protocol


class ActionHost(Protocol):
    def action_set_transport(self, name: str | None, enabled: bool) -> list[str]:
        """Enable or disable the transport ``name`` (None: every client transport); the names
        switched. Existing connections stay. ``LookupError`` when there is no such transport."""

    def action_switch_security(self, what: str, enabled: bool) -> None:
        """Enable or disable ``authentication`` or ``entitlement``."""

    def action_reset_security(self, what: str, transport: str | None, user: str | None) -> int:
        """Forget cached ``authentication`` / ``entitlement`` documents and disconnect the
        sessions they concern (on ``transport``, of ``user``; None: all); how many."""

    def request_shutdown(self) -> None:
        """Shut the server down cleanly, as SIGTERM does (soon, not from inside the caller)."""

    def journal_pins(self) -> list[int]:
        """Journal positions still needed (replays, queued messages): never removed."""

    def action_truncate_statistics(self, age: float) -> str | None:
        """Remove the Admin statistics older than ``age`` seconds; what was done (None: no
        statistics are kept, there is no Admin interface)."""

    def write_minidump(self, reason: str) -> str:
        """Write a minidump (``MiniDumpDirectory``) and run the ``on-minidump`` actions; its
        path. ``LookupError``: minidumps are disabled; ``OSError``: it could not be written."""
