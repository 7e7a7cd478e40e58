"""The LMDB keys of a persistent topic: its databases' names and its records' keys.

A record's LMDB key is its insert sequence (8 bytes, big-endian) followed by its SowKey (the
layout is described in :mod:`sow.storage.lmdb_backend`); :func:`record_keys` gives a keyed run's keys
in one call, compiled in ``_speedups`` when that is built.
"""

from __future__ import annotations

import hashlib
from typing import Any

from amps_emulator import accel
from amps_emulator.sow.record import KEY_SEQ

__all__ = ["db_base_name", "lmdb_key", "record_keys", "record_keys_py"]


def db_base_name(topic: str) -> str:
    if len(topic.encode()) <= 200:
        return "sow:" + topic
    return "sow:#" + hashlib.blake2b(topic.encode(), digest_size=16).hexdigest()


def record_keys_py(lk_of: dict[str, bytes], keyed: list[tuple[Any, str]], seq: int
                   ) -> tuple[list[bytes], int]:
    """The LMDB key of each SowKey of ``keyed`` ((document, SowKey) pairs) in ``lk_of``;
    a SowKey it lacks gets the next insert sequence (``seq + 1``, 8 bytes big-endian, then
    the SowKey's UTF-8), put into ``lk_of``. Returns (the keys, the last sequence given).
    The pure-Python twin of the compiled ``_speedups.record_keys``."""
    g = lk_of.get
    out: list[bytes] = []
    append = out.append
    for item in keyed:
        if item.__class__ is not tuple or len(item) != 2 or item[1].__class__ is not str:
            raise TypeError("record_keys: keyed holds (document, str) pairs")
        key = item[1]
        lk = g(key)
        if lk is None:
            seq += 1
            lk = lk_of[key] = lmdb_key(seq, key.encode())
        append(lk)
    return out, seq


def lmdb_key(seq: int, skey: bytes) -> bytes:
    """A record's LMDB key: its insert sequence (8 bytes, big-endian), then its SowKey."""
    return seq.to_bytes(KEY_SEQ, "big") + skey


if accel.COMPILED:
    from amps_emulator import _speedups

    #: see record_keys_py (compiled when built)
    record_keys = _speedups.record_keys
else:
    record_keys = record_keys_py
