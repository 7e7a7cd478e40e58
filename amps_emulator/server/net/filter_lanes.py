"""The worker threads that compile long filters off the event loop (``Connection._compile_aside``).

A compile costs about 9 us a character of filter text: a filter near the size limit
(``MAX_TEXT``, 256 KiB) holds a worker for two seconds or more. With one worker for every
client, any other client's long filter waited behind it. So there are two *lanes*, each one
worker thread: texts of at most :data:`SMALL_LANE` characters (under 0.1 s of compile each)
go to the small lane, longer ones to the large lane, and a small or medium filter never
queues behind a huge one.

More workers would not compile faster: the compile is Python code that holds the interpreter
lock, so threads only interleave (a lane's worker, the other lane's and the event loop take
turns every few milliseconds). A lane is a bound on the wait, not on the work.

Fairness between clients within a lane comes from the connection: while its filter compiles
it is busy (the frames it sends meanwhile are stashed, reading pauses past a limit), so each
connection has at most one compile queued or running, its commands keep their order, and a
lane's queue is first come, first served among connections.

A compile near the size limit allocates enough (the lexer's tokens, the parser's stack, the
tree) to set off a full garbage collection while it runs: about 25 ms with the command line's
heap policy (:mod:`server.ops.heap`: only what is not frozen is walked, here the compile's own
live objects, none of them garbage). Avoiding it would take freezing in the middle of the
parse or turning the collector off process-wide, which only moves the walk to whichever
thread allocates next (often the event loop); it is left as it is.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

#: the longest filter text compiled in the small lane (characters)
SMALL_LANE = 8 * 1024


class FilterLanes:
    """The two lanes' workers, each started on first use."""

    def __init__(self, small_lane: int = SMALL_LANE) -> None:
        self.small_lane = small_lane
        self._small: ThreadPoolExecutor | None = None
        self._large: ThreadPoolExecutor | None = None

    def pool(self, length: int) -> ThreadPoolExecutor:
        """The worker for a filter text of ``length`` characters."""
        if length <= self.small_lane:
            if self._small is None:
                self._small = ThreadPoolExecutor(1, thread_name_prefix="amps-filter-small")
            return self._small
        if self._large is None:
            self._large = ThreadPoolExecutor(1, thread_name_prefix="amps-filter-large")
        return self._large

    def shutdown(self) -> None:
        """Stop both workers; compiles not started are dropped (their connections close)."""
        for pool in (self._small, self._large):
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)
