"""The record storage of one topic: the interface its two backends share.

:class:`sow.storage.memory_backend.MemoryBackend` (transient) and
:class:`sow.storage.lmdb_backend.LmdbBackend` (persistent).  :class:`sow.topic.Topic` holds all
SOW logic and talks only to this interface, so both durabilities behave identically (one
contract test suite runs against both).

Interface (both classes):

``get(skey) -> Record | None``, ``put(rec, old)``, ``delete(skey)``, ``count()``,
``get_many(keys) -> [Record]`` (natural order), ``scan(f, decoder, dead, ctx_of) -> [(Record,
doc)]`` (natural order; ``doc`` is what ``f`` saw, possibly only the fields the query reads),
``iter_docs(decoder) -> (skey, doc)`` (for index builds), ``clear()``,
``hash_table(name)`` / ``ordered_table(name)`` / ``drop_table(name)``,
``meta_get(name)`` / ``meta_put(name, value)`` (small JSON values), ``reading()``.

Natural order: the order a query without ``orderby`` returns records in: first-insert order
(an update keeps the record's place; a record deleted and published again goes last), in both
backends.  Index paths sort their candidates into the same order, so a query returns the same
list whichever path runs.

Scans avoid full decoding where they can: the memory backend keeps every record's decoded
body; the LMDB backend decodes only the fields the query reads (see :mod:`sow.storage.lmdb_scan`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from amps_emulator.sow.storage.lmdb_backend import LmdbBackend
    from amps_emulator.sow.storage.memory_backend import MemoryBackend

__all__ = ["Backend", "NEW"]


class _New:
    """The type of :data:`NEW`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NEW"


#: what ``swap_plain`` returns when the key held no record
NEW = _New()

#: the record storage of one topic (the interface above)
Backend: TypeAlias = "MemoryBackend | LmdbBackend"
