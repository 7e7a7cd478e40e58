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
"""

from __future__ import annotations

from .model import Action, ActionOption, ActionStep, StepKind
from .schedule import parse_every
from .schema import Ctx, check_no_text, unknown_element
from .units import parse_duration
from .values import suggest
from .xmlload import Node

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
            out.append(ActionOption(name, child.text))
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
    return ok


def _step(node: Node, kind: StepKind, ctx: Ctx) -> ActionStep | None:
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
    return ActionStep(file=node.file, line=node.line, kind=kind, module=module, options=tuple(options))


def _action(node: Node, ctx: Ctx) -> Action | None:
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
            step = _step(child, kind, ctx)
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


def read_actions(node: Node, ctx: Ctx) -> tuple[Action, ...]:
    where = "<Actions>"
    check_no_text(node, ctx, where)
    out: list[Action] = []
    for child in node.children:
        if child.tag != "Action":
            unknown_element(ctx, child, where, ["Action"])
            continue
        action = _action(child, ctx)
        if action is not None:
            out.append(action)
    return tuple(out)
