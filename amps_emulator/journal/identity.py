"""Message identity across instances: which bookmark sequence a record gets, and where a
bookmark ``P|S|`` is in this instance's log.

A message keeps one bookmark everywhere (docs/design/replication.md 2.2): ``publisher id | sequence``,
where the sequence is the publisher's own ``s`` when the publish carries one (what a publish
store assigns, below 2^63), otherwise ``max(position, last + 1)`` -- the log position as before, but never
at or below what this publisher already holds here, so a publisher's sequences keep growing
after a failover to an instance whose log is shorter. Replicated records keep the sequence they
were given at their origin. So the sequence is not the local log position, and resolution goes
through :class:`SequenceIndex`, a per-publisher ``sequence -> position`` map (two ``array('Q')``
per publisher, 16 bytes a record; sequences rise in log order per publisher, so both arrays are
sorted and a lookup is one bisect).

Replicated records also keep their origin time and path; they travel in reserved record
headers (never sent to clients): :data:`ORIGIN_TS` (microseconds at the origin), :data:`PATH`
(the instance names the message passed through, origin first, comma separated),
:data:`UPSTREAM_GROUP` (the Group of the instance it came from) and :data:`SEEN` (what the
instance that sent it had received before it: see :mod:`.failover`). The index also keeps,
per instance a record came from, the positions of the records that came from it
(:meth:`SequenceIndex.arrived`). The frame ``timestamp`` stays
this instance's log time: it must not decrease in log order (time bookmarks bisect it), and a
time bookmark means "logged here at or after".
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping

from .record import JournalRecord

#: reserved record headers of replicated records
ORIGIN_TS = "x-emu-repl-origin-ts"
PATH = "x-emu-repl-path"
UPSTREAM_GROUP = "x-emu-repl-upstream-group"
#: JSON {instance name: bookmark}: per instance, the last record the sending instance had
#: received from it before this one ("" names the receiving instance itself)
SEEN = "x-emu-repl-seen"

#: ``SequenceIndex.locate``'s position for "older than the retained log"
BEFORE_RETAINED = 0


#: an ``s`` at or above this is not taken as the sequence, so a publisher's sequences always
#: have room to grow (a publish store's ``s`` is about 1.7e18, epoch ms x 10^6: far below)
SEQUENCE_FROM_S_LIMIT = 1 << 63


def assign_sequence(position: int, last: int, client_seq: int | None) -> int:
    """The bookmark sequence of a new local record (see the module docstring)."""
    if client_seq and client_seq < SEQUENCE_FROM_S_LIMIT:
        return client_seq if client_seq > last else last + 1
    return position if position > last else last + 1


def origin_timestamp(rec: JournalRecord) -> int:
    """Microseconds at which the message was first logged anywhere (its origin's log time)."""
    text = rec.headers.get(ORIGIN_TS) if rec.headers else None
    return int(text) if text else rec.timestamp


def path_of(rec: JournalRecord) -> tuple[str, ...]:
    """Instance names the record passed through before this one (empty: published here)."""
    text = rec.headers.get(PATH) if rec.headers else None
    return tuple(text.split(",")) if text else ()


def upstream_group(rec: JournalRecord) -> str | None:
    """Group of the instance this record was replicated from (None: published here)."""
    return rec.headers.get(UPSTREAM_GROUP) if rec.headers else None


def sender_of(rec: JournalRecord) -> str | None:
    """Name of the instance this record was replicated from (None: published here)."""
    text = rec.headers.get(PATH) if rec.headers else None
    return text.rsplit(",", 1)[-1] if text else None


class Arrivals:
    """The positions of the records replicated here from one instance, ascending, as runs of
    consecutive positions (``starts[i]..ends[i]``, adjacent runs merged): a run of records a
    link appended at once is noted in one step, and a reader steps over it in one look."""

    __slots__ = ("ends", "starts")

    def __init__(self) -> None:
        self.starts = array("Q")
        self.ends = array("Q")

    def __bool__(self) -> bool:
        return bool(self.ends)

    def add_range(self, first: int, last: int) -> None:
        """Positions ``first..last`` (after every one noted so far)."""
        ends = self.ends
        if ends and ends[-1] + 1 >= first:
            ends[-1] = max(ends[-1], last)
        else:
            self.starts.append(first)
            ends.append(last)

    def add_all(self, positions: Iterable[int]) -> None:
        """``positions`` (ascending, after every one noted so far)."""
        if isinstance(positions, range) and positions.step == 1:
            if positions:
                self.add_range(positions.start, positions.stop - 1)
            return
        first = last = -2
        for p in positions:
            if p != last + 1:
                if first >= 0:
                    self.add_range(first, last)
                first = p
            last = p
        if first >= 0:
            self.add_range(first, last)

    def run_end(self, position: int) -> int | None:
        """The last position of the run holding ``position`` (None: it did not arrive)."""
        i = bisect_right(self.starts, position) - 1
        if i < 0 or position > self.ends[i]:
            return None
        return self.ends[i]

    def last_before(self, before: int) -> int | None:
        i = bisect_left(self.starts, before) - 1
        return None if i < 0 else min(self.ends[i], before - 1)

    def first_after(self, after: int) -> int | None:
        i = bisect_right(self.ends, after)
        return max(self.starts[i], after + 1) if i < len(self.ends) else None

    def trim(self, first_position: int) -> None:
        """Forget positions before ``first_position``."""
        i = bisect_left(self.ends, first_position)
        del self.starts[:i], self.ends[:i]
        if self.starts and self.starts[0] < first_position:
            self.starts[0] = first_position


class SequenceIndex:
    """Per publisher, the sorted ``(sequence, position)`` pairs of the retained log."""

    def __init__(self, *, head_removed: bool = False) -> None:
        self._seqs: dict[int, array] = {}
        self._pos: dict[int, array] = {}
        self._trimmed: dict[int, int] = {}  # publisher id -> highest sequence removed by retention
        #: instance name -> positions of the records replicated here from it
        self._arrivals: dict[str, Arrivals] = {}
        #: built over a log whose oldest records were already removed (a reopened journal): a
        #: sequence below a publisher's first retained one may have been among them
        self._head_removed = head_removed

    def __len__(self) -> int:
        return sum(len(a) for a in self._seqs.values())

    def add(self, publisher_id: int, sequence: int, position: int) -> None:
        seqs = self._seqs.get(publisher_id)
        if seqs is None:
            seqs = self._seqs[publisher_id] = array("Q")
            self._pos[publisher_id] = array("Q")
        elif seqs and sequence <= seqs[-1]:
            raise ValueError(f"sequence {sequence} of publisher {publisher_id} does not follow {seqs[-1]}")
        seqs.append(sequence)
        self._pos[publisher_id].append(position)

    def extend(self, publisher_id: int, sequences: list[int], positions: Iterable[int]) -> None:
        """:meth:`add` for a run of one publisher's records (``sequences`` increasing)."""
        if not sequences:
            return
        seqs = self._seqs.get(publisher_id)
        if seqs is None:
            seqs = self._seqs[publisher_id] = array("Q")
            self._pos[publisher_id] = array("Q")
        elif seqs and sequences[0] <= seqs[-1]:
            raise ValueError(f"sequence {sequences[0]} of publisher {publisher_id} does not follow "
                             f"{seqs[-1]}")
        seqs.extend(sequences)
        self._pos[publisher_id].extend(positions)

    def add_records(self, records: Iterable[JournalRecord]) -> None:
        for rec in records:
            self.add(rec.publisher_id, rec.sequence, rec.position)
            sender = sender_of(rec)
            if sender is not None:
                self.arrived(sender, rec.position)

    def arrived(self, sender: str, position: int) -> None:
        """The record at ``position`` was replicated here from instance ``sender``."""
        got = self._arrivals.get(sender)
        if got is None:
            got = self._arrivals[sender] = Arrivals()
        got.add_range(position, position)

    def arrived_run(self, sender: str, positions: Iterable[int]) -> None:
        """:meth:`arrived` for records at ``positions`` (ascending), all from ``sender``."""
        got = self._arrivals.get(sender)
        if got is None:
            got = self._arrivals[sender] = Arrivals()
        got.add_all(positions)

    def arrival_run(self, sender: str, position: int) -> int | None:
        """The last position of the run of consecutive positions from ``position`` on whose
        records all came from ``sender`` (None: the record at ``position`` did not)."""
        got = self._arrivals.get(sender)
        return got.run_end(position) if got else None

    def senders(self) -> list[str]:
        """The instances records were replicated here from (retained ones)."""
        return [name for name, got in self._arrivals.items() if got]

    def last_arrival(self, sender: str, before: int) -> int | None:
        """Position of the last record from ``sender`` before position ``before``."""
        got = self._arrivals.get(sender)
        return got.last_before(before) if got else None

    def first_arrival(self, sender: str, after: int) -> int | None:
        """Position of the first record from ``sender`` after position ``after``."""
        got = self._arrivals.get(sender)
        return got.first_after(after) if got else None

    def locate(self, publisher_id: int, sequence: int) -> tuple[int, bool] | None:
        """``(position, exact)`` for ``P|S|``.

        * exact: the record holding that bookmark;
        * ``S`` absent but ``P`` has larger sequences here: the position of the first of them,
          ``exact`` False (a replay starts there: just before it, after everything older);
        * ``S`` removed by retention (or older than anything retained that was removed):
          :data:`BEFORE_RETAINED`, False;
        * None: ``P`` unknown, or nothing of ``P`` here reaches ``S`` (not arrived yet).
        """
        seqs = self._seqs.get(publisher_id)
        trimmed = self._trimmed.get(publisher_id, 0)
        if seqs is None or not seqs:
            return (BEFORE_RETAINED, False) if 0 < sequence <= trimmed else None
        i = bisect_left(seqs, sequence)
        if i == len(seqs):
            return None
        if seqs[i] == sequence:
            return self._pos[publisher_id][i], True
        if i == 0 and (sequence <= trimmed or self._head_removed):
            return BEFORE_RETAINED, False
        return self._pos[publisher_id][i], False

    def trim(self, first_position: int) -> None:
        """Forget entries before ``first_position`` (retention removed them)."""
        for pid, pos in list(self._pos.items()):
            i = bisect_left(pos, first_position)
            if not i:
                continue
            seqs = self._seqs[pid]
            self._trimmed[pid] = max(self._trimmed.get(pid, 0), seqs[i - 1])
            del seqs[:i]
            del pos[:i]
        for got in self._arrivals.values():
            got.trim(first_position)

    def rebase(self, first_position: int) -> None:
        """Become what a build starting at ``first_position`` would have made of the same
        records (``JournalCore.sequence_index``: a build under way whose log's head retention
        moved). Unlike :meth:`trim`, the sequences removed are not remembered (a build from
        there never saw them; ``head_removed`` says that some may have been), publishers and
        senders left with no entry are dropped, and the others keep the order of their first
        retained entry."""
        self.trim(first_position)
        self._trimmed.clear()
        self._head_removed = first_position > 1
        seqs, pos = self._seqs, self._pos
        kept = sorted((pid for pid, a in pos.items() if a), key=lambda pid: pos[pid][0])
        self._seqs = {pid: seqs[pid] for pid in kept}
        self._pos = {pid: pos[pid] for pid in kept}
        self._arrivals = dict(sorted(((name, got) for name, got in self._arrivals.items() if got),
                                     key=lambda item: item[1].starts[0]))

    def high_water(self) -> dict[int, int]:
        """Publisher id -> highest sequence in the retained log."""
        return {pid: seqs[-1] for pid, seqs in self._seqs.items() if seqs}

    def first_missing(self, theirs: Mapping[int, int]) -> int | None:
        """Smallest position of a record whose sequence is above ``theirs`` for its publisher
        (the earliest record a peer with those high-water marks lacks); None: it lacks nothing."""
        best: int | None = None
        for pid, seqs in self._seqs.items():
            if not seqs:
                continue
            i = bisect_left(seqs, theirs.get(pid, 0) + 1)
            if i < len(seqs):
                p = self._pos[pid][i]
                if best is None or p < best:
                    best = p
        return best


__all__ = ["BEFORE_RETAINED", "ORIGIN_TS", "Arrivals", "PATH", "SEEN", "UPSTREAM_GROUP", "SequenceIndex",
           "assign_sequence", "origin_timestamp", "path_of", "sender_of", "upstream_group"]
