"""Reader for ``Actions``: ``Action`` elements made of ``On``, ``If`` and ``Do`` steps.

Each step names a ``Module`` and may carry ``Options`` (free-form, module specific; kept in
file order as :class:`~config.model.ActionOption` pairs, nested children flattened to
``Parent/Child``). Module names are checked against the catalogue of modules AMPS loads by
default, per step kind, together with the options each module requires:

* a misspelt built-in module name (close to a known one) is an error with a suggestion;
* any other module is a custom extension module (loaded through ``Modules`` in AMPS), which
  the emulator cannot run: the whole ``Action`` gets one warning and is left out.

Option values may contain AMPS action variables such as ``{{AMPS_DATA}}``; they are kept
verbatim. ``Age``/``Duration``/``GracePeriod`` options without variables are checked to be
durations, and so is ``do-execute-system``'s ``Timeout`` (an emulator option: how long its
command may run).

The ``Options`` of ``on-publish-message`` are the options of the subscription AMPS enters for
the action: any option a ``subscribe`` takes without a bookmark (:data:`SUBSCRIBE_OPTIONS`).
They are read with the parser of the clients' commands; an option that needs a bookmark or a
client's own subscription, an option of another command, or an unknown one is an error at the
line of ``Options``, with the reason. A conflated action on a literal topic that is not in
the SOW needs a ``conflation_key``, as a client's subscription does. A ``Topic`` that names a
queue gets a warning: AMPS would make the action a consumer of the queue.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from amps_emulator.protocol.command import parse_options
from amps_emulator.protocol.reasons import CommandError
from amps_emulator.protocol.topics import compile_topic_regex, is_regex_topic

from .model import Action, ActionOption, ActionStep, Queue, StepKind
from .schedule import parse_every
from .schema import Ctx, check_no_text, unknown_element
from .units import parse_conflation, parse_duration
from .values import suggest
from .xmlload import Node

if TYPE_CHECKING:
    from .sow_sections import SowResult

_TOPIC_MT = ("Topic", "MessageType")

ON_MODULES: dict[str, tuple[str, ...]] = {
    "amps-action-on-schedule": ("Every",),
    "amps-action-on-startup": (),
    "amps-action-on-shutdown": (),
    "amps-action-on-signal": ("Signal",),
    "amps-action-on-admin": ("Path",),
    "amps-action-on-minidump": (),
    "amps-action-on-connect-client": (),
    "amps-action-on-disconnect-client": (),
    "amps-action-on-logon-client": (),
    "amps-action-on-offline-start": (),
    "amps-action-on-offline-stop": (),
    "amps-action-on-subscribe": _TOPIC_MT,
    "amps-action-on-unsubscribe": _TOPIC_MT,
    "amps-action-on-connect-incoming-replication": (),
    "amps-action-on-disconnect-incoming-replication": (),
    "amps-action-on-connect-replication": (),
    "amps-action-on-disconnect-replication": (),
    "amps-action-on-replication-resync-complete": (),
    "amps-action-on-upgrade-replication": (),
    "amps-action-on-downgrade-replication": (),
    "amps-action-on-publish-message": _TOPIC_MT,
    "amps-action-on-deliver-message": _TOPIC_MT,
    "amps-action-on-message-affinity": ("MessageType", "ControlTopic", "DataTopic"),
    "amps-action-on-sow-expire-message": _TOPIC_MT,
    "amps-action-on-sow-delete-message": _TOPIC_MT,
    "amps-action-on-oof-message": _TOPIC_MT,
    "amps-action-on-message-condition-timeout": _TOPIC_MT,
    "amps-action-on-alert": (*_TOPIC_MT, "OOFEvent", "TimeoutEvent", "EventVariable"),
    "amps-action-on-execute-event": (),
}

DO_MODULES: dict[str, tuple[str, ...]] = {
    "amps-action-do-rotate-logs": (),
    "amps-action-do-compress-files": ("Age", "Pattern"),
    "amps-action-do-remove-files": ("Age", "Pattern"),
    "amps-action-do-truncate-statistics": ("Age",),
    "amps-action-do-vacuum-statistics": (),
    "amps-action-do-archive-journal": ("Age",),
    "amps-action-do-compress-journal": ("Age",),
    "amps-action-do-remove-journal": ("Age",),
    "amps-action-do-delete-sow": (*_TOPIC_MT, "Filter"),
    "amps-action-do-compact-sow": (),
    "amps-action-do-query-sow": (*_TOPIC_MT, "Filter", "CaptureData"),
    "amps-action-do-disable-authentication": (),
    "amps-action-do-enable-authentication": (),
    "amps-action-do-reset-authentication": (),
    "amps-action-do-disable-entitlement": (),
    "amps-action-do-enable-entitlement": (),
    "amps-action-do-reset-entitlement": (),
    "amps-action-do-enable-transport": (),
    "amps-action-do-disable-transport": (),
    "amps-action-do-publish-message": (*_TOPIC_MT, "Data"),
    "amps-action-do-downgrade-replication": ("Age",),
    "amps-action-do-upgrade-replication": ("Age",),
    "amps-action-do-extract-values": ("MessageType", "Value"),
    "amps-action-do-translate-data": ("Data", "Value"),
    "amps-action-do-increment-counter": ("Key", "Value"),
    "amps-action-do-execute-event": (),
    "amps-action-do-execute-system": ("Command",),
    "amps-action-do-enable-proxied-transfer": _TOPIC_MT,
    "amps-action-do-disable-proxied-transfer": _TOPIC_MT,
    "amps-action-do-minidump": (),
    "amps-action-do-shutdown": (),
    "amps-action-do-nothing": (),
    "amps-action-do-echo-message": (),
}

IF_MODULES: dict[str, tuple[str, ...]] = {
    "amps-action-if-condition": ("Condition",),
    "amps-action-if-file-system-usage": ("Path", "GreaterThan"),
}

_STEP_TAGS: dict[str, StepKind] = {"On": "on", "If": "if", "Do": "do"}
_CATALOGUE = {"on": ON_MODULES, "if": IF_MODULES, "do": DO_MODULES}
_KIND_TAG = {"on": "On", "if": "If", "do": "Do"}
_ALL_MODULES = {m: kind for kind, table in _CATALOGUE.items() for m in table}

_EXPIRE_REASONS = ("time_limit", "forced_expire", "max_cancels", "max_deliveries")
#: ``MessageSource`` of ``amps-action-on-publish-message``: where the publishes it watches come from
_MESSAGE_SOURCES = ("all", "local", "replicated")


#: the ``subscribe`` options an ``on-publish-message`` takes in its ``Options``
SUBSCRIBE_OPTIONS = ("none", "bookmark", "conflation", "conflation_key", "max_backlog",
                     "no_sowkey", "non_regex_topic", "oof", "select", "timestamp")
_REPLAY_ONLY = "applies only to a bookmark replay, and an action's subscription has no bookmark"
#: options a client's command may carry that an action's subscription cannot take: why
NOT_FOR_ACTIONS: dict[str, str] = {
    **{name: _REPLAY_ONLY for name in ("bookmark_not_found", "fully_durable", "live", "pause",
                                        "resume", "rate", "rate_max_gap", "top_n")},
    "replace": "replaces a client's subscription named by its SubId; an action has none to replace",
    "send_keys": "is a delta_subscribe option; a subscribe does not support it",
    "no_empties": "is a delta_subscribe option; an action's subscription is a subscribe, "
                  "which delivers whole messages",
    **{name: "is an option of a SOW query (sow, sow_and_subscribe), not of subscribe"
       for name in ("grouping", "projection", "skip_n", "orderby", "batch_size")},
}
_VALUED = ("conflation", "conflation_key", "select", "max_backlog")
#: an action step's place: file, line of its Options option, order
_Where = tuple[str, int, int]


class _Custom(Exception):
    """A step names a non-built-in module."""


def _options(node: Node, ctx: Ctx, prefix: str = "") -> list[ActionOption] | None:
    ok = check_no_text(node, ctx, f"<{node.tag}>") if not prefix else True
    out: list[ActionOption] = []
    for child in node.children:
        name = f"{prefix}{child.tag}"
        if child.children:
            if child.text:
                ctx.err(child, f"option <{child.tag}> mixes text and elements")
                ok = False
            nested = _options(child, ctx, prefix=f"{name}/")
            if nested is None:
                ok = False
            else:
                out.extend(nested)
        else:
            out.append(ActionOption(name, child.text, child.line))
    return out if ok else None


def _check_option_values(step_node: Node, module: str, options: list[ActionOption], ctx: Ctx) -> bool:
    ok = True
    for opt in options:
        if "{{" in opt.value:
            continue  # expanded by AMPS at run time
        if opt.name in ("Age", "Duration", "GracePeriod") or (
                opt.name == "Timeout" and module == "amps-action-do-execute-system"):
            try:
                parse_duration(opt.value)
            except ValueError as e:
                ctx.err(step_node, f"{module}: invalid option <{opt.name}>: {e}")
                ok = False
        elif opt.name == "Every" and module == "amps-action-on-schedule":
            try:
                parse_every(opt.value)
            except ValueError as e:
                ctx.err(step_node, f"{module}: invalid option <Every> {e}")
                ok = False
        elif opt.name == "Reason" and module == "amps-action-on-sow-expire-message":
            bad = [r.strip() for r in opt.value.split(",") if r.strip() not in _EXPIRE_REASONS]
            if bad:
                ctx.err(step_node, f"{module}: invalid <Reason> {', '.join(bad)!s} (expected any of "
                                   f"{', '.join(_EXPIRE_REASONS)})")
                ok = False
        elif opt.name == "MessageSource" and module == "amps-action-on-publish-message" \
                and opt.value.strip().lower() not in _MESSAGE_SOURCES:
            ctx.err(step_node, f"{module}: invalid <MessageSource> {opt.value!r} (expected one of "
                               f"{', '.join(_MESSAGE_SOURCES)})")
            ok = False
        elif opt.name == "Options" and module == "amps-action-on-publish-message":
            where = (step_node.file, opt.line or step_node.line, step_node.seq)
            ok = _check_subscribe_options(where, module, opt.value, ctx) is not None and ok
    return ok


def _check_subscribe_options(where: _Where, module: str, text: str,
                             ctx: Ctx) -> dict[str, str | bool] | None:
    """The subscribe options of an ``on-publish-message``, parsed as a client's are; None
    (and an error at ``where``) for an option its subscription cannot take."""
    file, line, seq = where
    try:
        opts = parse_options(text)
    except CommandError:
        ctx.error(file, line, f"{module}: invalid <Options> {text!r}: unbalanced brackets", seq)
        return None
    ok = True
    for name, value in opts.items():
        why = NOT_FOR_ACTIONS.get(name)
        if why is None and name not in SUBSCRIBE_OPTIONS:
            hint = suggest(name, (*SUBSCRIBE_OPTIONS, *NOT_FOR_ACTIONS))
            why = "is not a subscribe option" + (f"; did you mean {hint!r}?" if hint else
                                                 f" (options: {', '.join(SUBSCRIBE_OPTIONS)})")
        elif why is None and name in _VALUED and (value is True or not value):
            why = "needs a value"
        elif why is None and name == "conflation" and isinstance(value, str):
            why = _conflation_problem(value)
        elif why is None and name == "max_backlog" and not (
                isinstance(value, str) and value.isdigit() and int(value) > 0):
            why = "must be a positive integer"
        if why is not None:
            ctx.error(file, line, f"{module}: option {name!r} in <Options> {why}", seq)
            ok = False
    return opts if ok else None


def _conflation_problem(value: str) -> str | None:
    try:
        parse_conflation(value)
    except ValueError as e:
        return str(e)
    return None


def _step(node: Node, kind: StepKind, ctx: Ctx, sow: SowResult | None) -> ActionStep | None:
    """Read one On/If/Do. Returns None on error; raises _Custom for a custom module."""
    where = f"<{node.tag}>"
    ok = check_no_text(node, ctx, where)
    module: str | None = None
    module_node: Node | None = None
    options: list[ActionOption] = []
    seen_options: Node | None = None
    for child in node.children:
        if child.tag == "Module":
            if module_node is not None:
                ctx.err(child, f"duplicate <Module> in {where}: already given at "
                               f"{module_node.file}:{module_node.line}")
                ok = False
                continue
            module_node = child
            if child.children or not child.text:
                ctx.err(child, f"<Module> in {where} must hold a module name")
                ok = False
            else:
                module = child.text
        elif child.tag == "Options":
            if seen_options is not None:
                ctx.err(child, f"duplicate <Options> in {where}: already given at "
                               f"{seen_options.file}:{seen_options.line}")
                ok = False
                continue
            seen_options = child
            read_opts = _options(child, ctx)
            if read_opts is None:
                ok = False
            else:
                options = read_opts
        else:
            unknown_element(ctx, child, where, ["Module", "Options"])
            ok = False
    if module_node is None:
        ctx.err(node, f"{where} is missing required element <Module>")
        return None
    if module is None or not ok:
        return None
    table = _CATALOGUE[kind]
    if module not in table:
        other = _ALL_MODULES.get(module)
        if other is not None:
            ctx.err(module_node, f"module {module!r} belongs in <{_KIND_TAG[other]}>, not in {where}")
            return None
        hint = suggest(module, _ALL_MODULES)
        if hint is not None or module.startswith("amps-action-"):
            extra = f"; did you mean {hint!r}?" if hint else ""
            ctx.err(module_node, f"unknown action module {module!r} in {where}{extra}")
            return None
        raise _Custom(module)
    names = {o.name for o in options}
    missing = [req for req in table[module] if req not in names]
    if missing:
        ctx.err(node, f"{module} in {where} is missing required option(s): "
                      f"{', '.join(f'<{m}>' for m in missing)}")
        return None
    if not _check_option_values(node, module, options, ctx):
        return None
    step = ActionStep(file=node.file, line=node.line, kind=kind, module=module, options=tuple(options))
    if module == "amps-action-on-publish-message" and sow is not None \
            and not _check_subscription(node, step, ctx, sow):
        return None
    return step


def _check_subscription(node: Node, step: ActionStep, ctx: Ctx, sow: SowResult) -> bool:
    """What an ``on-publish-message``'s subscription needs of the topics configured: a
    ``conflation_key`` to conflate a literal topic that has no SOW key; a warning when its
    ``Topic`` names a queue."""
    topic = (step.option("Topic") or "").strip()
    mt = (step.option("MessageType") or "").strip()
    given = next((o for o in step.options if o.name == "Options"), None)
    opts = parse_options(given.value) if given is not None and "{{" not in given.value else {}
    if "{{" in topic:
        return True
    literal = not is_regex_topic(topic) or "non_regex_topic" in opts
    try:
        matcher = None if literal else compile_topic_regex(topic)
    except CommandError:
        return True  # (the engine reports the bad pattern)
    for q in sow.queues:
        if q.message_type == mt and (q.name == topic if matcher is None
                                     else matcher.search(q.name) is not None):
            ctx.warn_at(step.file, _line_of(step, "Topic"), _queue_warning(step.module, q),
                        node.seq)
    conflation = opts.get("conflation")
    if not literal or not isinstance(conflation, str) or conflation.strip().lower() == "none" \
            or "conflation_key" in opts:
        return True
    what = sow.defined.get((topic, mt))
    if what is not None and not what[0].endswith("Queue>"):
        return True  # a SOW topic, a view or a conflated topic: its SowKey is the default key
    ctx.error(step.file, _line_of(step, "Options"),
              f"{step.module}: conflation on {topic!r}, which is not a SOW topic, needs a "
              "conflation_key in <Options>", node.seq)
    return False


def _line_of(step: ActionStep, option: str) -> int:
    return next((o.line for o in step.options if o.name == option and o.line), step.line)


def _queue_warning(module: str, q: Queue) -> str:
    said = (f"{module}: <Topic> names the queue {q.name!r}; AMPS makes this action a consumer "
            "of the queue, which leases its messages and never acknowledges them (other "
            "consumers miss them); the emulator takes no lease")
    if q.underlying_literal or q.underlying_topic == q.name:
        return said + f": the action runs for every publish to {q.name!r}"
    return (said + f", and publishes to {q.name!r} go to its underlying topic: name "
            f"{q.underlying_topic!r} to run the action for the messages that enter the queue")


def _action(node: Node, ctx: Ctx, sow: SowResult | None) -> Action | None:
    where = "<Action>"
    ok = check_no_text(node, ctx, where)
    on: list[ActionStep] = []
    steps: list[ActionStep] = []
    counts = {"on": 0, "if": 0, "do": 0}
    custom: str | None = None
    for child in node.children:
        kind = _STEP_TAGS.get(child.tag)
        if kind is None:
            unknown_element(ctx, child, where, ["On", "If", "Do"])
            ok = False
            continue
        counts[kind] += 1
        try:
            step = _step(child, kind, ctx, sow)
        except _Custom as c:
            custom = custom or str(c)
            continue
        if step is None:
            ok = False
        elif kind == "on":
            on.append(step)
        else:
            steps.append(step)
    for needed, tag in (("on", "On"), ("do", "Do")):
        if counts[needed] == 0:
            ctx.err(node, f"{where} needs at least one <{tag}>")
            ok = False
    if not ok:
        return None
    if custom is not None:
        node.ignored = True
        ctx.warn(node, f"<Action> uses module {custom!r}, which is not a built-in AMPS action module; "
                       "custom modules are not supported by the emulator, so this action is ignored")
        return None
    return Action(file=node.file, line=node.line, on=tuple(on), steps=tuple(steps))


def read_actions(node: Node, ctx: Ctx, sow: SowResult | None = None) -> tuple[Action, ...]:
    """The ``Actions`` section; ``sow``: the topics configured, which the subscriptions of
    ``on-publish-message`` actions are checked against."""
    where = "<Actions>"
    check_no_text(node, ctx, where)
    out: list[Action] = []
    for child in node.children:
        if child.tag != "Action":
            unknown_element(ctx, child, where, ["Action"])
            continue
        action = _action(child, ctx, sow)
        if action is not None:
            out.append(action)
    return tuple(out)
