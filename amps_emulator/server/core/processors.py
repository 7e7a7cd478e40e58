"""What each of AMPS's message processors did, for the Admin interface's
``/amps/instance/processors`` (the Monitoring Reference's processing types).

The message path bumps integers here and never reads them back; the Admin's sampler turns
them into rates and ``last_active``. One :class:`Meter` per processing type the emulator has:

* ``external`` (publish and subscribe): the bytes of the publishes clients send, and of the
  messages sent to their subscriptions (the counts are the broker's ``published`` and
  ``delivered``);
* ``sow`` (queries of SOW topics and queues): a query received, the records it returned and
  the bytes of the ``sow`` batches that carried them;
* ``queue``: a message entering a queue (its bytes), a message delivered from one (the bytes
  sent);
* ``bookmark`` (replays of the transaction log): the records a replay read from the log
  (their bytes), the messages it sent (the bytes sent).

``queries_in_progress`` counts the SOW queries begun and not yet finished (``queued_queries``).
"""

from __future__ import annotations

__all__ = ["Meter", "Processors"]


class Meter:
    """One processor's counters: messages (and bytes) received, matches (and bytes) found."""

    __slots__ = ("received", "received_bytes", "found", "found_bytes")

    def __init__(self) -> None:
        self.received = 0
        self.received_bytes = 0
        self.found = 0
        self.found_bytes = 0

    def take(self, nbytes: int, n: int = 1) -> None:
        """``n`` messages of ``nbytes`` bytes in all came in."""
        self.received += n
        self.received_bytes += nbytes

    def give(self, nbytes: int, n: int = 1) -> None:
        """``n`` matches went out in ``nbytes`` bytes."""
        self.found += n
        self.found_bytes += nbytes


class Processors:
    """The meters of one server (see the module docstring)."""

    __slots__ = ("external", "sow", "queue", "bookmark", "queries_in_progress")

    def __init__(self) -> None:
        self.external = Meter()
        self.sow = Meter()
        self.queue = Meter()
        self.bookmark = Meter()
        self.queries_in_progress = 0
