"""How :class:`sow.storage.lmdb_backend.LmdbBackend` reads stored bodies in a scan.

It decodes only the top-level fields the query reads (a ``TypedDict`` msgspec decoder built
per set of field names) straight from the memory-mapped value, and builds a :class:`Record`
only for matching rows.  For a filter with a fields mode
(:func:`protocol.filter.fields.fields_filter`) the scan is one generated loop with the
filter inlined, decoding each body into a ``Struct`` of those fields instead; it matches
exactly the rows, and returns exactly the documents, of the general loop.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from typing import Any

import msgspec

from amps_emulator.sow.record import KEY_SEQ, decode_record

__all__ = ["DECODE_ERRORS", "FIELDS_BYTES_LOOP", "FIELDS_LOOP", "FIELDS_LOOP_NAMES",
           "FIELDS_STORED_LOOP", "any_doc", "body_offset", "partial_doc", "passing"]

# RecursionError: a body nested deeper than msgspec decodes is no document (matches nothing)
DECODE_ERRORS = (msgspec.DecodeError, UnicodeDecodeError, TypeError, RecursionError)
_json = msgspec.json


# The scan loop around a filter's fields mode (protocol.filter.fields.FieldsFilter): one
# generated function per filter, the filter's test inlined, no call per record.  A record's
# body is decoded into a struct of the fields the query reads; a body that is not a JSON
# object goes through the compiled filter on its full decode, exactly as ``partial_doc`` does.
# Only matching rows are keyed, built and decoded into the document the query returns.
FIELDS_LOOP = """
def _scan_loop(_q_values, _q_dec, _q_doc, _q_fn, _q_key, _q_dead):
    _q_out = []
    _q_append = _q_out.append
    for _q_v in _q_values:
        _q_body = _q_v[_q_v[0] or _q_offset(_q_v):]
        try:
            _s = _q_dec(_q_body)
        except _q_errors:
            _q_d = _q_any(_q_body)
            if _q_fn(_q_d):
                _q_k = str(_q_key()[_q_seq:], "utf-8")
                if _q_k not in _q_dead:
                    _q_append((_q_record(_q_k, _q_v), _q_d))
            continue
        try:
            <PRE>
            if not ({test}):
                continue
        except Exception:  # a bug: counted, and answered by the reference interpreter
            if not _recover(_q_partial(_q_doc, _q_body)):
                continue
        _q_k = str(_q_key()[_q_seq:], "utf-8")
        if _q_k not in _q_dead:
            _q_append((_q_record(_q_k, _q_v), _q_partial(_q_doc, _q_body)))
    return _q_out
"""


# The same loop keeping the matching rows as stored (LmdbBackend._scan_stored): the key and
# the value of each match are copied out, nothing else is decoded.
FIELDS_STORED_LOOP = """
def _scan_loop(_q_values, _q_dec, _q_doc, _q_fn, _q_key, _q_dead, _q_rows):
    _q_append = _q_rows.append
    for _q_v in _q_values:
        _q_body = _q_v[_q_v[0] or _q_offset(_q_v):]
        try:
            _s = _q_dec(_q_body)
        except _q_errors:
            if _q_fn(_q_any(_q_body)):
                _q_k = bytes(_q_key())
                if not _q_dead or str(_q_k[_q_seq:], "utf-8") not in _q_dead:
                    _q_append((_q_k, bytes(_q_v)))
            continue
        try:
            <PRE>
            if not ({test}):
                continue
        except Exception:  # a bug: counted, and answered by the reference interpreter
            if not _recover(_q_partial(_q_doc, _q_body)):
                continue
        _q_k = bytes(_q_key())
        if not _q_dead or str(_q_k[_q_seq:], "utf-8") not in _q_dead:
            _q_append((_q_k, bytes(_q_v)))
"""


# ... reading bytes (a snapshot of bytes): they are kept as they are, no copy
FIELDS_BYTES_LOOP = FIELDS_STORED_LOOP.replace("bytes(_q_key())", "_q_key()").replace(
    "bytes(_q_v)", "_q_v")


def body_offset(value) -> int:
    return int.from_bytes(value[32:36], "big")


def passing(cur, limit: int | None, f, decoder) -> Iterator[tuple[Any, Any]]:
    """(stored value, document) of each record from the cursor's (at most ``limit`` read)
    whose document passes ``f``, reading values only; the cursor stays on each while the
    caller looks (its key: ``cur.key()``)."""
    dec = decoder.decode if decoder is not None else None
    empty: dict = {}
    for v in islice(cur.iternext(keys=False), limit):
        if dec is None:
            d = empty
        else:
            o = v[0]
            body = v[o:] if o else v[int.from_bytes(v[32:36], "big"):]
            try:
                d = dec(body)
            except DECODE_ERRORS:
                d = any_doc(body)  # not an object (array, scalar) or not JSON
        if f(d):
            yield v, d


def any_doc(data) -> Any:
    try:
        return _json.decode(data)
    except DECODE_ERRORS:
        return None


def partial_doc(decoder, data) -> Any:
    if decoder is None:
        return {}
    try:
        return decoder.decode(data)
    except DECODE_ERRORS:
        return any_doc(data)  # a body that is not a JSON object: decode it whole


def _partial_with(decode, data) -> Any:
    try:
        return decode(data)
    except DECODE_ERRORS:
        return any_doc(data)


FIELDS_LOOP_NAMES = {"_q_errors": DECODE_ERRORS, "_q_any": any_doc, "_q_offset": body_offset,
                      "_q_record": decode_record, "_q_partial": _partial_with,
                      "_q_seq": KEY_SEQ}
