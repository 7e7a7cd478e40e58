"""A long filter compiles as several small Python functions, each its own ``compile()`` call.

CPython's ``compile()`` holds the interpreter lock for the whole call, about 0.4 us a byte of
source. The generated source of a filter of 10,000 clauses is nearly 2 MB: compiled in one
call, it stopped every other thread for most of a second, the server's event loop included,
even though the server compiles long filters in a worker thread. So an AND or OR whose terms
weigh more than :data:`SPLIT_WEIGHT` is generated as calls of part functions, each holding a
run of its terms (:meth:`~protocol.filter.compiler.Gen.part`), and :func:`exec_pieces`
compiles the source in pieces of at most about :data:`PIECE_BYTES`: between two pieces the
other threads run.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from . import ast as A

__all__ = ["SPLIT_WEIGHT", "PIECE_BYTES", "weight", "heavier", "runs", "exec_pieces"]

#: an AND/OR heavier than this (about 50 comparisons) is generated as part functions
SPLIT_WEIGHT = 256
#: source bytes compiled in one call (a few milliseconds of ``compile()``)
PIECE_BYTES = 12_000

_LISTS = (A.In, A.BeginsWith, A.EndsWith)


def weight(node: A.Expr, memo: dict[int, int]) -> int:
    """How much code ``node`` generates, in nodes (a literal list counts as one: it becomes
    one constant). ``memo``: by ``id(node)`` (every node asked about must outlive it)."""
    key = id(node)
    w = memo.get(key)
    if w is None:
        if isinstance(node, _LISTS) and all(isinstance(i, A.Literal) for i in node.items):
            w = 1 + weight(node.operand, memo)
        else:
            w = 1 + sum(weight(c, memo) for c in A.children(node))
        memo[key] = w
    return w


def heavier(node: A.Expr, limit: int) -> bool:
    """Whether ``node`` weighs more than ``limit`` (:func:`weight`), looking at no more than
    about ``limit`` of its nodes (a filter of a hundred thousand terms is answered at once)."""
    count = 0
    stack = [node]
    while stack:
        n = stack.pop()
        count += 1
        if count > limit:
            return True
        if isinstance(n, _LISTS) and all(isinstance(i, A.Literal) for i in n.items):
            stack.append(n.operand)
        else:
            stack.extend(A.children(n))
    return False


def runs(terms: tuple[A.Expr, ...], memo: dict[int, int]) -> Iterator[tuple[A.Expr, ...]]:
    """``terms`` as consecutive runs of at most about :data:`SPLIT_WEIGHT` (a heavier term
    is a run of its own)."""
    run: list[A.Expr] = []
    total = 0
    for t in terms:
        w = weight(t, memo)
        if run and total + w > SPLIT_WEIGHT:  # (read here: the tests lower it)
            yield tuple(run)
            run, total = [], 0
        run.append(t)
        total += w
    if run:
        yield tuple(run)


def exec_pieces(sources: list[str], ns: dict[str, Any], filename: str) -> None:
    """Compile and run top-level ``sources`` (each a whole statement, e.g. a ``def``) into
    ``ns``, in calls of at most about :data:`PIECE_BYTES` of source."""
    batch: list[str] = []
    size = 0
    for src in sources:
        if batch and size + len(src) > PIECE_BYTES:
            exec(compile("\n".join(batch) + "\n", filename, "exec"), ns)  # noqa: S102 - generated
            batch, size = [], 0
        batch.append(src)
        size += len(src) + 1
    if batch:
        exec(compile("\n".join(batch) + "\n", filename, "exec"), ns)  # noqa: S102 - generated
