"""Reader for ``SOW`` (and its legacy synonym ``TopicMetaData``).

Children are read in document order because AMPS requires the underlying topic of a
``View`` or ``ConflatedTopic`` to be defined *before* it. Element synonyms accepted, as
AMPS does for older configuration files:

=====================  =======================================
element                synonym(s)
=====================  =======================================
``SOW``                ``TopicMetaData``
``SOW/Topic``          ``TopicDefinition``
``SOW/Queue``          ``QueueDefinition``
``SOW/View``           ``ViewDefinition``
``SOW/ConflatedTopic`` ``ReplicaDefinition``
``.../Name``           ``Topic`` (in Topic, queues, View, ConflatedTopic)
``Topic/Durability``   ``Duration``
=====================  =======================================

Topic names are scoped by message type: a (name, message type) pair may be defined once
across topics, queues, views and conflated topics.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

from amps_emulator.protocol.filter import FilterError
from amps_emulator.protocol.filter.construct import parse_field, previous_mark

from .auxiliary.chaining import read_key_generator
from .model import ConflatedTopic, Queue, QueueKind, SowTopic, TransactionLog, View
from .schema import (
    MISSING,
    Ctx,
    Elem,
    Spec,
    at_least,
    check_no_text,
    children_texts,
    ignored_element,
    label,
    positive,
    read,
    text,
    unknown_element,
)
from .units import parse_bool, parse_count, parse_duration
from .values import enum, is_regex, parse_join, parse_recovery_point, parse_regex, parse_xpath
from .xmlload import Node

_TOPIC_TAGS = ("Topic", "TopicDefinition")
_QUEUE_TAGS: dict[str, QueueKind] = {"Queue": "queue", "QueueDefinition": "queue", "LocalQueue": "local",
               "GroupLocalQueue": "group_local"}
_VIEW_TAGS = ("View", "ViewDefinition")
_CONFLATED_TAGS = ("ConflatedTopic", "ReplicaDefinition")
#: SOW/RegexTopic: a Topic whose Name is also its Pattern (one logical topic per match)
_REGEX_TOPIC_TAGS = ("RegexTopic",)
_SOW_IGNORED: frozenset[str] = frozenset()


def _hash_index(node: Node, ctx: Ctx) -> Any:
    return children_texts(node, ctx, "Key", parse_xpath, where="<HashIndex>")


def _expiration(s: str) -> tuple[bool, float | None]:
    word = s.strip().lower()
    if word == "disabled":
        return (False, None)
    if word == "enabled":
        return (True, None)
    try:
        seconds = parse_duration(s)
    except ValueError:
        raise ValueError(f"invalid value {s.strip()!r} "
                         "(expected enabled, disabled or a duration such as 30s)") from None
    if seconds <= 0:
        raise ValueError("an expiration duration must be greater than zero (use disabled to turn it off)")
    return (True, seconds)


_HISTORY_SPEC = Spec(elems={
    "Window": Elem("window", positive(parse_duration, "a history window"), required=True),
    "Granularity": Elem("granularity", at_least(parse_duration, 0, "0s"), required=True),
})


def _history(node: Node, ctx: Ctx) -> Any:
    """``History``: ``Window`` (how long saved versions are kept) and ``Granularity`` (how
    often a version is saved; 0s = every version)."""
    r = read(node, _HISTORY_SPEC, ctx, "<History>")
    if not r.ok:
        return MISSING
    return (r.values["window"], r.values["granularity"])


def _fields(where: str, previous: bool) -> Any:
    """The reader of a ``Preprocessing`` or ``Enrichment`` element: its ``Field`` texts, each
    checked as AMPS checks it (``previous``: whether it may read ``OF PREVIOUS``)."""
    def check(field: str) -> str:
        try:
            parse_field(field, previous=previous_mark([field]) if previous else None)
        except FilterError as exc:
            raise ValueError(exc.detail) from None
        return field

    def read_fields(node: Node, ctx: Ctx) -> Any:
        return children_texts(node, ctx, "Field", check, where=where)
    return read_fields


def _name_elems() -> dict[str, Elem]:
    return {"Name": Elem("name", text, required=True), "Topic": Elem("name", text, required=True)}


def _topic_spec(ctx: Ctx) -> Spec:
    return Spec(
        elems={
            **_name_elems(),
            "MessageType": Elem("message_type", ctx.message_type, required=True),
            "FileName": Elem("file_name", text),
            "Durability": Elem("durability", enum(["persistent", "transient"])),
            "Duration": Elem("durability", enum(["persistent", "transient"])),
            "Key": Elem("keys", parse_xpath, multiple=True),
            "KeyDomain": Elem("key_domain", text),
            "Expiration": Elem("expiration", _expiration),
            "HashIndex": Elem("hash_indexes", node=_hash_index, multiple=True),
            "Index": Elem("indexes", parse_xpath, multiple=True),
            "RecoveryPoint": Elem("recovery_point", parse_recovery_point),
            "History": Elem("history", node=_history),
            "Pattern": Elem("pattern", parse_regex),
            "Preprocessing": Elem("preprocessing", node=_fields("<Topic>/<Preprocessing>", False)),
            "Enrichment": Elem("enrichment", node=_fields("<Topic>/<Enrichment>", True)),
            "KeyGenerator": Elem("key_generator", node=read_key_generator),
        },
        ignored=frozenset({"SlabSize", "InitialSlabCount", "ExpectedKeyCountHint"}),
    )


def resolve_file_name(file_name: str, name: str, message_type: str) -> str:
    """Expand ``%n`` to ``<name>.<message_type>``, escaping characters unsafe in file names."""
    return file_name.replace("%n", f"{quote(name, safe='')}.{message_type}")


def _queue_spec(ctx: Ctx) -> Spec:
    return Spec(
        elems={
            **_name_elems(),
            "MessageType": Elem("message_type", ctx.message_type, required=True),
            "UnderlyingTopic": Elem("underlying_topic", parse_regex),
            "DefaultPublishTarget": Elem("default_publish_target", text),
            "Semantics": Elem("semantics", enum(["at-least-once", "at-most-once"])),
            "LeasePeriod": Elem("lease_period", positive(parse_duration, "LeasePeriod")),
            "MaxBacklog": Elem("max_backlog", positive(parse_count, "MaxBacklog")),
            "MaxPerSubscriptionBacklog": Elem("max_per_subscription_backlog",
                                              positive(parse_count, "MaxPerSubscriptionBacklog")),
            "Expiration": Elem("expiration", positive(parse_duration, "Expiration")),
            "ExpirationModel": Elem("expiration_model", enum(["default", "queue", "latest", "earliest"])),
            "FairnessModel": Elem("fairness_model", enum(["fast", "round-robin", "proportional"])),
            "Leasing": Elem("leasing", enum(["strict", "sublet"])),
            "MaxCancels": Elem("max_cancels", parse_count),
            "MaxDeliveries": Elem("max_deliveries", parse_count),
            "TargetQueueDepth": Elem("target_queue_depth", positive(parse_count, "TargetQueueDepth")),
            "Priority": Elem("priority", text),
            "BarrierExpression": Elem("barrier_expression", text),
            "Filter": Elem("filter", text),
            "RecoveryPoint": Elem("recovery_point", parse_recovery_point),
            "FileBackedMetadata": Elem("file_backed_metadata", parse_bool),
            "DeferredAckExpiration": Elem("deferred_ack_expiration",
                                          positive(parse_duration, "DeferredAckExpiration")),
            "InitialOwner": Elem("initial_owner", text),
            "GroupLocalQueueDomain": Elem("group_local_queue_domain", text),
        },
    )


def _underlying_view(node: Node, ctx: Ctx) -> Any:
    """View UnderlyingTopic: either a topic name, or one or more Join elements."""
    if node.children:
        if node.text:
            ctx.err(node, "<UnderlyingTopic> in <View> holds either a topic name or <Join> elements, "
                          "not both")
            return MISSING
        joins = children_texts(node, ctx, "Join", where="<View>/<UnderlyingTopic>")
        return MISSING if joins is MISSING else (None, joins)
    if not node.text:
        ctx.err(node, "empty <UnderlyingTopic> in <View>")
        return MISSING
    return (node.text, ())


def _view_spec(ctx: Ctx) -> Spec:
    return Spec(elems={
        **_name_elems(),
        "MessageType": Elem("message_type", ctx.message_type, required=True),
        "UnderlyingTopic": Elem("underlying", node=_underlying_view, required=True),
        "Projection": Elem("projection",
                           node=lambda n, c: children_texts(n, c, "Field", where="<View>/<Projection>"),
                           required=True),
        "Grouping": Elem("grouping",
                         node=lambda n, c: children_texts(n, c, "Field", where="<View>/<Grouping>"),
                         required=True),
        "Filter": Elem("filter", text),
        "KeyDomain": Elem("key_domain", text),
        "Conflation": Elem("conflation", enum(["none", "inline"])),
        "HashIndex": Elem("hash_indexes", node=_hash_index, multiple=True),
        "JoinNullEquivalency": Elem("join_null_equivalency", parse_bool),
        "FileName": Elem("file_name", text),  # accepted and unused, as in AMPS
    })


def _conflated_spec(ctx: Ctx) -> Spec:
    return Spec(
        elems={
            **_name_elems(),
            "MessageType": Elem("message_type", ctx.message_type, required=True),
            "UnderlyingTopic": Elem("underlying_topic", text, required=True),
            "Interval": Elem("interval", at_least(parse_duration, 0.1, "100ms")),
            "Filter": Elem("filter", text),
            "HashIndex": Elem("hash_indexes", node=_hash_index, multiple=True),
            "TopicFormat": Elem("topic_format", text),
            # AMPS: the Enrichment of a ConflatedTopic does not read OF PREVIOUS
            "Enrichment": Elem("enrichment", node=_fields("<ConflatedTopic>/<Enrichment>", False)),
        },
    )


class SowResult:
    def __init__(self) -> None:
        self.topics: list[SowTopic] = []
        self.queues: list[Queue] = []
        self.views: list[View] = []
        self.conflated: list[ConflatedTopic] = []
        # (name, message type) -> (what, file, line)
        self.defined: dict[tuple[str, str], tuple[str, str, int]] = {}
        #: (name, message type) of Topics with a Pattern (they cannot underlie a View)
        self.patterns: set[tuple[str, str]] = set()


def _peek_key(node: Node) -> tuple[str, str] | None:
    name = node.child("Name") or node.child("Topic")
    mt = node.child("MessageType")
    if name is None or mt is None or not name.text or not mt.text:
        return None
    return (name.text, mt.text)


def read_sow(node: Node, ctx: Ctx, result: SowResult) -> None:
    """Read one SOW/TopicMetaData element, appending to ``result``."""
    where = f"<{node.tag}>"
    check_no_text(node, ctx, where)
    known = [*_TOPIC_TAGS, *_REGEX_TOPIC_TAGS, *_QUEUE_TAGS, *_VIEW_TAGS, *_CONFLATED_TAGS]
    for child in node.children:
        if child.tag in _TOPIC_TAGS or child.tag in _REGEX_TOPIC_TAGS:
            item: Any = _read_topic(child, ctx, regex_topic=child.tag in _REGEX_TOPIC_TAGS)
        elif child.tag in _QUEUE_TAGS:
            item = _read_queue(child, ctx, _QUEUE_TAGS[child.tag])
        elif child.tag in _VIEW_TAGS:
            item = _read_view(child, ctx, result)
        elif child.tag in _CONFLATED_TAGS:
            item = _read_conflated(child, ctx, result)
        elif child.tag in _SOW_IGNORED:
            ignored_element(ctx, child, where)
            continue
        else:
            unknown_element(ctx, child, where, [*known, *_SOW_IGNORED])
            continue
        if item is None:
            # remember the name anyway, so views over it do not report a second, cascading error
            key = _peek_key(child)
            if key is not None:
                result.defined.setdefault(key, (f"<{child.tag}>", child.file, child.line))
            continue
        key = (item.name, item.message_type)
        if key in result.defined:
            what, f, line = result.defined[key]
            ctx.err(child, f"topic {item.name!r} ({item.message_type}) is already defined as {what} "
                           f"at {f}:{line}")
            continue
        result.defined[key] = (f"<{child.tag}>", child.file, child.line)
        if isinstance(item, SowTopic):
            result.topics.append(item)
            if item.pattern is not None:
                result.patterns.add(key)
        elif isinstance(item, Queue):
            result.queues.append(item)
        elif isinstance(item, View):
            result.views.append(item)
        else:
            result.conflated.append(item)


def _read_topic(node: Node, ctx: Ctx, regex_topic: bool = False) -> SowTopic | None:
    r = read(node, _topic_spec(ctx), ctx)
    if not r.ok:
        return None
    name, mt = r.values["name"], r.values["message_type"]
    pattern = r.get("pattern")
    if regex_topic and pattern is None:
        try:
            pattern = parse_regex(name)
        except ValueError as e:
            ctx.err(r.nodes["name"], f"invalid <Name> in {label(node)}: {e}")
            return None
    if pattern is not None and "history" in r.values:
        ctx.err(r.nodes["history"], f"{label(node)}: a topic with a <Pattern> cannot keep <History>")
        return None
    durability = r.get("durability", "persistent")
    file_name = r.get("file_name")
    if file_name is None and durability == "persistent":
        if ctx.sow_directory is None:
            ctx.err(node, f"{label(node)} is persistent and needs a <FileName> "
                          "(or set <Durability>transient</Durability>)")
            return None
        file_name = f"{ctx.sow_directory.rstrip('/')}/%n.sow"
    keys = tuple(r.get("keys", ()))
    hash_indexes = tuple(r.get("hash_indexes", ()))
    key_generator = r.get("key_generator")
    if key_generator is not None:
        if "key_domain" in r.values:
            ctx.err(r.nodes["key_domain"], f"<KeyDomain> in {label(node)} is not valid with a "
                                           "<KeyGenerator>")
            return None
        if keys:
            ctx.warn(r.nodes["keys"], f"{label(node)}: its <KeyGenerator> makes the SowKey; the "
                                      "<Key> fields are only indexed (as a <HashIndex>)")
            hash_indexes, keys = (*hash_indexes, keys), ()
    if "key_domain" in r.values and not keys:
        ctx.err(r.nodes["key_domain"], f"<KeyDomain> in {label(node)} needs at least one <Key>")
        return None
    enabled, expiration = r.get("expiration", (False, None))
    return SowTopic(
        file=node.file, line=node.line, name=name, message_type=mt, file_name=file_name,
        resolved_file_name=resolve_file_name(file_name, name, mt) if file_name else None,
        durability=durability, keys=keys, key_domain=r.get("key_domain"),
        expiration_enabled=enabled, expiration=expiration,
        hash_indexes=hash_indexes, indexes=tuple(r.get("indexes", ())),
        recovery_point=r.get("recovery_point", "epoch"), history=r.get("history"), pattern=pattern,
        preprocessing=r.get("preprocessing", ()), enrichment=r.get("enrichment", ()),
        key_generator=key_generator,
    )


def _read_queue(node: Node, ctx: Ctx, kind: QueueKind) -> Queue | None:
    r = read(node, _queue_spec(ctx), ctx)
    where = label(node)
    ok = r.ok
    v = r.values
    underlying = v.get("underlying_topic", v.get("name"))
    # without an UnderlyingTopic the queue's own name is its topic, taken literally
    literal = "underlying_topic" not in v
    if underlying is not None and not literal and is_regex(underlying) and "default_publish_target" not in v:
        ctx.err(node, f"{where} has a regular-expression <UnderlyingTopic> {underlying!r} "
                      "and needs a <DefaultPublishTarget>")
        ok = False
    target = v.get("default_publish_target")
    if target is not None and underlying is not None and "underlying_topic" in v:
        if not (target == underlying or (is_regex(underlying) and re.search(underlying, target))):
            ctx.err(r.nodes["default_publish_target"],
                    f"<DefaultPublishTarget> {target!r} in {where} is not one of the topics of "
                    f"<UnderlyingTopic> {underlying!r}")
            ok = False
    if "priority" in v and "barrier_expression" in v:
        ctx.err(r.nodes["barrier_expression"],
                f"{where}: <Priority> and <BarrierExpression> cannot be used together")
        ok = False
    if "target_queue_depth" in v and ("priority" in v or "barrier_expression" in v):
        ctx.err(r.nodes["target_queue_depth"],
                f"{where}: <TargetQueueDepth> cannot be used with <Priority> or <BarrierExpression>")
        ok = False
    semantics = v.get("semantics", "at-least-once")
    default_fairness = "proportional" if semantics == "at-least-once" else "round-robin"
    fairness = v.get("fairness_model", default_fairness)
    if semantics == "at-most-once" and fairness != "round-robin":
        ctx.err(r.nodes["fairness_model"],
                f"{where}: at-most-once queues only support the round-robin <FairnessModel>, "
                f"not {fairness!r}")
        ok = False
    if kind == "group_local":
        if "initial_owner" not in r.nodes:
            # required by the Configuration Reference, and the User Guide has the group choose
            # the instance that owns each message as it enters the queue; 60East's snippet of a
            # GroupLocalQueueDomain leaves it out only because it shows the domain alone
            ctx.err(node, f"{where} is missing required element <InitialOwner> (the instance that owns "
                          "each message as it enters the queue, the same on every instance holding it)")
            ok = False
    else:
        for attr, tag in (("initial_owner", "InitialOwner"),
                          ("group_local_queue_domain", "GroupLocalQueueDomain")):
            if attr in r.nodes:
                ctx.err(r.nodes[attr], f"<{tag}> is only valid in a <GroupLocalQueue>, not in {where}")
                ok = False
    if not ok or underlying is None:  # no Name: already reported
        return None
    return Queue(
        file=node.file, line=node.line, kind=kind, name=v["name"], message_type=v["message_type"],
        underlying_topic=underlying, underlying_literal=literal and is_regex(underlying),
        default_publish_target=target, semantics=semantics,
        lease_period=v.get("lease_period"), max_backlog=v.get("max_backlog"),
        max_per_subscription_backlog=v.get("max_per_subscription_backlog", 1),
        expiration=v.get("expiration"), expiration_model=v.get("expiration_model", "default"),
        fairness_model=fairness, leasing=v.get("leasing", "sublet"),
        max_cancels=v.get("max_cancels", 0), max_deliveries=v.get("max_deliveries", 0),
        target_queue_depth=v.get("target_queue_depth"), priority=v.get("priority"),
        barrier_expression=v.get("barrier_expression"), filter=v.get("filter"),
        recovery_point=v.get("recovery_point", "epoch"),
        file_backed_metadata=v.get("file_backed_metadata", False),
        deferred_ack_expiration=v.get("deferred_ack_expiration", 86400.0),
        initial_owner=v.get("initial_owner"), group_local_queue_domain=v.get("group_local_queue_domain"),
    )


def _check_underlying(node: Node, ctx: Ctx, result: SowResult, topic: str, message_type: str,
                      where: str, tag: str = "UnderlyingTopic") -> bool:
    """A plain underlying topic name must be defined earlier in the SOW (any kind)."""
    if topic.startswith("[") and topic.count("[") == 2:
        # [messagetype].[topic]
        parts = [p.strip("[]") for p in topic.split("].[", 1)]
        if len(parts) == 2:
            message_type, topic = parts
    elif is_regex(topic):
        return True
    if (topic, message_type) in result.patterns and tag == "UnderlyingTopic" and where.startswith("<View"):
        ctx.err(node, f"{where}: <{tag}> {topic!r} is a Topic with a <Pattern>, which cannot be the "
                      "underlying topic of a View")
        return False
    if (topic, message_type) in result.defined:
        return True
    others = sorted(mt for (n, mt) in result.defined if n == topic)
    extra = f" (it is defined for message type {', '.join(others)})" if others else ""
    ctx.err(node, f"{where}: <{tag}> {topic!r} ({message_type}) is not a Topic, Queue, View or "
                  f"ConflatedTopic defined earlier in the SOW section{extra}")
    return False


def _read_view(node: Node, ctx: Ctx, result: SowResult) -> View | None:
    r = read(node, _view_spec(ctx), ctx)
    if not r.ok:
        return None
    v = r.values
    where = label(node)
    underlying, joins = v["underlying"]
    if joins and "filter" in v:
        ctx.err(r.nodes["filter"],
                f"{where}: <Filter> is only supported for views over a single topic, not joins")
        return None
    if underlying is not None and not _check_underlying(r.nodes["underlying"], ctx, result, underlying,
                                                         v["message_type"], where):
        return None
    for join in joins:
        try:
            parse_join(join)
        except ValueError as exc:
            ctx.err(r.nodes["underlying"], f"{where}: {exc}")
            return None
    return View(
        file=node.file, line=node.line, name=v["name"], message_type=v["message_type"],
        underlying_topic=underlying, joins=joins, projection=v["projection"], grouping=v["grouping"],
        filter=v.get("filter"), key_domain=v.get("key_domain"), conflation=v.get("conflation", "none"),
        hash_indexes=tuple(v.get("hash_indexes", ())),
        join_null_equivalency=v.get("join_null_equivalency", False),
    )


#: characters a TopicFormat may not hold (significant in a regular expression)
_REGEX_CHARS = frozenset(".^$*+?()[]{}|\\")


def _read_conflated(node: Node, ctx: Ctx, result: SowResult) -> ConflatedTopic | None:
    r = read(node, _conflated_spec(ctx), ctx)
    if not r.ok:
        return None
    v = r.values
    where = label(node)
    if not _check_underlying(r.nodes["underlying_topic"], ctx, result, v["underlying_topic"],
                             v["message_type"], where):
        return None
    # over a Topic with a Pattern: one conflated topic per logical topic, named by TopicFormat
    over_pattern = (v["underlying_topic"], v["message_type"]) in result.patterns
    fmt = v.get("topic_format")
    if over_pattern:
        if fmt is None:
            ctx.err(node, f"{where} is missing <TopicFormat>, required when the <UnderlyingTopic> "
                          f"{v['underlying_topic']!r} is a Topic with a <Pattern>")
            return None
        bad = sorted(set(fmt) & _REGEX_CHARS)
        if "%n" not in fmt or bad:
            why = f"holds {' '.join(bad)!r}, significant in a regular expression" if bad else \
                "must contain %n (the name of each logical topic)"
            ctx.err(r.nodes["topic_format"], f"<TopicFormat> {fmt!r} in {where} {why}")
            return None
    return ConflatedTopic(
        file=node.file, line=node.line, name=v["name"], message_type=v["message_type"],
        underlying_topic=v["underlying_topic"], interval=v.get("interval", 5.0), filter=v.get("filter"),
        hash_indexes=tuple(v.get("hash_indexes", ())), topic_format=fmt, over_pattern=over_pattern,
        enrichment=v.get("enrichment", ()),
    )


def check_queue_logging(queues: list[Queue], txlog: TransactionLog | None, ctx: Ctx,
                        txlog_declared: bool = False) -> None:
    """Warn when a queue's literal underlying topic is not recorded in the transaction log.

    AMPS refuses such a configuration; the emulator starts but warns, since the queue then has
    nothing durable to deliver from. Without any TransactionLog a queue cannot work at all: an
    error, as in AMPS.
    """
    for q in queues:
        tag = {"queue": "Queue", "local": "LocalQueue", "group_local": "GroupLocalQueue"}[q.kind]
        if txlog is None:
            if txlog_declared:  # a <TransactionLog> that could not be read reports its own error
                continue
            ctx.error(q.file, q.line, f"<{tag}> {q.name!r} needs a <TransactionLog> that records its "
                                      "underlying topic (queues deliver from the transaction log)", Ctx.LAST)
            continue
        if is_regex(q.underlying_topic) and not q.underlying_literal:
            continue
        if not txlog.records(q.underlying_topic, q.message_type):
            ctx.warn_at(
                q.file, q.line,
                f"<{tag}> {q.name!r}: underlying topic {q.underlying_topic!r} ({q.message_type}) is not "
                "recorded in the <TransactionLog>; AMPS requires it (the emulator cannot make this "
                "queue durable)")


_KIND_TAG: dict[type, str] = {SowTopic: "Topic", Queue: "Queue", View: "View",
                              ConflatedTopic: "ConflatedTopic"}


def one_definition_per_name(result: SowResult, ctx: Ctx) -> None:
    """Keep the derived topics the emulator can build; warn about the others.

    AMPS identifies a topic by (message type, name), so one name may be defined once per
    message type (60East's ``sample.xml`` defines ``messages-sow`` for json, xml and nvfix):
    every definition is kept, for its own type (the server decides what it builds of each).
    """
    dropped: set[tuple[str, str]] = set()
    # derived topics the emulator cannot build: over an ignored definition (views over views
    # follow), or over the conflated topics of a Pattern container's logical topics
    families = {(c.name, c.message_type) for c in result.conflated if c.over_pattern}
    changed = True
    while changed:
        changed = False
        derived: list[View | ConflatedTopic] = [*result.views, *result.conflated]
        for d in derived:
            if (d.name, d.message_type) in dropped:
                continue
            under = {(d.underlying_topic, d.message_type)} if d.underlying_topic else {
                (side[0], d.message_type) for j in getattr(d, "joins", ()) for side in parse_join(j)}
            if under & dropped:
                why = "its underlying topic definition is ignored"
            elif under & families:
                why = ("a view or conflated topic over the conflated topics of a Topic with a "
                       "<Pattern> is not implemented by the emulator")
            else:
                continue
            dropped.add((d.name, d.message_type))
            ctx.warn_at(d.file, d.line,
                        f"<{_KIND_TAG[type(d)]}> {d.name!r} ({d.message_type}) is ignored: {why}")
            changed = True
    if dropped:
        result.topics[:] = [t for t in result.topics if (t.name, t.message_type) not in dropped]
        result.queues[:] = [t for t in result.queues if (t.name, t.message_type) not in dropped]
        result.views[:] = [t for t in result.views if (t.name, t.message_type) not in dropped]
        result.conflated[:] = [t for t in result.conflated if (t.name, t.message_type) not in dropped]
