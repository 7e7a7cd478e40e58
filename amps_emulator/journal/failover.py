"""Where a bookmark replay starts when the subscriber may have read its messages at another
instance (it failed over with the bookmark of the last message it processed there).

Two instances hold the same messages in different orders, and while a link is cut each holds
messages the other does not. A bookmark ``P|S|`` names one message; at the instance that gave
it, the subscriber has seen that instance's log up to it. Here, the records before that
message are not all ones it has seen: with the link from here cut, the records published here
meanwhile never reached the other instance, yet the message (which came from there) is logged
here after them. Starting after it would skip them for good.

So a replay starts at the first record here, before the bookmarked one, that the subscriber
may not have seen, and replays from there (the official clients drop what they have seen:
they keep, per publisher, the highest sequence processed). For a record that came from
instance ``S`` (its path's last name), what ``S`` held when it logged it is known from the
record itself: it arrived after every record ``S`` sent here before it (a link sends in log
order), and it carries :data:`~.identity.SEEN`, per instance, the last record ``S`` had
received from that instance before it (from this one: ``""``). Every instance sends its own
records in its log order, so ``S`` held:

* every record that came here from ``S`` before it;
* every record published here up to the one ``SEEN[""]`` names;
* every record from a third instance ``I`` up to the one ``SEEN[I]`` names (all of them when
  that one has not arrived here yet).

Anything else before it is a record the subscriber may not have seen: the replay starts at
the first such (or after the bookmarked record when there is none; always after it when it
was published here). A bookmark this instance does not hold at all (the subscriber saw a
message that has not arrived here, or never will) starts where the latest record from each
instance that replicates here would start: everything that instance sent later is replayed.

The reasoning holds for instances that each replicate their own messages to the others (a pair,
or a mesh whose links carry each instance's messages directly). A topic replicated to only
one side of a pair is not one a subscriber can fail over with.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from amps_emulator.protocol.bookmarks import Bookmark, BookmarkError, parse_bookmark

from .identity import SEEN, sender_of
from .record import JournalRecord

if TYPE_CHECKING:
    from .base import JournalCore
    from .stored import ReadHold


def seen_of(rec: JournalRecord) -> dict[str, str]:
    """The record's :data:`~.identity.SEEN` (empty: published here, or sent by an instance
    that did not say)."""
    text = rec.headers.get(SEEN) if rec.headers else None
    if not text:
        return {}
    try:
        return msgspec.json.decode(text, type=dict[str, str])
    except msgspec.DecodeError:
        return {}


def _bound(journal: JournalCore, text: str | None, unheld: int, hold: ReadHold | None) -> int:
    """The position here of the record bookmarked ``text`` (the one before it when it is
    absent); ``unheld`` when it has not arrived here; 0 when there is none."""
    if text is None:
        return 0
    try:
        bm = parse_bookmark(text)
    except BookmarkError:
        return 0
    if not isinstance(bm, Bookmark):
        return 0
    found = journal.locate(bm, hold)
    if found is None:
        return unheld
    pos, exact = found
    return pos if exact else pos - 1


def start_after(journal: JournalCore, rec: JournalRecord, hold: ReadHold | None = None) -> int:
    """The first position to replay for a subscriber whose last message is ``rec`` (held here),
    which it may have read at another instance (see the module docstring); ``hold``: see
    ``JournalCore.read``."""
    position = rec.position
    sender = sender_of(rec)
    if sender is None:
        return position + 1
    index = journal.sequence_index(hold)
    seen = seen_of(rec)
    start = position + 1
    for name in index.senders():
        if name != sender:
            first = index.first_arrival(name, _bound(journal, seen.get(name), position, hold))
            if first is not None and first < start:
                start = first
    mine = _bound(journal, seen.get(""), 0, hold)
    for r in journal.read(max(mine + 1, journal.first_position), hold=hold):
        if r.position >= start:
            break
        if sender_of(r) is None:  # published here, after what the sender had of ours
            return r.position
    return start


def start_for_unheld(journal: JournalCore, hold: ReadHold | None = None) -> int | None:
    """The first position to replay for a message bookmark this instance does not hold: where
    the latest record from each instance replicating here would start. None: no record here
    came from another instance. ``hold``: see ``JournalCore.read``."""
    index = journal.sequence_index(hold)
    best: int | None = None
    for name in index.senders():
        pos = index.last_arrival(name, journal.next_position)
        rec = None if pos is None else journal.record_at(pos, hold)
        if rec is not None:
            start = start_after(journal, rec, hold)
            best = start if best is None else min(best, start)
    return best


__all__ = ["seen_of", "start_after", "start_for_unheld"]
