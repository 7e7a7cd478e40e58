"""The files of a compaction of an LMDB environment (:mod:`sow.storage.lmdb_compact`), and
how a compaction cut short by a crash is settled at the next open.

Beside the environment directory ``<env>`` a compaction uses three others:

* ``<env>.compact-tmp``: the copy being made (incomplete: thrown away at open);
* ``<env>.compact-new``: the copy, complete and flushed, not in place yet (renamed from
  ``-tmp`` once it holds every committed write);
* ``<env>.compact-old``: the old environment, closed, moved out of the way.

The swap is two renames, each made durable (the parent directory fsynced) before the next
step: ``<env>`` -> ``-old``, then ``-new`` -> ``<env>``; then ``-old`` is removed. Whatever
point a crash stops it at, :func:`recover` leaves one complete environment at ``<env>``:

* ``<env>`` there: it is the one (the old one if the swap had not begun, the new one if it
  was done): a ``-new`` or ``-old`` left beside it is removed;
* ``<env>`` missing, ``-old`` there (crash between the two renames): the old one goes back;
* ``<env>`` and ``-old`` missing, ``-new`` there: the new one goes in place.
"""

from __future__ import annotations

import json
import logging
import os
import shutil

from amps_emulator.journal.atomic import fsync_path, replace_file

__all__ = ["TMP", "NEW", "OLD", "recover", "write_state", "remove_tree"]

log = logging.getLogger("amps_emulator.sow.lmdb")

TMP, NEW, OLD = ".compact-tmp", ".compact-new", ".compact-old"
STATE_FILE = "emulator-state.json"


def write_state(path: str, state: dict) -> None:
    """Write the environment's state file in ``path``, replaced atomically."""
    replace_file(os.path.join(path, STATE_FILE), json.dumps(state).encode())


def remove_tree(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


def _parent(path: str) -> str:
    return os.path.dirname(os.path.abspath(path.rstrip(os.sep)))


def recover(path: str) -> str | None:
    """Settle a compaction of the environment ``path`` that a crash cut short (see the
    module docstring); what was done (None: nothing was left)."""
    base = path.rstrip(os.sep)
    tmp, new, old = base + TMP, base + NEW, base + OLD
    if not any(map(os.path.exists, (tmp, new, old))):
        return None
    done = []
    if os.path.exists(tmp):
        remove_tree(tmp)
        done.append("an incomplete copy removed")
    if not os.path.exists(base):
        if os.path.exists(old):
            os.replace(old, base)
            done.append("the old environment put back")
        elif os.path.exists(new):
            os.replace(new, base)
            done.append("the compacted environment put in place")
        fsync_path(_parent(base))
    if os.path.exists(new):
        remove_tree(new)
        done.append("the unused compacted copy removed")
    if os.path.exists(old):
        remove_tree(old)
        done.append("the old environment removed")
    what = "; ".join(done)
    log.warning("SOW LMDB %s: a compaction was cut short: %s", base, what)
    return what
