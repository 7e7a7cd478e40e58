"""Aggregated SOW queries: the ``grouping=[...]`` and ``projection=[...]`` query options.

An aggregated query turns the records a query matches into one record per distinct value of
the grouping fields, built from the projection -- the same records a View with that
``Projection`` / ``Grouping`` would hold. Each aggregate call in a field is cut out of the text
and replaced by a reference to a reserved field, so the rest compiles as any filter expression.
The rules (NULLs, conversions, group keys, output values) are docs/reference/aggregation.md.

Use::

    spec = parse_aggregation(cmd.opts)   # None when the query is not aggregated
    agg = spec.aggregator("orders")      # the topic name seeds the SowKeys
    agg.add(records)                     # any number of times; needs .doc, .timestamp
    out = agg.results()                  # list[Record], data already JSON-encoded
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import msgspec

from amps_emulator.protocol.filter import FilterError, MessageContext, compile_expression
from amps_emulator.protocol.filter.construct import AS_WORD, mask, output_value, paren_depths, set_field
from amps_emulator.protocol.filter.values import first, order, parse_number, resolve, to_num
from amps_emulator.protocol.msgtypes import CodecError
from amps_emulator.protocol.reasons import INVALID_OPTIONS, CommandError
from amps_emulator.sow.keys import generate_sow_key
from amps_emulator.sow.paths import PathError, parse_path
from amps_emulator.sow.record import Record

__all__ = [
    "AGGREGATE_FUNCTIONS", "Aggregation", "Aggregator", "ProjectedField", "parse_aggregation",
    "SCALE", "clamp_sum", "distinct_key", "exact_total", "parse_grouping", "parse_projection",
    "scalar", "scaled", "stddev_of",
]

_encode = msgspec.json.encode

#: reserved field names the aggregate results are bound to in a field's outer expression
_SLOT = "\x00agg{}"


# ---- aggregate functions (lists of raw argument values -> result) ---------------------------

def scalar(v: Any) -> Any:
    """The value an aggregate reads of one record's argument value ``v``: a scalar (an array
    as its first element), ``None`` when it is NULL (missing, ``''``, an object)."""
    t = type(v)
    if t is int or t is float or t is bool:
        return v
    if t is str:
        return v if v else None
    if t is list:
        f = first(v)
        tf = type(f)
        if tf is int or tf is float or tf is bool or (tf is str and f):
            return f
    return None


def _scalars(vals: list) -> list:
    """The non-NULL scalar values among ``vals`` (arrays as their first element)."""
    out: list = []
    add = out.append
    for v in vals:
        t = type(v)
        if t is int or t is float or t is bool:
            add(v)
        elif t is str:
            if v:
                add(v)
        elif t is list:
            f = first(v)
            tf = type(f)
            if tf is int or tf is float or tf is bool or (tf is str and f):
                add(f)
    return out


def _numbers(vals: list) -> list:
    out: list = []
    add = out.append
    for v in _scalars(vals):
        t = type(v)
        add(v if t is int or t is float else to_num(v))
    return out


_INT_LIMIT = 1 << 64  # as protocol.filter.values: beyond it an integer is carried as a double
_FSUM_EXACT = 1 << 53  # an integer below it is a double exactly


def exact_total(nums: list) -> Any:
    """The sum of ``nums`` (ints and floats): an int when all are ints, else the exact sum
    rounded once to a double (so it depends on the values only, never on their order);
    NaN when a NaN is there or both infinities are, +-inf when it overflows."""
    ints = 0
    floats = []
    for x in nums:
        if type(x) is int:
            ints += x
        else:
            floats.append(x)
    if not floats:
        return ints
    if -_FSUM_EXACT < ints < _FSUM_EXACT:
        if ints:
            floats.append(float(ints))
        try:
            return math.fsum(floats)  # correctly rounded
        except ValueError:  # inf + -inf
            return math.nan
        except OverflowError:  # an intermediate sum beyond a double: exactly, below
            if ints:
                floats.pop()
    if any(x != x for x in floats) or (math.inf in floats and -math.inf in floats):
        return math.nan
    if math.inf in floats or -math.inf in floats:
        return math.inf if math.inf in floats else -math.inf
    total = sum(map(Fraction, floats), Fraction(ints))
    try:
        return float(total)
    except OverflowError:
        return math.inf if total > 0 else -math.inf


def clamp_sum(s: Any) -> Any:
    """A SUM's value as AMPS carries it: an integer beyond 64 bits as a double."""
    if type(s) is int and not -_INT_LIMIT < s < _INT_LIMIT:
        try:
            return float(s)
        except OverflowError:
            return math.inf if s > 0 else -math.inf
    return s


def _sum(vals: list) -> Any:
    nums = _numbers(vals)
    if not nums:
        return None
    return clamp_sum(exact_total(nums))


def _avg(vals: list) -> Any:
    nums = _numbers(vals)
    if not nums:
        return None
    try:
        return exact_total(nums) / len(nums)
    except OverflowError:  # an integer sum beyond a double's range
        return math.nan


#: floats times 2**SCALE are integers: exact sums of floats (and of their squares) as ints
SCALE = 1074


def scaled(x: float) -> int:
    """The finite double ``x`` times ``2**SCALE``, exactly, as an int."""
    n, d = x.as_integer_ratio()
    return n << (SCALE + 1 - d.bit_length())


def stddev_of(n: int, s1: int, s2: int, sample: bool) -> Any:
    """The standard deviation of ``n`` doubles whose :func:`scaled` values sum to ``s1`` and
    their squares to ``s2``: the exact variance, rounded once, then its square root."""
    if n == 0 or (sample and n == 1):
        return None
    num = n * s2 - s1 * s1
    if num <= 0:
        return 0.0
    try:
        return math.sqrt(num / (n * (n - 1 if sample else n) << (2 * SCALE)))
    except OverflowError:  # a variance beyond a double
        return math.nan


def _stddev(sample: bool) -> Callable[[list], Any]:
    def stddev(vals: list) -> Any:
        nums = _numbers(vals)
        n = len(nums)
        if n == 0 or (sample and n == 1):
            return None
        s1 = s2 = 0
        try:
            for x in nums:
                x = float(x)
                if not math.isfinite(x):
                    return math.nan
                sx = scaled(x)
                s1 += sx
                s2 += sx * sx
        except OverflowError:  # an integer beyond a double
            return math.nan
        return stddev_of(n, s1, s2, sample)
    return stddev


def _count(vals: list) -> int:
    return len(_scalars(vals))


_NAN_KEY = ("NaN",)


def distinct_key(v: Any) -> Any:
    """What COUNT_DISTINCT tells scalars apart by (a numeric string as its number)."""
    t = type(v)
    if t is str:
        n = parse_number(v)
        v = v if n is None else n
        t = type(v)
    elif t is bool:
        return int(v)
    if t is float and v != v:
        return _NAN_KEY
    return v


def _count_distinct(vals: list) -> int:
    return len({distinct_key(v) for v in _scalars(vals)})


def _extreme(sign: int) -> Callable[[list], Any]:
    builtin = min if sign < 0 else max

    def extreme(vals: list) -> Any:
        xs = [v for v in _scalars(vals) if v == v]  # NaN is skipped
        if not xs:
            return None
        if all(type(v) is int or type(v) is float for v in xs):
            return builtin(xs)
        best = xs[0]
        for v in xs:
            if order(v, best) == sign:
                best = v
        return best
    return extreme


#: name -> implementation over the list of the argument's values in a group
AGGREGATE_FUNCTIONS: dict[str, Callable[[list], Any]] = {
    "AVG": _avg,
    "COUNT": _count,
    "COUNT_DISTINCT": _count_distinct,
    "MAX": _extreme(1),
    "MIN": _extreme(-1),
    "STDDEV_POP": _stddev(False),
    "STDDEV_SAMP": _stddev(True),
    "SUM": _sum,
}


# ---- parsing ---------------------------------------------------------------------------------

def _bad(detail: str) -> CommandError:
    return CommandError(INVALID_OPTIONS, detail)


def _mask(text: str) -> str:
    """``text`` with string literals and ``[...]`` paths blanked (:func:`construct.mask`)."""
    try:
        return mask(text)
    except FilterError as exc:
        raise _bad(exc.detail) from None


def _split_list(text: str, what: str) -> list[str]:
    """The items of a ``[a, b, ...]`` option value (brackets optional), split at the commas
    that are outside parentheses, strings and bracket paths."""
    t = text.strip()
    if t.startswith("[") and t.endswith("]"):
        t = t[1:-1]  # the option's own brackets
    masked = _mask(t)
    items, depth, start = [], 0, 0
    for i, ch in enumerate(masked):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise _bad(f"unbalanced ) in {what} {text!r}")
        elif ch == "," and depth == 0:
            items.append(t[start:i])
            start = i + 1
    if depth:
        raise _bad(f"unbalanced ( in {what} {text!r}")
    items.append(t[start:])
    items = [i.strip() for i in items]
    if any(not i for i in items):
        raise _bad(f"empty entry in {what} {text!r}")
    return items


def parse_grouping(text: Any) -> tuple[tuple[str | int, ...], ...]:
    """``grouping=[/a, /b]`` -> the paths; ``CommandError(invalid options)`` if bad."""
    if not isinstance(text, str) or not text.strip():
        raise _bad("grouping needs a list of fields: grouping=[/field,...]")
    paths = []
    for item in _split_list(text, "grouping"):
        try:
            path = parse_path(item)
        except PathError:
            raise _bad(f"grouping entry {item!r} is not a field identifier") from None
        if not path:
            raise _bad("cannot group by the whole message")
        paths.append(path)
    return tuple(paths)


_CALL = re.compile(r"(?<![\w#])([A-Za-z_]\w*)\s*\(")


@dataclass(frozen=True)
class ProjectedField:
    """One projection entry.  ``aggs``: indexes into :attr:`Aggregation.aggs` of the aggregate
    calls in it, in slot order.  ``expr``: the compiled expression outside the aggregates
    (``None`` when the field is exactly one aggregate call)."""
    text: str
    target: tuple[str, ...]
    aggs: tuple[int, ...]
    expr: Any


def _target(text: str, entry: str) -> tuple[str, ...]:
    try:
        path = parse_path(text)
    except PathError:
        raise _bad(f"projection target {text!r} in {entry!r} is not a field identifier") \
            from None
    if not path:
        raise _bad(f"projection target in {entry!r} names the whole message")
    if any(type(s) is int for s in path):
        raise _bad(f"projection target {text!r} has an array index")
    return path  # type: ignore[return-value]


def _compile(text: str, entry: str) -> Any:
    try:
        return compile_expression(text)
    except FilterError as e:
        raise _bad(f"projection entry {entry!r}: {e}") from None


def parse_projection(text: Any):
    """``projection=[...]`` -> ``(fields, aggs, args)``: the :class:`ProjectedField` list, the
    distinct aggregate calls as ``(function name, argument index)`` and the distinct compiled
    arguments.  ``CommandError(invalid options)`` if bad."""
    if not isinstance(text, str) or not text.strip():
        raise _bad("projection needs a list of fields: projection=[expression AS /field,...]")
    fields: list[ProjectedField] = []
    aggs: list[tuple[str, int]] = []
    args: list[Any] = []
    arg_index: dict[Any, int] = {}
    for entry in _split_list(text, "projection"):
        masked = _mask(entry)
        depth_at = paren_depths(masked)
        cuts = [m for m in AS_WORD.finditer(masked) if depth_at[m.start()] == 0]
        if len(cuts) > 1:
            raise _bad(f"projection entry {entry!r} has more than one AS")
        if cuts:
            m = cuts[0]
            source, smask = entry[:m.start()].rstrip(), masked[:m.start()].rstrip()
            target = _target(entry[m.end():], entry)
            if not source:
                raise _bad(f"projection entry {entry!r} has nothing before AS")
        else:
            source, smask = entry, masked
            try:
                target = _target(entry, entry)
            except CommandError:
                raise _bad(f"projection entry {entry!r} needs AS /target") from None
        # cut the aggregate calls out of the source, last one first
        calls = []
        for m in _CALL.finditer(smask):
            if m.group(1).upper() in AGGREGATE_FUNCTIONS:
                close = _close(smask, m.end() - 1)
                if close < 0:
                    raise _bad(f"unbalanced ( in projection entry {entry!r}")
                calls.append((m.start(), m.end(), close, m.group(1).upper()))
        for i, (s, _, e, _) in enumerate(calls):
            if any(s < s2 < e for s2, _, _, _ in calls[i + 1:]):
                raise _bad(f"projection entry {entry!r}: aggregates cannot be nested")
        slots: list[int] = []
        rewritten = source
        for n, (s, open_end, e, name) in enumerate(reversed(calls)):
            arg = source[open_end:e].strip()
            if not arg:
                raise _bad(f"projection entry {entry!r}: {name} needs an argument")
            amask = smask[open_end:e]
            if any(ch == "," and d == 0 for ch, d in zip(amask, paren_depths(amask), strict=False)):
                raise _bad(f"projection entry {entry!r}: {name} takes one argument")
            fn = _compile(arg, entry)
            if not fn.deterministic:
                raise _bad(f"projection entry {entry!r}: a non-deterministic function "
                           f"cannot be aggregated")
            ai = arg_index.get(fn.ast)
            if ai is None:
                ai = arg_index[fn.ast] = len(args)
                args.append(fn)
            try:
                gi = aggs.index((name, ai))
            except ValueError:
                gi = len(aggs)
                aggs.append((name, ai))
            slot = len(calls) - 1 - n
            rewritten = rewritten[:s] + f"[/{_SLOT.format(slot)}]" + rewritten[e + 1:]
            slots.append(gi)
        slots.reverse()
        whole_call = len(calls) == 1 and calls[0][0] == 0 and calls[0][2] == len(source) - 1
        expr = None if whole_call else _compile(rewritten, entry)
        fields.append(ProjectedField(entry, target, tuple(slots), expr))
    targets = sorted(f.target for f in fields)
    for a, b in zip(targets, targets[1:], strict=False):
        if b[:len(a)] == a:
            raise _bad(f"projection targets {'/' + '/'.join(a)} and {'/' + '/'.join(b)} "
                       f"overlap")
    return fields, aggs, args


def _close(masked: str, open_at: int) -> int:
    """Index of the parenthesis closing the one at ``open_at`` (-1 if none)."""
    d = 0
    for i in range(open_at, len(masked)):
        ch = masked[i]
        if ch == "(":
            d += 1
        elif ch == ")":
            d -= 1
            if d == 0:
                return i
    return -1


def parse_aggregation(opts: Mapping[str, Any]) -> Aggregation | None:
    """The aggregation a command's options (``cmd.opts``) ask for, ``None`` if they ask for
    none.  ``CommandError(invalid options)`` if the options are bad or only one is given."""
    grouping, projection = opts.get("grouping"), opts.get("projection")
    if grouping is None and projection is None:
        return None
    if grouping is None:
        raise _bad("projection without grouping")
    if projection is None:
        raise _bad("grouping without projection")
    paths = parse_grouping(grouping)
    fields, aggs, args = parse_projection(projection)
    return Aggregation(paths, tuple(fields), tuple(aggs), tuple(args))


# ---- evaluation ------------------------------------------------------------------------------

_BOOL_KEYS = {True: ("bool", True), False: ("bool", False)}


def _group_value(v: Any) -> Any:
    """A grouping value as a dict key (see "Groups" in the module docstring)."""
    t = type(v)
    if t is str or t is int:
        return v
    if t is float:
        return v if v == v else _NAN_KEY
    if t is bool:
        return _BOOL_KEYS[v]
    if t is list:
        return _group_value(first(v))
    return None


def _key_text(k: Any) -> str:
    """Type-tagged text of one grouping value, for the group's SowKey."""
    t = type(k)
    if k is None:
        return "n:"
    if t is str:
        return "s:" + k
    if t is tuple:
        return "b:true" if k == ("bool", True) else "b:false" if k[0] == "bool" else "f:NaN"
    if t is float and k.is_integer() and abs(k) < 2 ** 63:
        k = int(k)
    return "d:" + repr(k)


def _keyer(paths: tuple[tuple[str | int, ...], ...]) -> Callable[[Any], Any]:
    gv = _group_value
    if len(paths) == 1:
        path = paths[0]
        if len(path) == 1 and type(path[0]) is str:
            name = path[0]

            def key1(doc: Any) -> Any:
                if type(doc) is dict:
                    v = doc.get(name)
                    t = type(v)
                    return v if t is str or t is int else gv(v)
                return gv(resolve(doc, path)) if type(doc) is list else None
            return key1

        def key_path(doc: Any) -> Any:
            return gv(resolve(doc, path)) if type(doc) in (dict, list) else None
        return key_path

    if all(len(p) == 1 and type(p[0]) is str for p in paths):
        names = [p[0] for p in paths]

        def key_top(doc: Any) -> Any:
            if type(doc) is dict:
                return tuple([v if type(v) is str or type(v) is int else gv(v)
                              for v in map(doc.get, names)])
            if type(doc) is list:
                return tuple(gv(resolve(doc, p)) for p in paths)
            return (None,) * len(paths)
        return key_top

    def key_n(doc: Any) -> Any:
        if type(doc) not in (dict, list):
            return (None,) * len(paths)
        return tuple(gv(resolve(doc, p)) for p in paths)
    return key_n


@dataclass(frozen=True)
class Aggregation:
    """A parsed aggregation: grouping paths, projected fields, the distinct aggregate calls
    ``(name, argument index)`` and the distinct compiled arguments."""
    grouping: tuple[tuple[str | int, ...], ...]
    fields: tuple[ProjectedField, ...]
    aggs: tuple[tuple[str, int], ...]
    args: tuple[Any, ...]

    def aggregator(self, domain: str, encode: Callable[[Any], bytes] = _encode) -> Aggregator:
        """A fresh accumulator; ``domain`` (the topic name) seeds the groups' SowKeys;
        ``encode`` writes the aggregated records (the output message type's codec; JSON)."""
        return Aggregator(self, domain, encode)

    def aggregate(self, records: Iterable[Any], domain: str,
                  encode: Callable[[Any], bytes] = _encode) -> list[Record]:
        """All in one go: the aggregated records for ``records``."""
        agg = self.aggregator(domain, encode)
        agg.add(records)
        return agg.results()


class Aggregator:
    """Accumulates records into groups (:meth:`add`, any number of times), then builds one
    :class:`~sow.record.Record` per group (:meth:`results`)."""

    __slots__ = ("spec", "domain", "groups", "_key", "_ctx", "_write")

    def __init__(self, spec: Aggregation, domain: str,
                 encode: Callable[[Any], bytes] = _encode) -> None:
        self.spec = spec
        self.domain = domain
        self._write = encode
        # group key -> [last record, latest timestamp, values of argument 0, 1, ...]
        self.groups: dict[Any, list] = {}
        self._key = _keyer(spec.grouping)
        # functions like TOPIC_NAME() / SOW_KEY() read a per-record context, built only if used
        uses = any(fn.uses_context for fn in spec.args) or any(
            f.expr is not None and f.expr.uses_context for f in spec.fields)
        self._ctx: Callable[[Any], MessageContext] | None = self._context if uses else None

    def add(self, records: Iterable[Any]) -> None:
        groups = self.groups
        get = groups.get
        keyof = self._key
        ctx_of = self._ctx
        slots = list(enumerate(self.spec.args, 2))  # (place in the group's list, argument)
        for rec in records:
            doc = rec.doc
            k = keyof(doc)
            g = get(k)
            if g is None:
                g = groups[k] = [rec, rec.timestamp, *([] for _ in slots)]
            else:
                g[0] = rec
                if rec.timestamp > g[1]:
                    g[1] = rec.timestamp
            if ctx_of is None:
                for i, arg in slots:
                    g[i].append(arg(doc))
            else:
                ctx = ctx_of(rec)
                for i, arg in slots:
                    g[i].append(arg(doc, ctx))

    def _context(self, rec: Any) -> MessageContext:
        return MessageContext(topic=self.domain, bookmark=getattr(rec, "bookmark", None) or None,
                              sow_key=getattr(rec, "sow_key", None) or None,
                              timestamp=getattr(rec, "timestamp", None))

    def arg_values(self, rec: Any) -> list:
        """The aggregates' argument values for the record ``rec`` (one per argument)."""
        doc = rec.doc
        if self._ctx is None:
            return [arg(doc) for arg in self.spec.args]
        ctx = self._ctx(rec)
        return [arg(doc, ctx) for arg in self.spec.args]

    def results(self) -> list[Record]:
        spec = self.spec
        fns = [AGGREGATE_FUNCTIONS[name] for name, _ in spec.aggs]
        arg_of = [ai for _, ai in spec.aggs]
        return [self.record_for(key, [fn(g[ai + 2]) for fn, ai in zip(fns, arg_of, strict=False)],
                                g[0], g[1])
                for key, g in self.groups.items()]

    def record_for(self, key: Any, values: list, last_rec: Any, timestamp: float,
                   sow_key: str | None = None) -> Record:
        """The aggregated record of group ``key``: ``values`` of the aggregates
        (:attr:`Aggregation.aggs` order), the other fields read of ``last_rec`` (the group's
        last record in the topic's order), ``timestamp`` (its latest); ``sow_key``: the
        group's SowKey when known (:meth:`sow_key_of`)."""
        spec = self.spec
        last = last_rec.doc
        ctx = self._ctx(last_rec) if self._ctx is not None else None
        body: dict[str, Any] = {}
        for f in spec.fields:
            if f.expr is None:
                v = values[f.aggs[0]]
            elif not f.aggs:
                v = f.expr(last, ctx)
            else:
                env = dict(last) if type(last) is dict else {}
                for slot, gi in enumerate(f.aggs):
                    env[_SLOT.format(slot)] = values[gi]
                v = f.expr(env, ctx)
            set_field(body, f.target, output_value(v))
        if sow_key is None:
            sow_key = self.sow_key_of(key)
        try:
            data = self._write(body)
        except CodecError as exc:  # e.g. a FIX body cannot have a tag named TotalCost
            raise _bad(f"the projection cannot be written in the output message type: "
                       f"{exc}") from None
        return Record(sow_key, data, "", timestamp, doc=body)

    def sow_key_of(self, key: Any) -> str:
        """The SowKey of group ``key``."""
        keys = key if len(self.spec.grouping) > 1 else (key,)
        return generate_sow_key(self.domain, [_key_text(k) for k in keys])
