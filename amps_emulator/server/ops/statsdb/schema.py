"""The layout of the statistics database: which node of the ``/amps`` tree goes to which
table, which of its fields are fixed, and how a sample becomes rows and rows a sample again.

Each monitored node has two tables, named as AMPS names them: ``<BASE>_STATIC`` holds one
row per distinct identity of an object (``static_id``, ``oid``: the entry's id in the tree,
and the fields the Monitoring Reference calls *fixed*), ``<BASE>_DYNAMIC`` one row per object
per sample (``timestamp``, ``static_id`` and every other field). The columns are the fields'
names in the tree; a field that appears later (a new kind of entry) adds a column.

A timestamp is AMPS's: milliseconds since the Julian-day epoch the ``amps-sqlite3`` tools
convert from (``timestamp / 1000 - 210866803200`` is Unix time). Figures are stored as
numbers (integers, or reals for the rates) so that SQL compares them as numbers; what does
not read back as written (``"0.0"``, ``""``, a name) is stored as text.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["TABLES", "Table", "from_amps_time", "from_sql", "rows_of", "to_amps_time",
           "to_sql", "tree_of"]

#: seconds from the epoch of AMPS's statistics timestamps to the Unix epoch
EPOCH_OFFSET = 210_866_803_200

_INT = re.compile(r"-?(0|[1-9]\d*)")


@dataclass(frozen=True)
class Table:
    """One monitored node: ``base`` of its two tables' names, its ``path`` in the ``/amps``
    tree, whether it is a collection (entries with an ``id``) or one object, and its fixed
    fields (to the STATIC table; every other scalar field goes to the DYNAMIC one)."""

    base: str
    path: tuple[str, ...]
    collection: bool
    fixed: frozenset[str] = frozenset()

    @property
    def static(self) -> str:
        return f"{self.base}_STATIC"

    @property
    def dynamic(self) -> str:
        return f"{self.base}_DYNAMIC"


def _t(base: str, path: str, collection: bool, fixed: str = "") -> Table:
    return Table(base, tuple(path.split("/")), collection, frozenset(fixed.split()))


#: the nodes the emulator reports, and their tables
TABLES: tuple[Table, ...] = (
    _t("HCPUS", "host/cpus", True),
    _t("HMEMORY", "host/memory", False, "total swap_total"),
    _t("HDISKS", "host/disks", True, "mount_point"),
    _t("HNET", "host/network", True),
    _t("ICLIENTS", "instance/clients", True,
       "authenticated_id client_name client_name_hash client_version connect_time "
       "connection_name correlation_id remote_address"),
    _t("IPROCESSORS", "instance/processors", True, "description"),
    _t("ISOW", "instance/sow", True,
       "topic message_type path device record_size slab_size historical_granularity "
       "historical_window"),
    _t("IVIEWS", "instance/views", True,
       "topic message_type underlying_topic conflation grouping projection"),
    _t("IQUEUES", "instance/queues", True,
       "topic message_type max_backlog target_queue_depth proxied_transfer"),
    _t("ISUBSCRIPTIONS", "instance/subscriptions", True,
       "client_id sub_id topic message_type filter options bookmark entitlement_filter "
       "pagination_id"),
    _t("ITRANSPORTS", "instance/transports", True, "name type message_type options inet_addr uri"),
    _t("IREPLICATIONS", "instance/replication", True,
       "name destination_name client_name client_type authenticated_id "
       "destination_admin_addr destination_group_name pass_through"),
    _t("ISTATISTICS", "instance/statistics", False, "file_name interval"),
)


def to_amps_time(us: int) -> int:
    """Microseconds since the Unix epoch as a statistics timestamp (whole milliseconds)."""
    return us // 1000 + EPOCH_OFFSET * 1000


def from_amps_time(ts: int) -> int:
    """A statistics timestamp as microseconds since the Unix epoch."""
    return (ts - EPOCH_OFFSET * 1000) * 1000


def to_sql(value: str) -> int | float | str:
    """A figure as the tree writes it, as stored: a number when it reads back the same."""
    if _INT.fullmatch(value):
        return int(value)
    try:
        f = float(value)
    except ValueError:
        return value
    return f if f"{f:.6f}" == value else value


def from_sql(value: Any) -> str:
    """A stored figure as the tree writes it (see :func:`to_sql`)."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6f}"
    return str(value)


def _node(tree: dict[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = tree.get("amps", {})
    for seg in path:
        if not isinstance(node, dict):
            return None
        node = node.get(seg)
    return node


def rows_of(tree: dict[str, Any], table: Table
            ) -> Iterator[tuple[str, dict[str, str], dict[str, int | float | str]]]:
    """The objects of ``table`` in the ``/amps`` ``tree``: ``(oid, fixed fields, figures)``
    (fixed fields as text, figures as stored); fields that are not scalars are left out."""
    node = _node(tree, table.path)
    if table.collection:
        entries = [(str(e.get("id", "")), e) for e in node or () if isinstance(e, dict)]
    else:
        entries = [(table.path[-1], node)] if isinstance(node, dict) and node else []
    for oid, entry in entries:
        fixed: dict[str, str] = {}
        figures: dict[str, int | float | str] = {}
        for k, v in entry.items():
            if k == "id" or isinstance(v, (dict, list)):
                continue
            if k in table.fixed:
                fixed[k] = str(v)
            else:
                figures[k] = to_sql(str(v))
        yield oid, fixed, figures


def tree_of(rows: dict[Table, list[dict[str, Any]]]) -> dict[str, Any]:
    """A sample's ``/amps`` tree again from its rows (each a STATIC row joined with its
    DYNAMIC row, as column -> stored value); a collection with no rows is empty."""
    root: dict[str, Any] = {}
    for table in TABLES:
        parent = root
        for seg in table.path[:-1]:
            parent = parent.setdefault(seg, {})
        entries = []
        for row in rows.get(table, ()):
            entry = {k: from_sql(v) for k, v in row.items()
                     if k not in ("static_id", "timestamp", "oid") and v is not None}
            entries.append({"id": str(row.get("oid", "")), **entry} if table.collection else entry)
        if table.collection:
            parent[table.path[-1]] = entries
        elif entries:
            parent[table.path[-1]] = entries[0]
    return {"amps": root}
