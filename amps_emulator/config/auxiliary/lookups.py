"""``VALUE_LOOKUP`` (``libamps_udf_experimental.so``) where the configuration uses it.

Checked at load, each at its element:

* a ``Lookup``'s topic must be a SOW ``Topic`` of the lookup's message type (the values are
  read from its records); the topic gets a hash index on the lookup fields, which the SOW
  keeps up to date on every change of the topic, so a lookup costs one index probe;
* a call in a ``Topic``'s ``Preprocessing`` or ``Enrichment`` (or a ``ConflatedTopic``'s
  ``Enrichment``) names a declared lookup as a string literal and passes as many values as
  the lookup has fields;
* the function is refused in a ``View`` (nothing guarantees the looked-up data while a view
  is rebuilt) and on a transient ``Topic`` whose ``RecoveryPoint`` is not ``now`` (nor while
  such a topic is recovered), as the User Guide says.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import msgspec

from amps_emulator.protocol.filter import ast as A
from amps_emulator.protocol.filter.construct import mask, parse_field, previous_mark
from amps_emulator.protocol.filter.errors import FilterError

from ..model import ConflatedTopic, SowTopic
from ..schema import Ctx
from .model import AuxModules

if TYPE_CHECKING:
    from ..sow_sections import SowResult

__all__ = ["check_value_lookups"]

_CALL = re.compile(r"(?<![\w/@.\-])VALUE_LOOKUP\s*\(", re.IGNORECASE)


def _calls(texts: tuple[str, ...], previous: bool) -> list[A.Call]:
    mark = previous_mark(texts) if previous else None
    out: list[A.Call] = []
    for text in texts:
        try:
            expr = parse_field(text, previous=mark).expr
        except FilterError:
            continue  # (reported where the field was read)
        out += [n for n in A.walk(expr.ast) if isinstance(n, A.Call) and n.name == "VALUE_LOOKUP"]
    return out


def _check_calls(item: SowTopic | ConflatedTopic, aux: AuxModules, ctx: Ctx) -> bool:
    """Report each bad call of ``item``'s fields; whether it calls VALUE_LOOKUP at all."""
    texts = (*getattr(item, "preprocessing", ()), *item.enrichment)
    calls = _calls(texts, isinstance(item, SowTopic))
    where = f"<{'Topic' if isinstance(item, SowTopic) else 'ConflatedTopic'}> {item.name!r}"
    declared = {d.name: d for d in aux.lookups}
    for call in calls:
        name = call.args[0]
        if not isinstance(name, A.Literal) or type(name.value) is not str:
            ctx.error(item.file, item.line, f"{where}: the first argument of VALUE_LOOKUP must "
                                            "be the name of a <Lookup>, as a string")
            continue
        lookup = declared.get(name.value)
        if lookup is None:
            known = ", ".join(repr(n) for n in declared) or "none"
            ctx.error(item.file, item.line, f"{where}: VALUE_LOOKUP names {name.value!r}, which "
                                            f"no <Lookup> declares (declared: {known})")
        elif len(call.args) - 1 != len(lookup.fields):
            ctx.error(item.file, item.line,
                      f"{where}: VALUE_LOOKUP {name.value!r} takes {len(lookup.fields)} value(s) "
                      f"({lookup.file}:{lookup.line}), not {len(call.args) - 1}")
    return bool(calls)


def _index_lookup_topics(sow: SowResult, aux: AuxModules, ctx: Ctx) -> None:
    for lookup in aux.lookups:
        at = next((i for i, t in enumerate(sow.topics)
                   if t.name == lookup.topic and t.message_type == lookup.message_type
                   and t.pattern is None), None)
        if at is None:
            ctx.error(lookup.file, lookup.line,
                      f"<Lookup> {lookup.name!r}: topic {lookup.topic!r} ({lookup.message_type}) "
                      "is not a SOW <Topic> of this configuration")
            continue
        topic = sow.topics[at]
        if lookup.fields not in topic.hash_indexes:
            sow.topics[at] = msgspec.structs.replace(
                topic, hash_indexes=(*topic.hash_indexes, lookup.fields))


def check_value_lookups(sow: SowResult, aux: AuxModules, ctx: Ctx) -> None:
    """Check every use of VALUE_LOOKUP (module docstring) and index the lookup topics."""
    for view in sow.views:
        texts = (*view.projection, *view.grouping, *((view.filter,) if view.filter else ()))
        if any(_CALL.search(mask(t)) for t in texts if _safe_mask(t)):
            ctx.error(view.file, view.line, f"<View> {view.name!r}: VALUE_LOOKUP cannot be used "
                                            "in a view definition")
    if not aux.lookups and "VALUE_LOOKUP" not in _names(sow):
        return
    for topic in sow.topics:
        if not _check_calls(topic, aux, ctx):
            continue
        if topic.durability == "transient" and topic.recovery_point != "now":
            ctx.error(topic.file, topic.line,
                      f"<Topic> {topic.name!r}: VALUE_LOOKUP cannot be used on a transient topic "
                      f"whose <RecoveryPoint> is {topic.recovery_point!r}, not now")
    for conflated in sow.conflated:
        _check_calls(conflated, aux, ctx)
    _index_lookup_topics(sow, aux, ctx)


def _safe_mask(text: str) -> bool:
    try:
        mask(text)
    except FilterError:
        return False
    return True


def _names(sow: SowResult) -> str:
    """Every field text of the topics, upper-cased (a cheap test for a call)."""
    items: list[SowTopic | ConflatedTopic] = [*sow.topics, *sow.conflated]
    return " ".join(t.upper() for item in items
                    for t in (*getattr(item, "preprocessing", ()), *item.enrichment))
