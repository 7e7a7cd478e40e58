"""Delta messaging on SOW records: merging a ``delta_publish``, and the changed fields a
``delta_subscribe`` delivers.

Merge (AMPS delta publish rules, User Guide "Delta Messaging"): every field present in the
delta replaces the stored field; a field absent from the delta is unchanged (so a delta can
never remove a field); when both the stored and the delta value are JSON objects they are
merged recursively by the same rule; any other value -- arrays included -- is replaced as a
whole.  With no stored record the result is the delta itself.  Field order: stored fields keep
their place, new fields follow in delta order.  A body that is not a JSON object (array,
scalar, invalid JSON) cannot be merged: the delta replaces it.

Changed fields: the fields of the new record whose value differs from the old one (type-exact:
``1``, ``1.0`` and ``true`` differ), recursing into objects present in both, so a nested change
yields only the changed sub-fields with their parents.  Fields that disappeared (possible after
a full publish) cannot be expressed in a delta and are not reported.  The delivered message is
the changed fields plus the SOW key fields (AMPS always includes them, ``send_keys``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from amps_emulator.protocol.filter.values import resolve
from amps_emulator.sow.paths import parse_path

__all__ = ["merge", "changed_fields", "delta_message", "same_value"]

_encode = msgspec.json.encode


def merge(old: Any, delta: Any) -> Any:
    """The record after applying ``delta`` to ``old`` (neither is modified)."""
    if type(old) is not dict or type(delta) is not dict:
        return delta
    out = dict(old)
    for k, v in delta.items():
        cur = out.get(k)
        if type(v) is dict and type(cur) is dict:
            out[k] = merge(cur, v)
        else:
            out[k] = v
    return out


def same_value(a: Any, b: Any) -> bool:
    """JSON equality that distinguishes types (``1`` vs ``1.0`` vs ``true``)."""
    ta = type(a)
    if ta is not type(b):
        return False
    if ta is dict:
        if a.keys() != b.keys():
            return False
        return all(same_value(v, b[k]) for k, v in a.items())
    if ta is list:
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=False))
    return a == b


def changed_fields(old: Any, new: Any) -> dict:
    """Fields of ``new`` that differ from ``old`` (``{}`` if none; all of ``new`` if ``old``
    is not an object)."""
    if type(new) is not dict:
        return {}
    if type(old) is not dict:
        return dict(new)
    out = {}
    for k, v in new.items():
        if k not in old:
            out[k] = v
            continue
        o = old[k]
        if type(v) is dict and type(o) is dict:
            sub = changed_fields(o, v)
            if sub:
                out[k] = sub
        elif not same_value(o, v):
            out[k] = v
    return out


def _set(d: dict, path: tuple, value: Any) -> None:
    for s in path[:-1]:
        nxt = d.get(s)
        nxt = d[s] = dict(nxt) if type(nxt) is dict else {}  # copy: never alias the record
        d = nxt
    d[path[-1]] = value


def delta_message(old: Any, new: Any, key_fields: Iterable[str | tuple[str | int, ...]] = ()
                  ) -> tuple[dict, bool]:
    """``(message, changed)``: the changed fields of ``new`` plus its key fields (XPath
    texts, or paths already parsed), and whether any non-key data changed (``False`` -> a
    ``no_empties`` subscription skips it)."""
    ch = changed_fields(old, new)
    changed = bool(ch)
    if type(new) is dict:
        for f in key_fields:
            path = parse_path(f) if isinstance(f, str) else tuple(f)
            if not path or any(type(s) is int for s in path):
                continue
            v = resolve(new, path)
            if v is not None:
                _set(ch, path, v)
    return ch, changed


def encode(doc: Any) -> bytes:
    return _encode(doc)
