"""``Bootstrap`` (docs/design/replication.md 1.5), sans-IO: what a source sends an instance that fills
itself from it, and when an instance bootstraps.

An instance bootstraps when it starts with an empty transaction log (or a bootstrap of a
previous run did not finish: :data:`MARKER` is still in its journal directory). It connects to
the first reachable ``Bootstrap/Transport`` address with a hello that carries a
:class:`~.wire.BootstrapAsk`; the source answers with its hello, then:

1. with ``sow``: the records of the selected SOW topics whose message is not in its retained
   transaction log any more (or every one, without ``txlog``), oldest first, each with its
   bookmark, so the journal keeps one identity per message;
2. with ``txlog``: every retained record of the selected topics up to its durable position,
   *including* those that passed through the instance being filled (the messages replication's
   loop prevention would never send back to their origin);
3. ``repl_boot`` with the count.

The instance appends them like replicated records (duplicates dropped), applies them, waits
until they are durable, removes the marker and only then starts its replication links. SOW
records without a bookmark (a topic the source does not record in its transaction log) have no
identity to journal under and are not copied; the source logs how many.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from typing import Any

from amps_emulator.journal import Journal, ReadHold, SegmentPending
from amps_emulator.journal.record import RecordKind
from amps_emulator.protocol.bookmarks import Bookmark
from amps_emulator.protocol.codec import frame
from amps_emulator.protocol.topics import display_name, type_of
from amps_emulator.replication.link import REPLICATED_KINDS, record_frame
from amps_emulator.replication.wire import BootstrapAsk
from amps_emulator.sow import Record, Topic

#: file in the journal directory while a bootstrap is under way
MARKER = "bootstrap-incomplete"


def needs_bootstrap(journal: Journal, directory: str | None) -> bool:
    """An empty transaction log, or a bootstrap that did not finish."""
    if journal.last_position == 0:
        return True
    return directory is not None and os.path.exists(os.path.join(directory, MARKER))


def mark(directory: str | None, underway: bool) -> None:
    """Create (``underway``) or remove the marker; a journal without a directory has none."""
    if directory is None or not os.path.isdir(directory):
        return
    path = os.path.join(directory, MARKER)
    if underway:
        with open(path, "w") as f:
            f.write("a bootstrap from another instance is under way\n")
    elif os.path.exists(path):
        os.unlink(path)


def bookmark_of(text: str) -> Bookmark | None:
    """``pid|seq|`` of a SOW record (None: it has none)."""
    parts = text.split("|")
    if len(parts) < 2:
        return None
    try:
        bm = Bookmark(int(parts[0]), int(parts[1]))
    except ValueError:
        return None
    return bm if bm.publisher_id and bm.sequence else None


def sow_record_frame(key: str, rec: Record, bm: Bookmark, *, local_name: str, local_group: str) -> bytes:
    h: dict[str, Any] = {
        "c": "repl_rec", "pos": 0, "k": int(RecordKind.PUBLISH), "t": display_name(key), "mt": type_of(key),
        "pid": str(bm.publisher_id), "seq": str(bm.sequence), "cn": "",
        "ts": int(rec.timestamp * 1_000_000), "path": local_name, "ug": local_group, "x": rec.sow_key,
    }
    if rec.expiration is not None:  # what is left of its lifetime, counted from its time
        h["e"] = max(1, math.ceil(rec.expiration - rec.timestamp))
    return frame(h, rec.data)


class BootstrapSource:
    """The frames one bootstrap request gets, in order (see the module docstring)."""

    def __init__(self, ask: BootstrapAsk, journal: Journal, sow_topics: dict[str, Topic], *,
                 local_name: str, local_group: str) -> None:
        self.ask = ask
        self.journal = journal
        self.sow_topics = sow_topics
        self.local_name = local_name
        self.local_group = local_group
        self.sent = 0
        self.without_bookmark = 0  # SOW records not copied: no identity to journal them under
        #: a compressed segment is decompressed in the journal cache's worker: :meth:`ready`
        #: and :meth:`log_frames` stop there (``waiting``) and go on once ``hold.wake`` is called
        self.hold = ReadHold()
        self.waiting = False
        self._next = journal.first_position  # the next record :meth:`log_frames` reads

    def ready(self) -> bool:
        """Whether the journal's sequence index, where :meth:`sow_frames` looks up whether a
        SOW record's message is in the transaction log, is built (False: it is being built,
        a segment it reads is being decompressed; call again once ``hold.wake`` is called)."""
        try:
            self.journal.first_position_missing_from({}, self.hold)  # (builds it)
        except SegmentPending:
            return False
        return True

    def sow_frames(self) -> Iterator[bytes]:
        if "sow" not in self.ask.data_types:
            return
        with_log = "txlog" in self.ask.data_types
        picked: list[tuple[int, str, Record, Bookmark]] = []
        for key, topic in self.sow_topics.items():
            if not self.ask.selects(display_name(key), type_of(key)):
                continue
            for rec in topic.records():
                bm = bookmark_of(rec.bookmark)
                if bm is None:
                    self.without_bookmark += 1
                elif not (with_log and self.journal.position_of(bm) is not None):
                    picked.append((rec.position, key, rec, bm))
        picked.sort(key=lambda p: p[0])  # log order at the source: each publisher's sequences rise
        for _, key, rec, bm in picked:
            self.sent += 1
            yield sow_record_frame(key, rec, bm, local_name=self.local_name, local_group=self.local_group)

    def log_frames(self, upto: int) -> Iterator[bytes]:
        """The selected records up to ``upto``, from where the previous call stopped: it stops
        (with :attr:`waiting`) where the log goes on in a compressed segment still being
        decompressed."""
        self.waiting = False
        if "txlog" not in self.ask.data_types:
            return
        journal = self.journal
        try:
            for rec in journal.read(max(self._next, journal.first_position), hold=self.hold):
                if rec.position > upto:
                    break
                self._next = rec.position + 1
                if rec.kind in REPLICATED_KINDS and self.ask.selects(rec.topic, rec.message_type):
                    self.sent += 1
                    yield record_frame(rec, local_name=self.local_name, local_group=self.local_group)
        except SegmentPending:
            self.waiting = True

    def done_frame(self) -> bytes:
        return frame({"c": "repl_boot", "n": self.sent})


__all__ = ["MARKER", "BootstrapSource", "bookmark_of", "mark", "needs_bootstrap", "sow_record_frame"]
