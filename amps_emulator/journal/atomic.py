"""Replacing a file atomically, and making a file or a directory entry durable.

:func:`replace_file` is the one way the package rewrites a small file in place (a segment's
summary, an archived segment, ``retained-from``, a queue checkpoint, the SOW's state and
manifest files, a compressed log): the new content goes to a temporary file beside the
target, which is flushed, fsynced, renamed over the target, and the directory fsynced, so a
crash leaves either the old file or the new one, never a torn one. It sits in the journal
(the lowest layer that writes files) so that the layers above it share it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import BinaryIO

__all__ = ["O_CLOEXEC", "fsync_path", "replace_file"]

O_CLOEXEC: int = getattr(os, "O_CLOEXEC", 0)


def fsync_path(path: str) -> None:
    """fsync the file or directory ``path`` (a directory: so that the entries created,
    renamed or removed in it survive a crash)."""
    fd = os.open(path, os.O_RDONLY | O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_file(dst: str, content: bytes | Callable[[BinaryIO], object], *, fsync: bool = True,
                 sync_dir: bool = False, tmp: str | None = None, mode: int = 0o666) -> None:
    """Replace ``dst`` atomically by ``content`` (the bytes, or a function that writes them
    to the open file): written to ``tmp`` (default ``<dst>.tmp``; created with ``mode``
    unless it exists), flushed, fsynced (``fsync``), renamed over ``dst``; then, with
    ``sync_dir`` (and ``fsync``), ``dst``'s directory fsynced. When anything fails ``tmp``
    is removed, ``dst`` is as it was, and the error is raised."""
    if tmp is None:
        tmp = dst + ".tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | O_CLOEXEC, mode)
        with os.fdopen(fd, "wb") as out:
            if callable(content):
                content(out)
            else:
                out.write(content)
            out.flush()
            if fsync:
                os.fsync(out.fileno())
        os.replace(tmp, dst)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if fsync and sync_dir:
        fsync_path(os.path.dirname(dst) or ".")
