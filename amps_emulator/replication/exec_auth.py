"""The exec authenticator (``libamps_exec_authenticator.so``): the password of an outgoing
replication connection is what a program writes to its standard output.

Each connection attempt runs the ``Command`` (``{{AMPS_USER_NAME}}`` in an argument replaced
by the ``UserName``), without a shell, as the server's user, in the server's working
directory, off the event loop (an asyncio subprocess), with

* standard input closed (``/dev/null``) and standard error discarded (a program may print
  secrets there);
* at most ``MaxLength`` bytes of its output read (the rest is read and dropped, so the
  program never blocks on a full pipe); surrounding white space (the newline a script ends
  with) is not part of the token;
* :data:`EXEC_TIMEOUT` seconds for the whole run: past it the program is killed.

A program that cannot start, exits with a status other than 0, runs out of time or prints
nothing refuses the attempt (:class:`~.wire.LinkRefused`, whose reason names the program and
the cause, never the output); the link is tried again after its ``ReconnectTimeout``.
"""

from __future__ import annotations

import asyncio
import contextlib

from amps_emulator.config.auxiliary.authenticators import USER_NAME_TOKEN
from amps_emulator.config.model import ReplicationAuthenticator

from .wire import LinkRefused

__all__ = ["EXEC_TIMEOUT", "run_exec_authenticator"]

#: seconds a Command may take to print its token
EXEC_TIMEOUT = 10.0
_CHUNK = 64 << 10


async def _read_bounded(stream: asyncio.StreamReader, limit: int) -> bytes:
    """The first ``limit`` bytes of ``stream``; the rest is read to its end and dropped."""
    kept = bytearray()
    while True:
        chunk = await stream.read(_CHUNK)
        if not chunk:
            return bytes(kept)
        if len(kept) < limit:
            kept += chunk[:limit - len(kept)]


async def run_exec_authenticator(auth: ReplicationAuthenticator, *,
                                 timeout: float = EXEC_TIMEOUT) -> tuple[str, str]:
    """(user name, token) for a connection through ``auth`` (an exec authenticator)."""
    user = auth.user or ""
    argv = [arg.replace(USER_NAME_TOKEN, user) for arg in auth.command or ()]
    program = argv[0] if argv else ""
    where = f"Authenticator: Command {program!r}"
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL)
    except (OSError, ValueError) as exc:
        raise LinkRefused(f"{where} cannot run: {getattr(exc, 'strerror', None) or exc}") from None
    assert proc.stdout is not None
    try:
        async with asyncio.timeout(timeout):
            out = await _read_bounded(proc.stdout, auth.max_length)
            status = await proc.wait()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        raise LinkRefused(f"{where} did not finish within {timeout:g} s; it was stopped") from None
    except BaseException:  # (the link was stopped meanwhile: the program is not left behind)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        raise
    if status != 0:
        raise LinkRefused(f"{where} exited with status {status}")
    token = out.decode("utf-8", "replace").strip()
    if not token:
        raise LinkRefused(f"{where} printed no credentials")
    return user, token
