"""``amps-emulator --dump-config``: the effective configuration as AMPS XML.

What the server reads once ``Include`` files are spliced in and every ``${NAME}`` (from the
environment, ``-DNAME=VALUE`` defines and AMPS's predefined variables) is substituted, written
back as one XML document. Comments and the XML declaration of included files are not kept;
elements, attributes and text are, in document order. A document that does not load (a
missing include, an unset variable, a malformed file) is a :class:`ConfigError` listing every
error, as start-up would report it.

The built-in default configuration (no file given) is written as the XML that describes it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from xml.sax.saxutils import escape, quoteattr

from .errors import ConfigError
from .loader import loads_config, read_config_file
from .model import Config
from .schema import Ctx
from .xmlload import AMPS_VERSION, Node, load_tree, report_missing_env

INDENT = "  "


def _write(node: Node, depth: int, out: list[str]) -> None:
    pad = INDENT * depth
    attrs = "".join(f" {k}={quoteattr(v)}" for k, v in node.attrs.items())
    if not node.children:
        if node.text:
            out.append(f"{pad}<{node.tag}{attrs}>{escape(node.text)}</{node.tag}>")
        else:
            out.append(f"{pad}<{node.tag}{attrs}/>")
        return
    out.append(f"{pad}<{node.tag}{attrs}>")
    if node.text:  # mixed content: the element's own text first, then its children
        out.append(f"{pad}{INDENT}{escape(node.text)}")
    for child in node.children:
        _write(child, depth + 1, out)
    out.append(f"{pad}</{node.tag}>")


def node_to_xml(root: Node, notes: Iterable[str] = ()) -> str:
    """``root`` as an indented XML document; each of ``notes`` becomes a comment at the end."""
    out = ['<?xml version="1.0" encoding="UTF-8"?>']
    _write(root, 0, out)
    out.extend(f"<!-- {note.replace('--', '- -')} -->" for note in notes)
    return "\n".join(out) + "\n"


def dump_config_file(path: str | os.PathLike[str], *, env: Mapping[str, str] | None = None,
                     amps_version: str = AMPS_VERSION, notes: Iterable[str] = ()) -> str:
    """The effective XML of the configuration file at ``path`` (see the module docstring).

    The file is also loaded in full, so a configuration the server would refuse is refused
    here with the same errors rather than dumped."""
    environ = os.environ if env is None else env
    file, data = read_config_file(path)
    loads_config(data, file, env=environ, amps_version=amps_version)  # every error, as start-up
    ctx = Ctx(environ)
    root = load_tree(data, file, ctx, environ, amps_version=amps_version)
    if root is not None:
        report_missing_env(root, ctx)
    if root is None or ctx.errors:  # pragma: no cover - loads_config above raised already
        raise ConfigError(ctx.errors)
    return node_to_xml(root, notes)


def _elem(tag: str, text: str | int | None) -> Node:
    node = Node(tag, {}, 0, "<default>")
    node.text = "" if text is None else str(text)
    return node


def _parent(tag: str, *children: Node) -> Node:
    node = Node(tag, {}, 0, "<default>")
    node.children = list(children)
    return node


def dump_config_object(cfg: Config, notes: Iterable[str] = ()) -> str:
    """A configuration built in code (the built-in default) as the AMPS XML that describes
    it: instance name, transports, logging targets, transaction log, SOW directory and SOW
    topics (name, message type, keys, file, durability)."""
    root = _parent("AMPSConfig", _elem("Name", cfg.name))
    if cfg.description:
        root.children.append(_elem("Description", cfg.description))
    if cfg.transports:
        root.children.append(_parent("Transports", *(
            _parent("Transport", _elem("Name", t.name), _elem("Type", t.type),
                    _elem("InetAddr", t.inet_addr),
                    *([] if t.message_type is None else [_elem("MessageType", t.message_type)]),
                    _elem("Protocol", t.protocol))
            for t in cfg.transports)))
    if cfg.logging:
        root.children.append(_parent("Logging", *(
            _parent("Target", _elem("Protocol", t.protocol), _elem("Level", t.level))
            for t in cfg.logging)))
    txlog = cfg.transaction_log
    if txlog is not None:
        root.children.append(_parent(
            "TransactionLog", _elem("JournalDirectory", txlog.journal_directory),
            *(_parent("Topic", _elem("Name", t.name), _elem("MessageType", t.message_type))
              for t in txlog.topics)))
    if cfg.sow_directory:
        root.children.append(_elem("SOWDirectory", cfg.sow_directory))
    if cfg.sow_topics:
        root.children.append(_parent("SOW", *(
            _parent("Topic", _elem("Name", t.name), _elem("MessageType", t.message_type),
                    *(_elem("Key", k) for k in t.keys),
                    *([] if t.file_name is None else [_elem("FileName", t.file_name)]),
                    *([] if t.durability == "persistent" else [_elem("Durability", t.durability)]))
            for t in cfg.sow_topics)))
    if cfg.sow_stats_interval is not None:
        root.children.append(_elem("SOWStatsInterval", f"{cfg.sow_stats_interval:g}s"))
    if cfg.minidump_directory is not None:
        root.children.append(_elem("MiniDumpDirectory", cfg.minidump_directory))
    if cfg.minidump_file_mask is not None:
        root.children.append(_elem("MiniDumpFileMask", f"{cfg.minidump_file_mask:04o}"))
    return node_to_xml(root, notes)
