"""Sparse in-memory index of one segment: every Nth record's position, file offset and timestamp.

Rebuilt by recovery (from the frame prefixes, no payload decoding) and extended by appends with
the same rule (index a record when its position is at least ``interval`` past the last indexed
one; the first record of a segment is always indexed). A lookup bisects to the nearest entry
at or before the target and the caller scans at most ``interval`` frame prefixes forward.
Memory: three int64 arrays, ~24 bytes per entry (1M records, interval 256 -> ~100 KB).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right

DEFAULT_INDEX_INTERVAL = 256


class SparseIndex:
    __slots__ = ("positions", "offsets", "timestamps", "next_position", "interval")

    def __init__(self, interval: int = DEFAULT_INDEX_INTERVAL) -> None:
        self.positions = array("q")
        self.offsets = array("q")
        self.timestamps = array("q")
        self.next_position = 0  # the next position that must be indexed (first record: always)
        self.interval = interval

    def __len__(self) -> int:
        return len(self.positions)

    def maybe_add(self, position: int, offset: int, timestamp: int) -> None:
        if position >= self.next_position:
            self.positions.append(position)
            self.offsets.append(offset)
            self.timestamps.append(timestamp)
            self.next_position = position + self.interval

    def offset_for_position(self, position: int) -> int | None:
        """Offset of the last indexed record with position <= ``position`` (None: before all)."""
        i = bisect_right(self.positions, position) - 1
        return self.offsets[i] if i >= 0 else None

    def offset_before_time(self, timestamp: int) -> int | None:
        """Offset of the last indexed record with timestamp < ``timestamp`` (None: scan from the start).

        Timestamps are non-decreasing in log order, so the first record with ts >= ``timestamp``
        lies at or after this offset.
        """
        i = bisect_left(self.timestamps, timestamp) - 1
        return self.offsets[i] if i >= 0 else None
