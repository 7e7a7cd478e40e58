"""``amps-action-do-execute-system``: a shell command run off the event loop.

AMPS runs the command in its action thread, so the steps after it wait for it and commands
never overlap. The emulator keeps both properties without holding its event loop: the
command runs as an asyncio subprocess (``/bin/sh -c COMMAND``, in the server's working
directory and with its environment, stdin closed), one command at a time in the order the
steps asked for them, and the action's next steps run when it has finished
(:meth:`.engine.Actions.run` resumes the action then).

Bounds: the command is killed (its whole process group) after ``Timeout`` (an emulator
option of the step, a duration; default :data:`DEFAULT_TIMEOUT`: AMPS expects a command to
take a second or two); at most :data:`OUTPUT_LIMIT` bytes of each of stdout and stderr are
kept (the rest is read and dropped, so a chatty command never blocks on a full pipe); at most
:data:`MAX_WAITING` commands wait for their turn (past that the step fails and its action
ends). Each command logs one line: INFO when it exited with status 0, WARNING on any other
status, on a kill at the timeout, or when it could not be started.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("amps_emulator.actions")

#: seconds a command may run before it is killed, when the step gives no ``Timeout``
DEFAULT_TIMEOUT = 5.0
#: bytes of each output stream kept (and logged)
OUTPUT_LIMIT = 4096
#: commands that may wait for the one running
MAX_WAITING = 256
_CHUNK = 65536
_AFTER_KILL = 1.0  # seconds to read what a killed command wrote


@dataclass
class Outcome:
    """What became of one command."""

    status: int | None  # the exit status (negative: killed by that signal); None: not run
    stdout: bytes = b""
    stderr: bytes = b""
    dropped: int = 0  # output bytes read past OUTPUT_LIMIT and dropped
    timed_out: bool = False
    seconds: float = 0.0


class CommandRunner:
    """Runs the commands of ``do-execute-system`` steps, one at a time, in order."""

    def __init__(self) -> None:
        self._lock: asyncio.Lock | None = None
        self.waiting = 0
        self.ran = 0

    def busy(self) -> bool:
        return self.waiting >= MAX_WAITING

    async def run(self, command: str, timeout: float, where: str) -> Outcome:
        """Run ``command`` after the ones asked for before it; log the outcome (``where``:
        the step, for the log line)."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        self.waiting += 1
        try:
            await self._lock.acquire()
        finally:
            self.waiting -= 1
        try:
            outcome = await _execute(command, timeout)
        finally:
            self._lock.release()
        self.ran += 1
        _log(where, command, timeout, outcome)
        return outcome


async def _execute(command: str, timeout: float) -> Outcome:
    started = time.monotonic()
    try:
        proc = await asyncio.create_subprocess_shell(
            command, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, start_new_session=True)
    except OSError as exc:
        return Outcome(None, stderr=str(exc).encode(), seconds=time.monotonic() - started)
    assert proc.stdout is not None and proc.stderr is not None
    out, err = _Capture(), _Capture()
    readers = asyncio.gather(out.drain(proc.stdout), err.drain(proc.stderr), proc.wait())
    timed_out = False
    try:
        await asyncio.wait_for(asyncio.shield(readers), timeout)
    except TimeoutError:
        timed_out = True
        _kill(proc)
        try:  # the pipes close with the group (not if a child left it: then stop reading)
            await asyncio.wait_for(readers, _AFTER_KILL)
        except TimeoutError:
            pass
    except BaseException:  # cancelled (the server stops): the command goes too
        _kill(proc)
        readers.cancel()
        readers.add_done_callback(_retrieved)
        with contextlib.suppress(BaseException):  # reaped before the loop may close
            await asyncio.wait_for(proc.wait(), _AFTER_KILL)
        raise
    return Outcome(proc.returncode, bytes(out.kept), bytes(err.kept), out.dropped + err.dropped,
                   timed_out, time.monotonic() - started)


def _retrieved(done: asyncio.Future[Any]) -> None:
    if not done.cancelled():
        done.exception()  # (read: nobody waits for it any more)


def _kill(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL the command's process group (the shell and whatever it started)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class _Capture:
    __slots__ = ("kept", "dropped")

    def __init__(self) -> None:
        self.kept = bytearray()
        self.dropped = 0

    async def drain(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(_CHUNK):
            room = OUTPUT_LIMIT - len(self.kept)
            if room > 0:
                self.kept += chunk[:room]
            self.dropped += max(len(chunk) - max(room, 0), 0)


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace").strip()


def _log(where: str, command: str, timeout: float, o: Outcome) -> None:
    output = f"stdout {_text(o.stdout)!r}, stderr {_text(o.stderr)!r}" + (
        f" ({o.dropped} more output bytes dropped)" if o.dropped else "")
    if o.timed_out:
        log.warning("%s: %r killed after its %gs timeout; %s", where, command, timeout, output)
    elif o.status is None:
        log.warning("%s: could not run %r: %s", where, command, _text(o.stderr))
    else:
        log.log(logging.INFO if o.status == 0 else logging.WARNING,
                "%s: %r exited with status %d after %.3fs; %s", where, command, o.status,
                o.seconds, output)


__all__ = ["DEFAULT_TIMEOUT", "MAX_WAITING", "OUTPUT_LIMIT", "CommandRunner", "Outcome"]
