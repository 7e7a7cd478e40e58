"""``do-compact-sow``'s work on one SOW environment, driven from the event loop.

The unit of compaction is the LMDB environment (``<dir>/amps-sow.lmdb``): every topic
stored in it is compacted with the one named. :func:`compact` runs a
:class:`~amps_emulator.sow.storage.lmdb_compact.Compaction` so that the server keeps
serving: the copy and most of the replay of the writes made meanwhile run in worker threads,
and the loop is held only for the last replay and the swap, at the end of a turn (after the
SOW commit and the journal write) and once no query reads the environment.

* The copy is made again (at most :data:`RETRIES` more times) when the writes made meanwhile
  outran the log, or the map grew before the copy began. Then, if the environment uses at
  most :data:`PAUSED_COPY_LIMIT` bytes, one last copy is made with the loop held; else the
  compaction is given up. Any other failure to make or update the copy (an LMDB or file
  system error: a full disk, say) gives it up at once, with that error as the reason; the
  live environment is untouched.
* Queries read the environment through snapshots that must end before the swap: it waits
  for a moment none is open, at most :data:`QUIET_SECONDS`, else gives up.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import lmdb

from amps_emulator.sow.storage.lmdb_compact import LOG_LIMIT, Compacted, Compaction, MapMoved
from amps_emulator.sow.storage.lmdbenv import LmdbEnv

__all__ = ["compact", "RETRIES", "PAUSED_COPY_LIMIT", "QUIET_SECONDS"]

#: copies made again when the first one could not be brought up to date
RETRIES = 2
#: catch-up rounds in a worker thread, while more than CATCH_UP_LEFT writes are logged
CATCH_UP_ROUNDS = 4
CATCH_UP_LEFT = 2000
#: the largest environment (bytes in use) copied with the event loop held, as a last resort
PAUSED_COPY_LIMIT = 32 << 20
#: how long to wait for the queries reading the environment to end before the swap
QUIET_SECONDS = 10.0
_POLL = 0.005

InThread = Callable[[Callable[[], Any]], Awaitable[Any]]


async def _end_of_turn(turn: Any) -> None:
    """Until the loop's next pass after the end of the current turn (the SOW batch
    committed, the journal written)."""
    fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def ended() -> None:
        if not fut.done():
            fut.set_result(None)

    turn.after(ended)
    await fut


async def _quiet(env: LmdbEnv, turn: Any) -> str | None:
    """Until the end of a turn where no read of ``env`` is open (the caller then swaps in
    the same pass); why not (None: it is quiet)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + QUIET_SECONDS
    while True:
        await _end_of_turn(turn)
        if env.closed:
            return "the SOW was closed"
        if not env.reading_open:
            return None
        if loop.time() >= deadline:
            return f"queries kept reading it for {QUIET_SECONDS:.0f} s"
        await asyncio.sleep(_POLL)


async def _attempt(env: LmdbEnv, turn: Any, in_thread: InThread, log_limit: int
                   ) -> Compacted | str | None:
    """One copy in a worker thread, brought up to date and swapped in: what it did, why it
    stopped (a reason), or None (stale: to be made again)."""
    await _end_of_turn(turn)
    if env.closed:
        return "the SOW was closed"
    job = Compaction(env, log_limit=log_limit)
    job.start()
    try:
        try:
            await in_thread(job.copy)
            rounds = 0
            while not job.stale and job.behind > CATCH_UP_LEFT and rounds < CATCH_UP_ROUNDS:
                await in_thread(job.catch_up)
                rounds += 1
        except MapMoved:  # the map grew before the copy began: made again
            job.abandon()
            return None
        except (lmdb.Error, OSError) as exc:  # the copy's own failure: not made again
            job.abandon()
            return _failed(exc)
        why = await _quiet(env, turn)
        if why is not None:
            job.abandon()
            return why
        done = job.finish(remove_old=False)  # (abandons itself when stale)
    except BaseException:
        job.abandon()
        raise
    if done is not None:
        await in_thread(job.remove_old)
    return done


async def compact(env: LmdbEnv, turn: Any, in_thread: InThread, *,
                  log_limit: int = LOG_LIMIT) -> Compacted | str:
    """Compact ``env`` (see the module docstring): what was done, or why it was not.
    ``turn``: the server's :class:`~amps_emulator.server.core.turn.Turn`; ``in_thread``:
    runs a function in a worker thread (which it lets finish, if cancelled); ``log_limit``:
    of the writes made during a copy (:class:`~amps_emulator.sow.storage.lmdb_compact.CommitLog`)."""
    if env.log is not None or env.copying:
        return "a compaction of it is already under way"
    for _ in range(RETRIES + 1):
        done = await _attempt(env, turn, in_thread, log_limit)
        if done is not None:
            return done
    used = env.used_bytes()
    if used > PAUSED_COPY_LIMIT:
        return (f"writes outran {RETRIES + 1} copies, and {used} bytes in use are too many to "
                f"copy with the server paused (at most {PAUSED_COPY_LIMIT})")
    why = await _quiet(env, turn)
    if why is not None:
        return why
    job = Compaction(env, pack=False)  # (its pages as LMDB copies them: a shorter hold)
    job.start()
    try:
        try:
            job.copy()
        except (lmdb.Error, OSError) as exc:
            job.abandon()
            return _failed(exc)
        done = job.finish()
    except BaseException:
        job.abandon()
        raise
    return done if done is not None else "the paused copy could not be brought up to date"


def _failed(exc: BaseException) -> str:
    """Why a compaction whose copy failed with ``exc`` was given up."""
    return f"making the compacted copy failed ({type(exc).__name__}: {exc})"
