"""``amps-action-do-remove-files`` and ``do-compress-files``, on the emulator's own minidumps.

AMPS's modules act on any file their ``Pattern`` (a shell glob; relative to the working
directory) matches. The emulator's only such files are its minidumps
(:mod:`server.core.minidump`), so it acts on those alone: a matched file is removed or
compressed only if it is a regular file whose name is a minidump's
(:data:`~server.core.minidump.NAME_RE`); any other match is left alone and counted in the
step's log line. As in AMPS: only files not modified within ``Age``, no recursion, the
oldest first, ``Keep`` of them left untouched and at most ``Count`` processed (with both,
nothing when fewer than ``Keep`` qualify). Compressing writes ``NAME.gz`` (gzip) and removes
``NAME``; a dump already compressed is not compressed again.
"""

from __future__ import annotations

import glob
import gzip
import os
import shutil
import stat

from amps_emulator.server.core.minidump import NAME_RE

__all__ = ["compress", "dump_files", "remove"]


def dump_files(pattern: str, age: float, now: float, keep: int | None, count: int | None,
               compressed: bool) -> tuple[list[str], int]:
    """(the minidumps to process, oldest first; how many other files ``pattern`` matched).
    ``compressed``: dumps already compressed qualify too (to remove them)."""
    ours: list[tuple[float, str]] = []
    others = 0
    for path in glob.glob(pattern):
        try:
            st = os.lstat(path)
        except OSError:
            continue
        name = os.path.basename(path)
        if not stat.S_ISREG(st.st_mode) or not NAME_RE.fullmatch(name):
            others += 1
        elif (compressed or not name.endswith(".gz")) and now - st.st_mtime >= age:
            ours.append((st.st_mtime, path))
    paths = [p for _, p in sorted(ours)]
    if keep is not None:
        paths = paths[:max(len(paths) - keep, 0)]
    if count is not None:
        paths = paths[:count]
    return paths, others


def remove(paths: list[str]) -> list[str]:
    done = []
    for path in paths:
        try:
            os.remove(path)
        except OSError:
            continue
        done.append(path)
    return done


def compress(paths: list[str]) -> list[str]:
    done = []
    for path in paths:
        try:
            with open(path, "rb") as src, gzip.open(path + ".gz", "wb") as dst:
                shutil.copyfileobj(src, dst)
            shutil.copymode(path, path + ".gz")
            os.remove(path)
        except OSError:
            continue
        done.append(path)
    return done
