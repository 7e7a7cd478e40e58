"""Hash and memo indexes over a SOW topic.

Both kinds only ever *narrow* a query: the planner fetches the candidates an index yields and
then runs the compiled filter on each of them, exactly as a scan would.  So an index is correct
as long as its candidate set is a **superset** of the records the predicate accepts, and the
encodings below are derived from the comparison rules of :mod:`protocol.filter.values` to
guarantee that (values compared as strings, numbers, or numeric strings; arrays = any element;
``''``/NULL/objects never compare true):

* ``order(x, lit) == 0`` implies that ``x`` and ``lit`` share a **token**:
  a number -> ``N<float repr>``; a non-empty string -> ``S<text>`` plus, when it spells a
  number (``parse_number``), ``N<...>`` of that number; a boolean -> ``N1``/``N0`` and
  ``Strue``/``Sfalse``.  Floats are canonicalised (``-0.0`` -> ``0.0``; ints beyond float range
  keep their decimal text), so two equal numbers always share a token and distinct numbers
  rarely do (a shared token is only a false candidate).
* For ranges (memo index) each scalar is stored in the **NUM** family (its numeric value, for
  numbers, numeric strings and booleans) and/or the **STR** family (its text, for strings and
  booleans), as order-preserving byte keys.  A predicate becomes a union of key intervals per
  family, always inclusive at both ends (float rounding and string truncation are monotone, so
  inclusive bounds never lose a match).  E.g. ``/x > 5`` is NUM [5, +inf] plus all of STR
  (a string that is not a number is greater than every number).

Hash index (``HashIndex`` config, and one implicit index over the ``Key`` fields): for a record,
one composite token per combination of its fields' tokens (an array field gives several;
short combinations are stored as they are, length-prefixed, long ones as a BLAKE2b digest);
past :data:`MAX_COMBINATIONS` the record goes to an *always-candidate* bucket.  A lookup needs
an equality (``=``/``IN``) on every field of the index.

Memo index (``Index`` config, or created on first use): ordered keys
``family + encoded value + SowKey`` in an ordered table (an LMDB named database, or
:class:`sow.storage.memory_tables.MemOrderedSet`).  Strings longer than :data:`MAX_STRING_BYTES` bytes are
truncated in the key and flagged, and a LIKE always returns flagged entries.

Both index kinds are written in the same write transaction as the record they describe.
"""

from __future__ import annotations

import hashlib
import re
import struct
from collections.abc import Callable, Iterable
from itertools import product
from typing import Any

from amps_emulator import accel
from amps_emulator.protocol.filter.values import elements, parse_number, resolve
from amps_emulator.sow.paths import parse_path, path_text

__all__ = [
    "HashIndex", "MemoIndex", "value_tokens", "literal_tokens", "memo_entries",
    "ranges_for_compare", "ranges_for_between", "intersect", "MAX_COMBINATIONS",
    "MAX_STRING_BYTES", "NUM", "STR",
]

MAX_COMBINATIONS = 64
MAX_LOOKUP_TOKENS = 4096
MAX_STRING_BYTES = 100  # memo keys: 1 + 2*100 (escaped) + 3 + SowKey (<= 255) < 511
_MAX_RAW_TOKEN = 64  # hash keys: 1 + 64 + SowKey (<= 255) < 511 (LMDB's key size limit)
NUM = b"\x01"
_S = ord("S")  # the first byte of a string token, of a number token
_N = ord("N")
STR = b"\x02"
_END = b"\x03"
_NUM_LEN = 9
_TOKEN = 16
_OTHERS = b"\xfe"  # always-candidate bucket (no composite token is one byte long)
_pack_d = struct.Struct(">d").pack


# ---- tokens (hash index) ------------------------------------------------------------------

_EXACT = 1 << 53  # an int within +-2**53 is a float exactly, whose repr is its digits + ".0"


def _num_token(n) -> bytes:
    if n.__class__ is int and -_EXACT <= n <= _EXACT:
        return b"N%d.0" % n  # (repr(float(n)), at a third of the cost)
    try:
        f = float(n) + 0.0
    except OverflowError:
        return b"I" + str(n).encode()
    return b"N" + repr(f).encode()


def int_run_py(field: str, keyed: list[tuple[Any, str]]) -> int:
    """How many (document, SowKey) pairs of ``keyed``, from the first on, are a 2-tuple whose
    document is a dict whose ``field`` is an int within +-2**53. The pure-Python twin of the
    compiled ``_speedups.int_run``."""
    n = 0
    for item in keyed:
        if item.__class__ is not tuple or len(item) != 2:
            break
        doc = item[0]
        if doc.__class__ is not dict:
            break
        v = doc.get(field)
        if v.__class__ is not int or not -_EXACT <= v <= _EXACT:
            break
        n += 1
    return n


def hash_int_rows_py(field: str, keyed: list[tuple[Any, str]]) -> list[tuple[bytes, str]]:
    """The rows (composite token, SowKey) a one-field hash index on ``field`` adds for the
    first :func:`int_run_py` pairs of ``keyed`` (then :meth:`HashIndex.add_run` goes on one
    by one). The pure-Python twin of the compiled ``_speedups.hash_int_rows``."""
    out: list[tuple[bytes, str]] = []
    for doc, skey in keyed[:int_run_py(field, keyed)]:
        p = _num_token(doc[field])
        out.append((bytes((len(p),)) + p, skey))
    return out


if accel.COMPILED:
    from amps_emulator import _speedups

    #: see hash_int_rows_py and int_run_py (compiled when built)
    hash_int_rows = _speedups.hash_int_rows
    int_run = _speedups.int_run
else:
    hash_int_rows = hash_int_rows_py
    int_run = int_run_py


def _scalar_tokens(x) -> tuple[bytes, ...]:
    t = type(x)
    if t is str:
        if not x:
            return ()
        s = b"S" + x.encode("utf-8", "surrogatepass")
        n = parse_number(x)
        return (s,) if n is None else (s, _num_token(n))
    if t is bool:
        return (b"N1.0", b"Strue") if x else (b"N0.0", b"Sfalse")
    if t is int:
        return (_num_token(x),)
    if t is float:
        return () if x != x else (_num_token(x),)
    return ()


def value_tokens(v: Any) -> set[bytes]:
    """Raw tokens of a field value (every element of an array)."""
    out: set[bytes] = set()
    if type(v) is list:
        for x in elements(v):
            out.update(_scalar_tokens(x))
    else:
        out.update(_scalar_tokens(v))
    return out


def literal_tokens(values: Iterable[Any]) -> set[bytes]:
    """Raw tokens an equality (``=`` one literal, ``IN`` several) can match."""
    out: set[bytes] = set()
    for v in values:
        out.update(_scalar_tokens(v))
    return out


def _composite(parts: tuple[bytes, ...]) -> bytes:
    """One token for a combination of per-field tokens: the length-prefixed concatenation
    when short (no hashing on the hot path), else ``0xff`` + a 16-byte BLAKE2b digest."""
    if len(parts) == 1 and len(parts[0]) < _MAX_RAW_TOKEN:
        p = parts[0]
        return bytes((len(p),)) + p
    if sum(len(p) for p in parts) + len(parts) < _MAX_RAW_TOKEN:
        return b"".join(bytes((len(p),)) + p for p in parts)
    h = hashlib.blake2b(digest_size=_TOKEN)
    for p in parts:
        h.update(b"%d:" % len(p))
        h.update(p)
    return b"\xff" + h.digest()


class HashIndex:
    """Equality index over an exact set of fields."""

    kind = "hash"

    def __init__(self, fields: Iterable[str], table) -> None:
        self.fields = tuple(fields)
        self.paths = tuple(parse_path(f) for f in self.fields)
        self.table = table
        self.name = "hash[" + ",".join(self.fields) + "]"
        p0 = self.paths[0] if self.paths else ()
        self._single = p0[0] if len(self.paths) == 1 and len(p0) == 1 and \
            type(p0[0]) is str else None

    def values(self, doc: Any) -> list:
        if self._single is not None:
            return [doc.get(self._single) if type(doc) is dict else resolve(doc, self.paths[0])]
        return [resolve(doc, p) for p in self.paths]

    def tokens(self, doc: Any, values: list | None = None) -> set[bytes]:
        vals = self.values(doc) if values is None else values
        if len(vals) == 1:  # the common single-field index: no sorting, no product
            t = value_tokens(vals[0])
            if len(t) > MAX_COMBINATIONS:
                return {_OTHERS}
            return {_composite((x,)) for x in t}
        per_field = []
        n = 1
        for v in vals:
            t = value_tokens(v)
            if not t:  # this field can never compare equal: no lookup can want the record
                return set()
            per_field.append(sorted(t))
            n *= len(t)
        if n > MAX_COMBINATIONS:
            return {_OTHERS}
        return {_composite(c) for c in product(*per_field)}

    def _scalar_rows(self, doc: Any):
        """The composite tokens of a single-field index on a scalar value (the hot path),
        else ``None``."""
        single = self._single
        if single is None or type(doc) is not dict:
            return None
        v = doc.get(single)
        t = v.__class__
        if t is int:  # (the common key field: one token, no tuple, no list comprehension)
            p = _num_token(v)
            return [bytes((len(p),)) + p if len(p) < _MAX_RAW_TOKEN else _composite((p,))]
        if t is list or t is dict:
            return None
        return [bytes((len(p),)) + p if len(p) < _MAX_RAW_TOKEN else _composite((p,))
                for p in _scalar_tokens(v)]

    def add(self, doc: Any, skey: str) -> None:
        self.add_run(((doc, skey),))

    def add_run(self, keyed: Iterable[tuple[Any, str]]) -> None:
        """:meth:`add` of each (document, SowKey), in one call to the table."""
        single = self._single
        rows: list[tuple[bytes, str]] = []
        if single is not None and isinstance(keyed, list):  # int fields in one call, the
            rows = hash_int_rows(single, keyed)  # rest (if any) one by one
            if len(rows) == len(keyed):
                self.table.add_rows(rows)
                return
            keyed = keyed[len(rows):]
        self.table.add_rows(self._rows(keyed, rows))

    def _rows(self, keyed: Iterable[tuple[Any, str]], rows: list[tuple[bytes, str]]
              ) -> list[tuple[bytes, str]]:
        """``rows`` with the (token, SowKey) rows of each (document, SowKey) added."""
        single = self._single
        append = rows.append
        for doc, skey in keyed:
            if single is not None and doc.__class__ is dict:
                v = doc.get(single)
                if v.__class__ is int:  # the common key field: one row (as in add)
                    p = _num_token(v)
                    append((bytes((len(p),)) + p if len(p) < _MAX_RAW_TOKEN
                            else _composite((p,)), skey))
                    continue
            r = self._scalar_rows(doc)
            for t in self.tokens(doc) if r is None else r:
                append((t, skey))
        return rows

    def remove(self, doc: Any, skey: str) -> None:
        rows = self._scalar_rows(doc)
        implied = self.implied
        for t in self.tokens(doc) if rows is None else rows:
            if implied(t) != skey:  # (a row the SowKey implies was never stored)
                self.table.discard(t, skey)

    def update(self, old_doc: Any, new_doc: Any, skey: str) -> None:
        change = self._change(old_doc, new_doc)
        if change is not None:
            implied = self.implied
            gone, new = change
            for t in gone:
                if implied(t) != skey:
                    self.table.discard(t, skey)
            for t in new:
                if implied(t) != skey:
                    self.table.add(t, skey)

    def _change(self, old_doc: Any, new_doc: Any) -> tuple[set[bytes], set[bytes]] | None:
        """(tokens no longer, tokens newly) of a record updated from ``old_doc`` to
        ``new_doc``; None: the same tokens."""
        single = self._single
        if single is not None and type(old_doc) is dict and type(new_doc) is dict:
            a = old_doc.get(single)
            b = new_doc.get(single)
            if type(a) is type(b) and type(a) in (str, int, float) and a == b:
                return None  # unchanged scalar (NaN != NaN falls through to the general path)
        ov = self.values(old_doc)
        nv = self.values(new_doc)
        if _same(ov, nv):
            return None
        old = self.tokens(old_doc, ov)
        new = self.tokens(new_doc, nv)
        if old == new:
            return None
        return old - new, new - old

    def lookup(self, per_field_values: list[list[Any]]) -> list[str] | None:
        """SowKeys of records that may have, for every field, one of the given values
        (``per_field_values`` in index field order).  ``None``: too many combinations."""
        per_field = []
        n = 1
        for vals in per_field_values:
            t = literal_tokens(vals)
            if not t:
                return []
            per_field.append(sorted(t))
            n *= len(t)
        if n > MAX_LOOKUP_TOKENS:
            return None
        out: dict[str, None] = {}
        implied = self.implied
        for c in product(*per_field):
            token = _composite(c)
            for k in self.table.get(token):
                out[k] = None
            k = implied(token)
            if k is not None:
                out[k] = None
        for k in self.table.get(_OTHERS):
            out[k] = None
        return list(out)

    def implied(self, token: bytes) -> str | None:
        """The SowKey a token names by itself (see :class:`KeyHashIndex`); None here."""
        return None

    def clear(self) -> None:
        self.table.clear()


class KeyHashIndex(HashIndex):
    """The hash index on a topic's Key field (one field, generated SowKeys), without the
    rows the SowKey makes redundant.

    A token names a SowKey by itself when it is a string token (the text ``s``: the SowKey
    of the key value ``s``) or a whole-number token (``5``: the SowKey of the text ``5``).
    A record's row for a token is stored only when the token does not name the record's own
    SowKey; a lookup adds, for every token it looks up, the SowKey the token names (a
    candidate the query's filter then checks, like every index candidate; a SowKey without a
    record is skipped).  So a record keyed ``{"id": 5}`` or ``{"id": "ABC"}`` (the common
    keys) has no row at all, and one keyed ``"05"`` or ``5.5`` keeps the rows that reach it
    from ``= 5`` or ``= 5.5``.  Whatever a token's form, the record side and the lookup side
    use the same :meth:`implied`, so no record is ever missed."""

    def __init__(self, fields: Iterable[str], table, key_of: Callable[[bytes], str]) -> None:
        super().__init__(fields, table)
        self._key_of = key_of  # key value text (UTF-8) -> SowKey

    def implied(self, token: bytes) -> str | None:
        if not token or len(token) != token[0] + 1:  # (a digest, a composite, _OTHERS)
            return None
        kind = token[1]
        if kind == _S:
            return self._key_of(token[2:])
        if kind == _N and token.endswith(b".0"):
            return self._key_of(token[2:-2])
        return None

    def whole_numbers(self, keyed: list[tuple[Any, str]]) -> bool:
        """Whether every (document, SowKey) of ``keyed`` has a whole number within +-2**53
        as its Key value: then neither the record nor the record it replaces has a row here
        (the replaced one has the same SowKey, so the same key text ``n``: it was the number
        ``n`` or the string ``"n"``, whose tokens both name that SowKey)."""
        single = self._single
        return single is not None and int_run(single, keyed) == len(keyed)

    def add_run(self, keyed: Iterable[tuple[Any, str]]) -> None:
        single = self._single
        if single is not None and isinstance(keyed, list):
            # a whole number n within +-2**53: its one token names the SowKey of the text
            # "n", which is the record's own: no row
            n = int_run(single, keyed)
            if n == len(keyed):
                return
            keyed = keyed[n:]
        implied = self.implied
        rows = [r for r in self._rows(keyed, []) if implied(r[0]) != r[1]]
        if rows:
            self.table.add_rows(rows)


def _same(a: Any, b: Any) -> bool:
    """Type-exact equality (``1`` vs ``1.0`` vs ``True`` differ: they index differently)."""
    ta = type(a)
    if ta is not type(b):
        return False
    if ta is list:
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=False))
    if ta is dict:
        return a.keys() == b.keys() and all(_same(v, b[k]) for k, v in a.items())
    return a == b


# ---- order-preserving keys (memo index) -----------------------------------------------------

def _enc_num(f: float) -> bytes:
    b = _pack_d(f + 0.0)
    if b[0] & 0x80:
        return bytes(x ^ 0xFF for x in b)
    return bytes((b[0] | 0x80,)) + b[1:]


def _to_float(n) -> float:
    try:
        return float(n)
    except OverflowError:
        return float("inf") if n > 0 else float("-inf")


def _enc_str(s: str) -> tuple[bytes, bool]:
    raw = s.encode("utf-8", "surrogatepass")
    cut = len(raw) > MAX_STRING_BYTES
    if cut:
        raw = raw[:MAX_STRING_BYTES]
    return raw.replace(b"\x00", b"\x00\xff"), cut


def _dec_str(esc: bytes) -> str:
    return esc.replace(b"\x00\xff", b"\x00").decode("utf-8", "ignore")


def _scalar_entries(x, out: set[bytes]) -> None:
    t = type(x)
    if t is str:
        if not x:
            return
        n = parse_number(x)
        if n is not None:
            out.add(NUM + _enc_num(_to_float(n)))
        esc, cut = _enc_str(x)
        out.add(STR + esc + (b"\x00\x00\x01" if cut else b"\x00\x00\x00"))
    elif t is bool:
        out.add(NUM + _enc_num(1.0 if x else 0.0))
        out.add(STR + (b"true" if x else b"false") + b"\x00\x00\x00")
    elif t is int:
        out.add(NUM + _enc_num(_to_float(x)))
    elif t is float:
        if x == x:
            out.add(NUM + _enc_num(x))


def memo_entries(v: Any) -> set[bytes]:
    """Key prefixes (family + encoded value) of a field value."""
    out: set[bytes] = set()
    if type(v) is list:
        for x in elements(v):
            _scalar_entries(x, out)
    else:
        _scalar_entries(v, out)
    return out


def _skey_of(key: bytes) -> str:
    if key[0] == 1:
        return key[_NUM_LEN:].decode()
    i = key.index(b"\x00\x00", 1)
    return key[i + 3:].decode()


# An interval list is a union of intervals:
#   ("N", lo, hi)   NUM family, floats, None = unbounded, inclusive
#   ("S", lo, hi)   STR family, strings, None = unbounded, inclusive
#   ("P", prefix)   STR family, values starting with prefix
#   ("R", regex, prefix|None)  STR family entries whose text the regex searches (+ truncated)
Interval = tuple

_ALL_NUM = ("N", None, None)
_ALL_STR = ("S", None, None)


def _iv(fam: str, op: str, v) -> Interval:
    if op == "=":
        return (fam, v, v)
    if op in ("<", "<="):
        return (fam, None, v)
    return (fam, v, None)  # > >=


def ranges_for_compare(op: str, lit: Any) -> list[Interval] | None:
    """Intervals holding every value ``x`` with ``x <op> lit`` TRUE; ``None``: not indexable."""
    if op not in ("=", "<", "<=", ">", ">="):
        return None
    t = type(lit)
    if lit is None or (t is str and not lit):
        return []
    if t is bool:
        return [_iv("N", op, 1.0 if lit else 0.0), _iv("S", op, "true" if lit else "false")]
    if t is int or t is float:
        if lit != lit:
            return []
        out = [_iv("N", op, _to_float(lit))]
        if op in (">", ">="):
            out.append(_ALL_STR)  # non-numeric strings are greater than any number
        return out
    if t is str:
        n = parse_number(lit)
        out = [_iv("S", op, lit)]
        if n is not None:
            out.append(_iv("N", op, _to_float(n)))
        elif op in ("<", "<="):
            out.append(_ALL_NUM)  # every number is less than a non-numeric string
        return out
    return None


def _lo(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return a if a >= b else b


def _hi(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return a if a <= b else b


def intersect(a: list[Interval], b: list[Interval]) -> list[Interval]:
    """Intersection of two unions of N/S intervals."""
    out = []
    for x in a:
        for y in b:
            if x[0] != y[0] or x[0] not in ("N", "S"):
                continue
            lo = _lo(x[1], y[1])
            hi = _hi(x[2], y[2])
            if lo is not None and hi is not None and lo > hi:
                continue
            out.append((x[0], lo, hi))
    return out


def _kind(v: Any) -> str | None:
    t = type(v)
    if t is int or t is float:
        return "num"
    if t is str:
        return "nstr" if parse_number(v) is not None else "str"
    return None


def ranges_for_between(low: Any, high: Any) -> list[Interval] | None:
    """``x BETWEEN low AND high`` is ``x >= low AND x <= high`` for the *same* element.

    When both bounds are of the same kind (numbers, numeric strings, other strings) each
    element is compared to both bounds in the same family, so the per-family intersection is
    exact.  Otherwise (e.g. ``BETWEEN 'a' AND 0``: a boolean compares as text with one bound
    and as a number with the other) only ``x >= low`` is used, which is still a superset."""
    a = ranges_for_compare(">=", low)
    b = ranges_for_compare("<=", high)
    if a is None or b is None:
        return None
    k = _kind(low)
    if k is not None and k == _kind(high):
        return intersect(a, b)
    return a


_META = re.compile(r"[\\.^$*+?{}\[\]|()]")


def like_prefix(pattern: str) -> str | None:
    """The literal prefix every match of an anchored regex starts with, if any."""
    if not pattern.startswith("^") or "(?" in pattern or "|" in pattern:
        return None  # flags (case-insensitive, multi-line) or alternation: no safe prefix
    body = pattern[1:]
    m = _META.search(body)
    lit = body if m is None else body[:m.start()]
    if m is not None and body[m.start()] in "?*{" and lit:
        lit = lit[:-1]  # the last literal char is optional/repeated
    return lit or None


class MemoIndex:
    """Ordered index over one field: ranges, LIKE, BEGINS WITH, equality."""

    kind = "memo"

    def __init__(self, field: str, table) -> None:
        self.field = field
        self.path = parse_path(field)
        self.table = table
        self.name = f"memo[{path_text(self.path)}]"

    def entries(self, doc: Any) -> set[bytes]:
        return memo_entries(resolve(doc, self.path))

    def add(self, doc: Any, skey: str) -> None:
        sk = skey.encode()
        for e in self.entries(doc):
            self.table.add(e + sk)

    def remove(self, doc: Any, skey: str) -> None:
        sk = skey.encode()
        for e in self.entries(doc):
            self.table.discard(e + sk)

    def update(self, old_doc: Any, new_doc: Any, skey: str) -> None:
        ov = resolve(old_doc, self.path)
        nv = resolve(new_doc, self.path)
        if _same(ov, nv):
            return
        old = memo_entries(ov)
        new = memo_entries(nv)
        if old == new:
            return
        sk = skey.encode()
        for e in old - new:
            self.table.discard(e + sk)
        for e in new - old:
            self.table.add(e + sk)

    def _bounds(self, iv: Interval) -> tuple[bytes, bytes]:
        fam = iv[0]
        if fam == "N":
            lo = NUM if iv[1] is None else NUM + _enc_num(iv[1])
            hi = STR if iv[2] is None else NUM + _enc_num(iv[2]) + b"\xff"
            return lo, hi
        if fam == "S":
            lo = STR if iv[1] is None else STR + _enc_str(iv[1])[0] + b"\x00\x00"
            hi = _END if iv[2] is None else STR + _enc_str(iv[2])[0] + b"\x00\x00\xff"
            return lo, hi
        if fam == "P" or (fam == "R" and iv[2]):
            p = iv[1] if fam == "P" else iv[2]
            lo = STR + _enc_str(p)[0]
            return lo, lo + b"\xff"
        return STR, _END  # "R" without prefix: the whole STR family

    def candidates(self, intervals: list[Interval], limit: int | None) -> list[str] | None:
        """SowKeys of records that may satisfy the predicate the intervals describe;
        ``None`` if more than ``limit`` index entries would have to be read."""
        out: dict[str, None] = {}
        budget = limit
        needs_all_num = any(iv[0] in ("P", "R") for iv in intervals)
        ivs = list(intervals)
        if needs_all_num:  # numbers are LIKE/BEGINS-tested on their text: keep them all
            ivs.append(_ALL_NUM)
        for iv in ivs:
            lo, hi = self._bounds(iv)
            keys = self.table.range(lo, hi, budget)
            if keys is None:
                return None
            if budget is not None:
                budget -= len(keys)
            if iv[0] == "R":
                rx = iv[1]
                for k in keys:
                    i = k.index(b"\x00\x00", 1)
                    if k[i + 2] == 1 or rx.search(_dec_str(k[1:i])) is not None:
                        out[k[i + 3:].decode()] = None
            else:
                for k in keys:
                    out[_skey_of(k)] = None
        return list(out)

    def clear(self) -> None:
        self.table.clear()
