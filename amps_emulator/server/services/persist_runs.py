"""A client's run of publishes as one entry of the transaction log's persisted-ack FIFO.

The FIFO (``TxLog._persist_fifo``) holds ``(position, connection, item, failure reason)`` in
arrival order. A run of publishes one connection sent in one read, journaled at once, waits
as one entry whose item is a :class:`SeqRun` and whose position is the run's last: one tuple
and one conflated ack per run instead of one of each per publish. It behaves as the
publishes' own entries would:

* released whole once its last record is safe (one ``note_persisted`` of its highest ``s``,
  which the connection's conflated ack covers), or in part once a prefix of it is
  (:func:`split_front`: a sync destination that acknowledged part of the run);
* failed publish by publish (:func:`ack_entry` with a reason: the client's failed-write
  handler hears of each one);
* split into single entries where a refused write cuts through it (:func:`expand_failed`).
"""

from __future__ import annotations

import collections
from bisect import bisect_right
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from amps_emulator.server.delivery.acks import persisted as acks_persisted

if TYPE_CHECKING:
    from amps_emulator.server.core.ports import Client

Entry = tuple[int, "Client", Any, "str | None"]

_position = attrgetter("position")


class SeqRun:
    """The ``s`` of a run of publishes and their records (None: not recorded, all wait for one
    position), in order."""

    __slots__ = ("recs", "seqs")

    def __init__(self, recs: list[Any] | None, seqs: list[int]) -> None:
        self.recs = recs
        self.seqs = seqs

    def positions(self, last: int) -> list[int]:
        """Each publish's position (``last``: the entry's)."""
        return [last] * len(self.seqs) if self.recs is None else [r.position for r in self.recs]


def run_entry(client: Client, seqs: list[int], recs: list[Any] | None, last: int) -> Entry:
    """The FIFO entry of a run (one publish: its own entry, as ``wait_persisted`` makes)."""
    if len(seqs) == 1:
        return (last, client, seqs[0], None)
    return (last, client, SeqRun(recs, seqs), None)


def ack_entry(client: Client, item: Any, reason: str | None) -> None:
    """The persisted ack(s) of one FIFO entry (``acks.persisted`` for each publish of a run)."""
    if type(item) is not SeqRun:
        acks_persisted(client, item, reason)
    elif reason is None:
        client.note_persisted(max(item.seqs))  # (conflated: covers each of the run's)
    else:
        for seq in item.seqs:
            client.persisted_failure(seq, reason)


def split_front(fifo: collections.deque[Entry], safe: int) -> bool:
    """When the FIFO's first entry is a run whose records up to ``safe`` are a proper prefix:
    split it in two entries (that prefix, then the rest); whether it did."""
    last, client, item, reason = fifo[0]
    if type(item) is not SeqRun or item.recs is None or reason is not None:
        return False
    recs = item.recs
    k = bisect_right(recs, safe, key=_position)
    if not 0 < k < len(recs):
        return False
    fifo.popleft()
    fifo.appendleft((last, client, SeqRun(recs[k:], item.seqs[k:]), None))
    fifo.appendleft((recs[k - 1].position, client, SeqRun(recs[:k], item.seqs[:k]), None))
    return True


def expand_failed(fifo: collections.deque[Entry], first: int) -> None:
    """Split each run entry that ends at or after ``first`` (a refused write's first
    position) into one entry per publish, so the refusal fails exactly its own."""
    items = list(fifo)
    i = len(items)
    while i and items[i - 1][0] >= first:
        i -= 1
    if not any(type(e[2]) is SeqRun for e in items[i:]):
        return
    out = items[:i]
    for last, client, item, reason in items[i:]:
        if type(item) is SeqRun:
            out.extend((pos, client, seq, reason)
                       for pos, seq in zip(item.positions(last), item.seqs, strict=True))
        else:
            out.append((last, client, item, reason))
    fifo.clear()
    fifo.extend(out)


__all__ = ["SeqRun", "ack_entry", "expand_failed", "run_entry", "split_front"]
