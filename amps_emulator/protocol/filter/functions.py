"""The built-in AMPS functions available to filters and expressions.

``FUNCTIONS`` maps an upper-case name to a :class:`Function`.  Implementations receive the
argument values unconverted (arrays included) and apply the AMPS conventions themselves:
functions are not array-aware (they use an array's first element, via ``to_num`` /
``to_str``), a NULL argument gives NULL unless stated, and a string that is not a number
counts as NaN where a number is wanted.  Functions of kind ``"context"`` read the
:class:`~protocol.filter.context.MessageContext` instead and return NULL when it does not
carry the value.  ``IF`` is not here: it is a node of its own (its branches are lazy).
"""

from __future__ import annotations

import calendar
import hashlib
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from amps_emulator.protocol.saferegex import SafePattern, compile_pattern, translate_regex

from .values import NAN, first, flatten, order, to_num, to_str

__all__ = ["Function", "FUNCTIONS", "regex", "translate_regex"]


@dataclass(frozen=True, slots=True)
class Function:
    name: str
    impl: Callable
    min_args: int
    max_args: int | None  # None: any number
    kind: str = "value"  # "value": impl(*args); "context": impl(ctx)
    deterministic: bool = True


FUNCTIONS: dict[str, Function] = {}


def _register(name: str, min_args: int, max_args: int | None = -1, *, kind: str = "value",
              deterministic: bool = True):
    def deco(fn):
        FUNCTIONS[name] = Function(name, fn, min_args, min_args if max_args == -1 else max_args,
                                   kind, deterministic)
        return fn
    return deco


# ---- regular expressions (shared with LIKE): protocol.saferegex bounds their cost ----------

def regex(pattern: str) -> SafePattern:
    """Compile a PCRE-style pattern (cached); raises ``re.error`` if no engine can run it.

    Matching is byte-oriented like AMPS (not unicode-aware): ``\\d``, ``\\w``, ``\\s`` and
    ``(?i)`` cover ASCII only.  The cost of one match is bounded (see
    :mod:`protocol.saferegex`): a pathological pattern cannot stall the server.
    """
    return compile_pattern(pattern)


# ---- helpers ------------------------------------------------------------------------------

_UPPER = {c: c - 32 for c in range(ord("a"), ord("z") + 1)}
_LOWER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}


def _upper(s: str) -> str:  # AMPS string functions are not unicode-aware: ASCII only
    return s.translate(_UPPER)


def _lower(s: str) -> str:
    return s.translate(_LOWER)


def _int(v):
    """Integer view of a numeric argument (floats truncate); None for NULL or NaN."""
    n = to_num(v)
    if n is None or n != n or n in (math.inf, -math.inf):
        return None
    return int(n)


def _math1(fn):
    def call(x):
        n = to_num(x)
        if n is None:
            return None
        if n != n:
            return NAN
        try:
            return fn(n)
        except ValueError:
            return NAN
        except (OverflowError, ZeroDivisionError):
            return math.inf
    return call


# ---- string comparison and manipulation ---------------------------------------------------

@_register("INSTR", 2)
def _instr(s, sub):
    s, sub = to_str(s), to_str(sub)
    if not s or not sub:
        return None
    return s.find(sub) + 1


@_register("INSTR_I", 2)
def _instr_i(s, sub):
    s, sub = to_str(s), to_str(sub)
    if not s or not sub:
        return None
    return _lower(s).find(_lower(sub)) + 1


@_register("STREQUAL_I", 2)
def _strequal_i(a, b):
    a, b = to_str(a), to_str(b)
    if not a or not b:
        return None
    return _lower(a) == _lower(b)


@_register("LENGTH", 1)
def _length(s):
    s = to_str(s)
    return None if s is None else len(s)


@_register("CONCAT", 1, None)
def _concat(*args):
    return "".join(s for s in map(to_str, args) if s is not None)


@_register("UPPER", 1)
def _upper_fn(s):
    s = to_str(s)
    return None if s is None else _upper(s)


@_register("LOWER", 1)
def _lower_fn(s):
    s = to_str(s)
    return None if s is None else _lower(s)


@_register("REPLACE", 3)
def _replace(s, old, new):
    s, old, new = to_str(s), to_str(old), to_str(new)
    if s is None:
        return None
    if not old:
        return s
    return s.replace(old, new or "")


@_register("REGEXP_REPLACE", 3)
def _regexp_replace(s, pattern, new):
    s, pattern, new = to_str(s), to_str(pattern), to_str(new)
    if s is None or not pattern:
        return s
    try:
        rx = regex(pattern)
    except re.error:
        return None
    return rx.sub(new or "", s)


@_register("SUBSTR", 2, 3)
def _substr(s, pos, length=None):
    s = to_str(s)
    p = _int(pos)
    if s is None or p is None:
        return None
    n = len(s)
    start = p - 1 if p > 0 else (max(n + p, 0) if p < 0 else 0)
    if start >= n:
        return ""
    if length is None:
        return s[start:]
    ln = _int(length)
    if ln is None:
        return None
    if ln <= 0:
        return ""
    return s[start:start + ln]


@_register("LEFT", 2)
def _left(s, count):
    s, c = to_str(s), _int(count)
    if s is None or c is None:
        return None
    return s[:c] if c > 0 else ""


@_register("RIGHT", 2)
def _right(s, count):
    s, c = to_str(s), _int(count)
    if s is None or c is None:
        return None
    return s[-c:] if c > 0 else ""


def _trimmer(method: str):
    def trim(s, chars=" "):
        s = to_str(s)
        if s is None:
            return None
        chars = to_str(chars) if chars != " " else " "
        if not chars:
            return s
        return getattr(s, method)(chars)
    return trim


FUNCTIONS["TRIM"] = Function("TRIM", _trimmer("strip"), 1, 2)
FUNCTIONS["LTRIM"] = Function("LTRIM", _trimmer("lstrip"), 1, 2)
FUNCTIONS["RTRIM"] = Function("RTRIM", _trimmer("rstrip"), 1, 2)


@_register("REVERSE", 1)
def _reverse(s):
    s = to_str(s)
    return None if s is None else s[::-1]


# ---- date and time ------------------------------------------------------------------------

_ISO_RE = re.compile(r"(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})(\.\d+)?Z?\Z")


def _timestamp(v):
    """UNIX seconds from a number or an AMPS ISO-8601 basic timestamp string."""
    t = first(v)
    if type(t) is str:
        m = _ISO_RE.match(t)
        if m is not None:
            y, mo, d, h, mi, s, frac = m.groups()
            secs = calendar.timegm((int(y), int(mo), int(d), int(h), int(mi), int(s)))
            return secs + (float(frac) if frac else 0.0)
    n = to_num(t)
    if n is None or n != n or n in (math.inf, -math.inf):
        return None
    return n


@_register("STRFTIME", 2)
def _strftime(fmt, ts):
    fmt = to_str(fmt)
    t = _timestamp(ts)
    if not fmt or t is None:
        return None
    try:
        dt = datetime.fromtimestamp(t, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None
    out = []
    i = 0
    n = len(fmt)
    while i < n:
        ch = fmt[i]
        if ch != "%" or i + 1 >= n:
            out.append(ch)
            i += 1
            continue
        if fmt.startswith("%03f", i):
            out.append(f"{dt.microsecond // 1000:03d}")
            i += 4
            continue
        spec = fmt[i:i + 2]
        i += 2
        if spec == "%f":
            out.append(f"{dt.microsecond:06d}")
        elif spec == "%%":
            out.append("%")
        else:
            try:
                out.append(dt.strftime(spec))
            except ValueError:
                out.append(spec)
    result = "".join(out)
    return result[:128]


@_register("STRPTIME", 2)
def _strptime(text, fmt):
    text, fmt = to_str(text), to_str(fmt)
    if not text or not fmt:
        return None
    try:
        dt = datetime.strptime(text, fmt.replace("%03f", "%f"))
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


@_register("UNIX_TIMESTAMP", 0, deterministic=False)
def _unix_timestamp():
    return time.time()


# ---- array reduce -------------------------------------------------------------------------

def _array(v) -> list:
    if type(v) is list:
        return flatten(v)
    return [] if v is None else [v]


@_register("ARRAY_COUNT", 1)
def _array_count(v):
    return len(_array(v))


def _array_extreme(want: int):
    def extreme(v):
        best = None
        for x in _array(v):
            if x is None or x == "" or type(x) is dict:
                continue
            if best is None or order(x, best) == want:
                best = x
        return best
    return extreme


FUNCTIONS["ARRAY_MAX"] = Function("ARRAY_MAX", _array_extreme(1), 1, 1)
FUNCTIONS["ARRAY_MIN"] = Function("ARRAY_MIN", _array_extreme(-1), 1, 1)


@_register("ARRAY_SUM", 1)
def _array_sum(v):
    total = None
    for x in _array(v):
        n = to_num(x)
        if n is None:
            continue
        total = n if total is None else total + n
    return total


@_register("ARRAY_TO_STRING", 3)
def _array_to_string(v, delim, null_repl):
    if v is None:
        return None
    d = to_str(delim) or ""
    r = to_str(null_repl) or ""
    return d.join(r if x is None else (to_str(x) or "") for x in _array(v))


# ---- geospatial and numeric ---------------------------------------------------------------

EARTH_RADIUS_M = 6371008.8  # mean Earth radius (IUGG)


@_register("GEO_DISTANCE", 4)
def _geo_distance(lat1, lon1, lat2, lon2):
    vals = [to_num(v) for v in (lat1, lon1, lat2, lon2)]
    if any(v is None for v in vals):
        return None
    if any(v != v for v in vals):
        return NAN
    p1, l1, p2, l2 = (math.radians(v) for v in vals)
    h = math.sin((p2 - p1) / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin((l2 - l1) / 2) ** 2
    return 2 * EARTH_RADIUS_M * math.asin(min(1.0, math.sqrt(h)))


@_register("ABS", 1)
def _abs(x):
    n = to_num(x)
    return None if n is None else abs(n)


def _extreme(pick):
    def fn(*args):
        nums = [n for n in map(to_num, args) if n is not None and n == n]
        return pick(nums) if nums else NAN
    return fn


FUNCTIONS["GREATEST"] = Function("GREATEST", _extreme(max), 1, None)
FUNCTIONS["LEAST"] = Function("LEAST", _extreme(min), 1, None)


def _rounder(fn):
    def r(n):
        if type(n) is int or n in (math.inf, -math.inf):
            return n
        return float(fn(n))
    return _math1(r)


FUNCTIONS["CEILING"] = Function("CEILING", _rounder(math.ceil), 1, 1)
FUNCTIONS["FLOOR"] = Function("FLOOR", _rounder(math.floor), 1, 1)


def _log(fn):
    def f(n):
        if n == 0:
            return -math.inf
        return fn(n)
    return f


def _cot(n):
    t = math.tan(n)
    return math.inf if t == 0 else 1.0 / t


for _name, _fn in {
    "EXP": math.exp, "LN": _log(math.log), "LOG2": _log(math.log2), "LOG10": _log(math.log10),
    "SQRT": math.sqrt, "COS": math.cos, "ACOS": math.acos, "SIN": math.sin, "SINH": math.sinh,
    "ASIN": math.asin, "COSH": math.cosh, "COT": _cot, "ATAN": math.atan, "TAN": math.tan,
    "TANH": math.tanh, "RADIANS": math.radians, "DEGREES": math.degrees,
}.items():
    FUNCTIONS[_name] = Function(_name, _math1(_fn), 1, 1)


@_register("ATAN2", 2)
def _atan2(y, x):
    a, b = to_num(y), to_num(x)
    if a is None or b is None:
        return None
    return math.atan2(a, b)


@_register("POWER", 2)
def _power(base, exp):
    b, e = to_num(base), to_num(exp)
    if b is None or e is None:
        return None
    if b != b or e != e:
        return NAN
    if type(b) is int and type(e) is int and 0 <= e <= 64 and abs(b) < 2 ** 32:
        return b ** e
    try:
        r = math.pow(b, e)
    except ValueError:
        return NAN
    except OverflowError:
        return math.inf
    return r


@_register("SIGN", 1)
def _sign(x):
    n = to_num(x)
    if n is None:
        return None
    if n != n:
        return NAN
    return (n > 0) - (n < 0)


def _round_half_away(x: float, places: int) -> float:
    scale = 10.0 ** places
    y = math.floor(abs(x) * scale + 0.5) / scale
    return math.copysign(y, x)


@_register("ROUND", 1, 2)
def _round(x, places=0):
    n = to_num(x)
    p = _int(places)
    if n is None or p is None:
        return None
    if n != n or n in (math.inf, -math.inf):
        return n
    if type(n) is int:
        if p >= 0:
            return n
        if p < -40:
            return 0
        q = 10 ** (-p)
        r = (abs(n) + q // 2) // q * q
        return r if n >= 0 else -r
    if p > 320:
        return n
    if p < -320:
        return 0.0
    try:
        return _round_half_away(n, p)
    except OverflowError:
        return n


@_register("WIDTH_BUCKET", 4)
def _width_bucket(x, lo, hi, count):
    v, a, b = to_num(x), to_num(lo), to_num(hi)
    c = _int(count)
    if v is None or a is None or b is None or c is None:
        return None
    if v != v or a != a or b != b or c <= 0 or a >= b:
        return None
    if v < a:
        return 0
    if v >= b:
        return c + 1
    return int((v - a) * c / (b - a)) + 1


@_register("MD5", 1)
def _md5(s):
    s = to_str(s)
    if s is None:
        return None
    return hashlib.md5(s.encode("utf-8", "surrogatepass")).hexdigest()


# ---- CRC ----------------------------------------------------------------------------------

def _crc_table(poly: int, bits: int) -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        table.append(c)
    return table


_CRC32C_TABLE = _crc_table(0x82F63B78, 32)  # CRC-32C (Castagnoli), reflected
_CRC64_TABLE = _crc_table(0x95AC9329AC4BC9B5, 64)  # CRC-64 (Jones), reflected


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    t = _CRC32C_TABLE
    for b in data:
        crc = t[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def crc64(data: bytes) -> int:
    crc = 0
    t = _CRC64_TABLE
    for b in data:
        crc = t[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc


@_register("CRC32", 1)
def _crc32(s):
    s = to_str(s)
    return crc32c((s or "").encode("utf-8", "surrogatepass"))


@_register("CRC64", 1)
def _crc64(s):
    s = to_str(s)
    return crc64((s or "").encode("utf-8", "surrogatepass"))


# ---- COALESCE and typed values ------------------------------------------------------------

@_register("COALESCE", 1, None)
def _coalesce(*args):
    for a in args:
        v = first(a)
        if v is not None and v != "":
            return v
    return None


@_register("FALSE_VALUE", 0)
def _false_value():
    return False


@_register("TRUE_VALUE", 0)
def _true_value():
    return True


@_register("NAN_VALUE", 0)
def _nan_value():
    return NAN


@_register("CHAR_VALUE", 1)
def _char_value(code):
    c = _int(code)
    if c is None or not 0 <= c <= 255:
        return None
    return chr(c)


# ---- message, client and instance functions (read the MessageContext) ---------------------

def _ctx_attr(attr: str):
    def get(ctx):
        return None if ctx is None else getattr(ctx, attr)
    get.__name__ = f"ctx_{attr}"
    return get


def _last_updated(ctx):
    if ctx is None:
        return None
    v = ctx.last_updated
    return ctx.timestamp if v is None else v


for _name, _attr, _det in (
    ("TOPIC_NAME", "topic", True),
    ("BOOKMARK", "bookmark", True),
    ("SOW_KEY", "sow_key", True),
    ("SOW_KEY_HASH", "sow_key_hash", True),
    ("CORRELATION_ID", "correlation_id", True),
    ("MESSAGE_SIZE", "message_size", True),
    ("LAST_READ", "last_read", False),
    ("LAST_LEASED", "last_leased", True),
    ("LEASE_COUNT", "lease_count", True),
    ("CLIENT_NAME", "client_name", True),
    ("USER", "user", True),
    ("REMOTE_ADDRESS", "remote_address", True),
    ("CLIENT_VERSION", "client_version", True),
    ("AMPS_INSTANCE_NAME", "instance_name", True),
    ("AMPS_GROUP_NAME", "group_name", True),
):
    FUNCTIONS[_name] = Function(_name, _ctx_attr(_attr), 0, 0, "context", _det)
FUNCTIONS["LAST_UPDATED"] = Function("LAST_UPDATED", _last_updated, 0, 0, "context")

del _name, _fn, _attr, _det
