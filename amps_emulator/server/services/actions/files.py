"""The files ``do-remove-files`` and ``do-compress-files`` act on, and acting on one.

:func:`select` reads ``Pattern`` as a shell glob (relative to the server's working
directory, or absolute), never recursing, and keeps the regular files whose last change is
older than ``Age``, oldest first; ``Keep`` leaves that many of them (the newest), ``Count``
takes at most that many. It never takes:

* a symbolic link (acting on it would act on a file the pattern does not name), a directory,
  a socket, a pipe or a device;
* an AMPS journal (a name ending in ``.journal``): reported as an error, as AMPS does;
* a file this process has open (its log files, SOW and LMDB files, the active journal
  segment; where ``/proc/self/fd`` tells), or one in the transaction log's own directories
  (its segments, compressed or archived, summaries and acknowledgement files);
* for compressing, a file already ending in ``.gz`` or whose ``.gz`` already exists.

:func:`remove` and :func:`compress` act on one file and run in a worker thread.
Compressing writes gzip (what AMPS's compressed logs and journals are) to a temporary file
beside the original, fsyncs it, keeps the original's times, renames it to ``<name>.gz`` and
only then deletes the original.
"""

from __future__ import annotations

import dataclasses
import glob
import gzip
import os
import shutil
import stat
import tempfile
from collections.abc import Collection
from typing import BinaryIO

from amps_emulator.journal.atomic import O_CLOEXEC, replace_file

JOURNAL_SUFFIX = ".journal"
GZ_SUFFIX = ".gz"
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


@dataclasses.dataclass
class Selection:
    """What :func:`select` found: the files to act on (oldest first) and the ones it refused,
    with why (``error``: an AMPS journal, which AMPS reports as an error)."""

    chosen: list[str] = dataclasses.field(default_factory=list)
    refused: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    errors: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    matched: int = 0


def open_files() -> set[str]:
    """The real paths of the files this process has open (empty where the OS does not say)."""
    found: set[str] = set()
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return found
    for fd in fds:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("/"):
            found.add(target.removesuffix(" (deleted)"))
    return found


def select(pattern: str, age: float, now: float, *, keep: int | None = None,
           count: int | None = None, protected_dirs: Collection[str] = (),
           busy: Collection[str] = (), compressing: bool = False) -> Selection:
    """The files ``pattern`` names that may be removed or compressed now (see the module
    docstring). ``busy``: real paths of open files; ``protected_dirs``: real paths of
    directories whose files are never taken."""
    sel = Selection()
    protected = {os.path.realpath(d) for d in protected_dirs if d}
    candidates: list[tuple[float, str]] = []
    for path in sorted(glob.glob(pattern)):
        sel.matched += 1
        try:
            st = os.lstat(path)
        except OSError:
            continue  # gone meanwhile
        if stat.S_ISLNK(st.st_mode):
            sel.refused.append((path, "a symbolic link (not followed)"))
            continue
        if not stat.S_ISREG(st.st_mode):
            continue  # directories (no recursion), sockets, pipes, devices
        if path.endswith(JOURNAL_SUFFIX):
            sel.errors.append((path, "an AMPS journal: only the journal actions act on those"))
            continue
        real = os.path.realpath(path)
        if real in busy:
            sel.refused.append((path, "open"))
            continue
        if os.path.dirname(real) in protected:
            sel.refused.append((path, "a file of the transaction log"))
            continue
        if compressing and (path.endswith(GZ_SUFFIX) or os.path.lexists(path + GZ_SUFFIX)):
            if not path.endswith(GZ_SUFFIX):
                sel.refused.append((path, f"{path}{GZ_SUFFIX} exists"))
            continue
        if now - st.st_mtime > age:
            candidates.append((st.st_mtime, path))
    candidates.sort()
    n = len(candidates)
    if keep is not None:
        n -= keep
    if count is not None:
        n = min(n, count)
    sel.chosen = [path for _, path in candidates[:max(n, 0)]]
    return sel


def _same_regular_file(path: str) -> os.stat_result:
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        raise OSError(f"{path} is no longer a regular file")
    return st


def remove(path: str) -> int:
    """Delete ``path`` (still a regular file, not a link); its size."""
    st = _same_regular_file(path)
    os.unlink(path)
    return st.st_size


def compress(path: str, *, fsync: bool = True) -> tuple[int, int]:
    """Replace ``path`` by ``<path>.gz`` (see the module docstring); its size before and after."""
    directory = os.path.dirname(path) or "."
    fd = os.open(path, os.O_RDONLY | _O_NOFOLLOW | O_CLOEXEC)
    with os.fdopen(fd, "rb") as src:
        st = os.fstat(src.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{path} is not a regular file")
        dst = path + GZ_SUFFIX
        if os.path.lexists(dst):
            raise FileExistsError(f"{dst} exists")

        def fill(out: BinaryIO) -> None:
            with gzip.GzipFile(filename=os.path.basename(path), mode="wb", fileobj=out,
                               mtime=int(st.st_mtime)) as z:
                shutil.copyfileobj(src, z, 1 << 20)
            out.flush()
            os.utime(out.fileno(), ns=(st.st_atime_ns, st.st_mtime_ns))  # (nothing writes after)

        tmp_fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path),
                                       suffix=".gz.tmp")
        os.close(tmp_fd)
        replace_file(dst, fill, fsync=fsync, sync_dir=True, tmp=tmp)
    os.unlink(path)
    return st.st_size, os.path.getsize(dst)


__all__ = ["Selection", "compress", "open_files", "remove", "select"]
