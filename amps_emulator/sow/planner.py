"""Query planner: which index (if any) narrows a SOW query or delete.

Order of preference (User Guide, "SOW Indexing"):

1. ``sow_keys`` given: exactly those records.
2. A **hash index** whose every field has an equality (``=`` with a literal, or ``IN`` of
   literals) among the filter's top-level ``AND`` terms.  The index with most fields wins.
   (AMPS requires the filter to use exactly the index's fields; extra terms are harmless
   here because the filter is re-evaluated on every candidate.)
3. A **memo index** on a field with an indexable term: ``=``, ``IN``, ``BETWEEN``,
   ``BEGINS WITH``, ``LIKE`` (anchored literal prefix best), ``< <= > >=`` -- in that order
   of preference.  If no memo index exists for any such field, one is created for the best
   term's field (AMPS creates memo indexes during the query) unless auto-creation is off.
4. A top-level ``OR`` whose every branch can use an index: the union of the branches.
5. Otherwise a **scan** of the topic.

An index only narrows: the compiled filter runs on every candidate (see :mod:`sow.index` for
why candidates are always a superset), so every path returns exactly the scan's result.  When
an index would yield more than half the topic the executor falls back to a scan (sequential
reads beat random ones).  The choice is logged at DEBUG on the ``sow.planner`` logger and
returned as ``QueryResult.plan``.

``force``: ``"auto"`` (default), ``"scan"`` (no index), ``"hash"`` (hash indexes only),
``"memo"`` (memo indexes only) -- for tests and diagnostics.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from amps_emulator.protocol.filter import ast as A
from amps_emulator.protocol.filter.functions import regex
from amps_emulator.protocol.filter.values import to_str
from amps_emulator.sow.index import HashIndex, MemoIndex, like_prefix, ranges_for_between, ranges_for_compare

__all__ = ["Plan", "plan_query", "log"]

log = logging.getLogger("amps_emulator.sow.planner")

_FLIP = {"=": "=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}

# preference ranks of memo-indexable terms (lower is better)
_EQ, _IN, _BETWEEN, _PREFIX, _RANGE, _REGEX = range(6)


@dataclass
class Plan:
    kind: str  # "keys" | "hash" | "memo" | "union" | "scan"
    index: Any = None
    args: Any = None
    parts: list = field(default_factory=list)
    create: tuple | None = None  # memo: path of the index to create first

    def describe(self) -> str:
        if self.kind == "keys":
            return f"sow_keys({len(self.args)})"
        if self.kind == "hash":
            return self.index.name
        if self.kind == "memo":
            name = self.index.name if self.index is not None else f"memo[{_ptext(self.create)}]"
            return name + (" (created)" if self.create is not None else "")
        if self.kind == "union":
            return "union(" + ", ".join(p.describe() for p in self.parts) + ")"
        return "scan"


def _ptext(path) -> str:
    return "".join(f"[{s}]" if type(s) is int else "/" + s for s in path or ())


def _literals(items: Sequence[A.Expr]) -> list[A.Literal] | None:
    """``items`` if every one is a literal, else None."""
    lits = [i for i in items if isinstance(i, A.Literal)]
    return lits if len(lits) == len(items) else None


def _ident_lit(n: A.Compare) -> tuple[tuple, str, Any] | None:
    """``Compare(Identifier op Literal)`` (either side) -> (path, op, value)."""
    if isinstance(n.left, A.Identifier) and isinstance(n.right, A.Literal):
        return n.left.path, n.op, n.right.value
    if isinstance(n.right, A.Identifier) and isinstance(n.left, A.Literal):
        op = _FLIP.get(n.op)
        if op is None:
            return None
        return n.right.path, op, n.left.value
    return None


def _analyze(term, eqs: dict, memos: list) -> None:
    """Record what ``term`` (one AND conjunct) offers to indexes."""
    if isinstance(term, A.Compare):
        t = _ident_lit(term)
        if t is None:
            return
        path, op, v = t
        if op == "=":
            eqs.setdefault(path, [v])
        iv = ranges_for_compare(op, v)
        if iv is not None:
            memos.append((_EQ if op == "=" else _RANGE, path, iv))
    elif isinstance(term, A.In):
        if term.negated or not isinstance(term.operand, A.Identifier):
            return
        lits = _literals(term.items)
        if lits is None:
            return
        vals = [i.value for i in lits]
        eqs.setdefault(term.operand.path, vals)
        in_iv: list = []
        for v in vals:
            r = ranges_for_compare("=", v)
            if r is None:
                return
            in_iv.extend(r)
        memos.append((_IN, term.operand.path, in_iv))
    elif isinstance(term, A.Between):
        if term.negated or not isinstance(term.operand, A.Identifier):
            return
        low, high = term.low, term.high
        if not (isinstance(low, A.Literal) and isinstance(high, A.Literal)):
            return
        iv = ranges_for_between(low.value, high.value)
        if iv is not None:
            memos.append((_BETWEEN, term.operand.path, iv))
    elif isinstance(term, A.Like):
        if term.negated or not isinstance(term.operand, A.Identifier):
            return
        try:
            rx = regex(term.pattern)
        except Exception:
            return
        pre = like_prefix(term.pattern)
        memos.append((_PREFIX if pre else _REGEX, term.operand.path, [("R", rx, pre)]))
    elif isinstance(term, A.BeginsWith):
        if term.negated or not isinstance(term.operand, A.Identifier):
            return
        lits = _literals(term.items)
        if lits is None:
            return
        prefixes = []
        for i in lits:
            s = to_str(i.value)  # what BEGINS WITH / LIKE compare against
            if s:  # NULL / '' prefixes never match
                prefixes.append(("P", s))
        memos.append((_PREFIX, term.operand.path, prefixes))


def _plan_conjunction(terms, hashes: list[HashIndex], memos_by_path: dict, force: str,
                      auto_memo: bool) -> Plan:
    eqs: dict = {}
    memos: list = []
    for t in terms:
        _analyze(t, eqs, memos)
    if force in ("auto", "hash"):
        best = None
        for hx in hashes:
            if all(p in eqs for p in hx.paths):
                if best is None or len(hx.paths) > len(best.paths):
                    best = hx
        if best is not None:
            return Plan("hash", best, [eqs[p] for p in best.paths])
    if force in ("auto", "memo") and memos:
        have = [m for m in memos if m[1] in memos_by_path]
        if have:
            rank, path, iv = min(have, key=lambda m: m[0])
            return Plan("memo", memos_by_path[path], iv)
        if auto_memo or force == "memo":
            rank, path, iv = min(memos, key=lambda m: m[0])
            return Plan("memo", None, iv, create=path)
    return Plan("scan")


def plan_query(ast_node, sow_keys: list[str] | None, hashes: list[HashIndex],
               memos_by_path: dict[tuple, MemoIndex], *, force: str = "auto",
               auto_memo: bool = True) -> Plan:
    if sow_keys is not None:
        return Plan("keys", args=sow_keys)
    if ast_node is None or force == "scan":
        return Plan("scan")
    if isinstance(ast_node, A.Or):
        parts = [_plan_conjunction(t.terms if isinstance(t, A.And) else (t,), hashes,
                                   memos_by_path, force, auto_memo) for t in ast_node.terms]
        if all(p.kind != "scan" for p in parts):
            return Plan("union", parts=parts)
        return Plan("scan")
    terms = ast_node.terms if isinstance(ast_node, A.And) else (ast_node,)
    return _plan_conjunction(terms, hashes, memos_by_path, force, auto_memo)
