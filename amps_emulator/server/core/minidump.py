"""The emulator's minidump: a diagnostic text file of where every thread and task is.

An AMPS minidump records each thread's stack at the moment it is taken, for 60East's support.
The emulator's equivalent is a text file in ``MiniDumpDirectory`` (default ``/tmp``; created
if missing) holding, in order: a header (instance, process, time, why), a short summary of the
server's state the caller gives (clients, topics, memory), every thread's Python stack
(``sys._current_frames``) and every asyncio task's stack. It is bounded: at most
:data:`MAX_FRAMES` frames per stack, :data:`MAX_TASKS` tasks and :data:`MAX_BYTES` bytes in
all (the rest is cut, and the cut is said). Its name is unique and says what wrote it
(:data:`NAME_RE`: ``amps-emulator-<UTC time>-<pid>-<random>.dmp``), so the housekeeping
actions can tell the emulator's own dumps from any other file. ``MiniDumpFileMask`` (default
``0640``) is applied to it as ``chmod`` would.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import os
import platform
import re
import secrets
import sys
import threading
import traceback
from collections.abc import Mapping
from typing import Any

__all__ = ["DEFAULT_DIRECTORY", "DEFAULT_MASK", "MAX_BYTES", "NAME_RE", "write_minidump"]

DEFAULT_DIRECTORY = "/tmp"
DEFAULT_MASK = 0o640
#: the most bytes one dump holds
MAX_BYTES = 1 << 20
#: the most frames of one stack (the innermost ones)
MAX_FRAMES = 64
#: the most asyncio tasks listed
MAX_TASKS = 500
#: the names of the files :func:`write_minidump` writes (``.gz``: compressed since)
NAME_RE = re.compile(r"amps-emulator-\d{8}T\d{6}Z-\d+-[0-9a-f]{8}\.dmp(\.gz)?")


def write_minidump(directory: str, summary: Mapping[str, Any], reason: str,
                   instance: str = "", mask: int = DEFAULT_MASK,
                   loop: asyncio.AbstractEventLoop | None = None) -> str:
    """Write one dump into ``directory``; its path. ``OSError`` when it cannot be written."""
    now = _dt.datetime.now(_dt.UTC)
    os.makedirs(directory, exist_ok=True)
    name = f"amps-emulator-{now:%Y%m%dT%H%M%S}Z-{os.getpid()}-{secrets.token_hex(4)}.dmp"
    path = os.path.join(os.path.abspath(directory), name)
    data = _bounded(_render(now, summary, reason, instance, loop))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:  # (writes it all, unlike one os.write)
        out.write(data)
    os.chmod(path, mask)
    return path


def _render(now: _dt.datetime, summary: Mapping[str, Any], reason: str, instance: str,
            loop: asyncio.AbstractEventLoop | None) -> list[str]:
    out = ["amps-emulator minidump", f"instance: {instance}", f"reason: {reason}",
           f"time: {now.isoformat()}", f"pid: {os.getpid()}",
           f"python: {sys.version.split()[0]} ({platform.python_implementation()}) on "
           f"{platform.platform()}", "", "== state =="]
    out += [f"{key}: {value}" for key, value in summary.items()]
    names = {t.ident: t.name for t in threading.enumerate()}
    frames = sys._current_frames()
    out += ["", f"== threads ({len(frames)}) =="]
    for ident, frame in frames.items():
        out.append(f"-- thread {names.get(ident, '?')} ({ident})")
        out += _lines(traceback.format_stack(frame, limit=-MAX_FRAMES))
    tasks = list(asyncio.all_tasks(loop)) if loop is not None else []
    out += ["", f"== asyncio tasks ({len(tasks)}) =="]
    for task in tasks[:MAX_TASKS]:
        out.append(f"-- task {task.get_name()}: {task.get_coro()!r}")
        awaiting = _awaiting(task.get_coro())
        out += _lines(traceback.StackSummary.extract((f, f.f_lineno) for f in awaiting).format())
    if len(tasks) > MAX_TASKS:
        out.append(f"... {len(tasks) - MAX_TASKS} more tasks not listed")
    return out


def _awaiting(coro: Any) -> list[Any]:
    """The frames of a task's coroutine and of what it awaits, outermost first."""
    frames: list[Any] = []
    while coro is not None and len(frames) < MAX_FRAMES:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            break
        frames.append(frame)
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return frames


def _lines(formatted: list[str]) -> list[str]:
    return [line for chunk in formatted for line in chunk.rstrip("\n").split("\n")]


def _bounded(lines: list[str]) -> bytes:
    """The dump's bytes, cut at the last whole line within :data:`MAX_BYTES` (counted in
    bytes: a character may take several)."""
    data = ("\n".join(lines) + "\n").encode("utf-8", "replace")
    if len(data) <= MAX_BYTES:
        return data
    cut = data[:MAX_BYTES]
    return cut[:cut.rfind(b"\n") + 1] + f"... cut at {MAX_BYTES} bytes\n".encode()
