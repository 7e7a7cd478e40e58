"""Located, safe XML reading: a small element tree with file and line on every node.

:func:`load_tree` parses a configuration with the expat parser directly, so every element
knows the line of its start tag. It then

* substitutes ``${NAME}`` in text and attribute values from the environment
  (``AMPS_CONFIG_DIRECTORY``, ``AMPS_CONFIG_PATH`` and ``AMPS_VERSION`` are predefined as in
  AMPS unless the environment sets them; ``AMPS_VERSION`` is the version the server
  announces). An unset variable is left as written and noted on
  the node (``missing_env``); :func:`report_missing_env` turns those into errors, skipping
  elements the reader ignored, so an unset variable inside e.g. an ignored TLS transport does
  not stop a production config from loading. In an ``Include`` path it is an error at once;
* replaces each ``<Include>path</Include>`` by the elements of that file, resolved relative to
  the including file. Included nodes keep their own file name and lines, so errors point into
  the included file. Cycles and missing files are errors at the ``Include`` element. An
  included file may hold several top-level elements.

Parsing is safe: DOCTYPE and entity declarations are refused outright (no DTD processing, no
external entities, no entity expansion bombs); only the five predefined XML entities and
character references work. Comments and processing instructions are skipped.

Problems are reported through the ``Issues`` sink and never raised, so the caller can
collect every error before failing.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Mapping
from typing import Protocol
from xml.parsers import expat

AMPS_VERSION = "5.3.4.0"
MAX_INCLUDE_DEPTH = 16
#: the largest config file (or included file) read; real AMPS configs are a few KiB
MAX_FILE_BYTES = 16 << 20

_WRAPPER = "AMPSEmulatorIncludeWrapper"
_XML_DECL = re.compile(rb"^\s*<\?xml[^>]*\?>")
_ENV_REF = re.compile(r"\$\{([^}]*)\}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")


class Issues(Protocol):
    def error(self, file: str, line: int, reason: str, seq: int = 0) -> None: ...


class Node:
    """One XML element: tag, attributes, direct text (stripped), children, file and line.

    ``seq`` numbers elements in document order *after* includes are spliced in, so problems
    can be reported in the order a reader meets them.
    """

    __slots__ = ("tag", "attrs", "text", "line", "file", "children", "seq", "missing_env", "ignored",
                 "_parts")

    def __init__(self, tag: str, attrs: dict[str, str], line: int, file: str) -> None:
        self.tag = tag
        self.attrs = attrs
        self.text = ""
        self.line = line
        self.file = file
        self.children: list[Node] = []
        self.seq = 0
        #: names of unset ${VARIABLES} referenced in this element (left in the text as written)
        self.missing_env: list[str] = []
        #: set by the reader when the element is a warned-and-ignored AMPS element
        self.ignored = False
        self._parts: list[str] = []

    def child(self, tag: str) -> Node | None:
        return next((c for c in self.children if c.tag == tag), None)

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"<Node {self.tag} {self.file}:{self.line}>"


class _XMLProblem(Exception):
    def __init__(self, line: int, reason: str) -> None:
        super().__init__(reason)
        self.line = line
        self.reason = reason


def _parse(data: bytes, file: str, *, wrapped: bool) -> Node:
    """Parse bytes into a Node tree; raises _XMLProblem with a line on any syntax problem."""
    parser = expat.ParserCreate()
    parser.buffer_text = True
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    stack: list[Node] = []
    roots: list[Node] = []

    def start(tag: str, attrs: dict[str, str]) -> None:
        node = Node(tag, attrs, parser.CurrentLineNumber, file)
        if stack:
            stack[-1].children.append(node)
        else:
            roots.append(node)
        stack.append(node)

    def end(tag: str) -> None:
        node = stack.pop()
        node.text = "".join(node._parts).strip()
        node._parts = []

    def chars(data: str) -> None:
        if stack:
            stack[-1]._parts.append(data)

    def refuse_doctype(*_args: object) -> None:
        raise _XMLProblem(parser.CurrentLineNumber,
                          "DOCTYPE/DTD declarations are not allowed in a configuration file")

    def refuse_entity(*_args: object) -> None:
        raise _XMLProblem(parser.CurrentLineNumber,
                          "entity declarations are not allowed in a configuration file")

    def refuse_external(*_args: object) -> int:
        raise _XMLProblem(parser.CurrentLineNumber,
                          "external entities are not allowed in a configuration file")

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CharacterDataHandler = chars
    parser.StartDoctypeDeclHandler = refuse_doctype
    parser.EntityDeclHandler = refuse_entity
    parser.UnparsedEntityDeclHandler = refuse_entity
    parser.ExternalEntityRefHandler = refuse_external
    try:
        parser.Parse(data, True)
    except expat.ExpatError as e:
        column = (e.offset or 0) + 1
        if wrapped and e.lineno == 1:
            column = max(1, column - len(_WRAPPER) - 2)
        reason = expat.errors.messages.get(e.code, str(e))
        raise _XMLProblem(e.lineno, f"malformed XML: {reason} (column {column})") from None
    if not roots:
        raise _XMLProblem(1, "malformed XML: no element found")
    return roots[0]


def read_file(path: str) -> bytes:
    """The bytes of the config file (or included file) at ``path``, at most
    :data:`MAX_FILE_BYTES` of them: a larger file, or a device that never ends such as
    ``/dev/zero``, is an :class:`OSError` saying so once that much is read, never a process
    that fills its memory. (A pipe is read: ``amps-emulator <(envsubst < amps.xml)`` works.)"""
    with open(path, "rb") as f:
        if stat.S_ISDIR(os.fstat(f.fileno()).st_mode):
            raise OSError(errno.EISDIR, os.strerror(errno.EISDIR))
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise OSError(errno.EFBIG, f"larger than {MAX_FILE_BYTES} bytes")
    return data


class _Expander:
    def __init__(self, issues: Issues, env: Mapping[str, str], top_file: str, base_dir: str,
                 amps_version: str = AMPS_VERSION) -> None:
        self.issues = issues
        self.env = env
        self.base_dir = base_dir
        self.counter = 0
        if top_file.startswith("<"):
            self.builtins = {"AMPS_CONFIG_DIRECTORY": os.path.abspath(base_dir),
                             "AMPS_CONFIG_PATH": top_file, "AMPS_VERSION": amps_version}
        else:
            path = os.path.abspath(top_file)
            self.builtins = {"AMPS_CONFIG_DIRECTORY": os.path.dirname(path),
                             "AMPS_CONFIG_PATH": path, "AMPS_VERSION": amps_version}

    def _error(self, node: Node, reason: str) -> None:
        self.issues.error(node.file, node.line, reason, node.seq)

    def _number(self, node: Node) -> None:
        self.counter += 1
        node.seq = self.counter

    def substitute(self, text: str, node: Node) -> str:
        if "${" not in text:
            return text

        def repl(m: re.Match[str]) -> str:
            name = m.group(1).strip()
            if not _ENV_NAME.fullmatch(name):
                self._error(node, f"invalid environment variable reference {m.group(0)!r} in <{node.tag}>")
                return m.group(0)
            if name in self.env:
                return self.env[name]
            if name in self.builtins:
                return self.builtins[name]
            if name not in node.missing_env:
                node.missing_env.append(name)
            return m.group(0)

        result = _ENV_REF.sub(repl, text)
        if "${" in _ENV_REF.sub("", text):
            self._error(node, f"unterminated environment variable reference in <{node.tag}>: {text!r}")
        return result

    def expand(self, node: Node, chain: tuple[str, ...]) -> None:
        """Substitute variables in ``node`` and splice includes into its children, recursively."""
        self._number(node)
        node.text = self.substitute(node.text, node)
        for key, value in list(node.attrs.items()):
            node.attrs[key] = self.substitute(value, node)
        new_children: list[Node] = []
        for child in node.children:
            if child.tag == "Include":
                new_children.extend(self.include(child, chain))
            else:
                self.expand(child, chain)
                new_children.append(child)
        node.children = new_children

    def include(self, node: Node, chain: tuple[str, ...]) -> list[Node]:
        self._number(node)
        if node.children:
            self._error(node, "<Include> must contain a file name, not elements")
            return []
        target = self.substitute(node.text, node).strip()
        if node.missing_env:
            for name in node.missing_env:
                self._error(node, f"environment variable {name} is not set "
                                  f"(referenced as ${{{name}}} in <Include>)")
            return []
        if not target:
            self._error(node, "empty <Include>")
            return []
        if os.path.isabs(target):
            path = target
        else:
            parent_dir = self.base_dir if node.file.startswith("<") else os.path.dirname(node.file)
            path = os.path.join(parent_dir, target)
        path = os.path.normpath(path)
        key = os.path.realpath(path)
        if key in chain:
            cycle = " -> ".join([*(os.path.basename(c) for c in chain), os.path.basename(key)])
            self._error(node, f"include cycle: {cycle}")
            return []
        if len(chain) > MAX_INCLUDE_DEPTH:
            self._error(node, f"includes nested deeper than {MAX_INCLUDE_DEPTH} levels")
            return []
        try:
            data = read_file(path)
        except OSError as e:
            self._error(node, f"cannot read included file {target!r}: {e.strerror or e}")
            return []
        # Wrap so an included file may hold several top-level elements. The XML declaration
        # (if any) is blanked out with spaces so line and column numbers stay the same.
        if data.startswith(b"\xef\xbb\xbf"):
            data = data[3:]
        m = _XML_DECL.match(data)
        if m:
            data = b" " * (m.end()) + data[m.end():]
        wrapped = b"<" + _WRAPPER.encode() + b">" + data + b"</" + _WRAPPER.encode() + b">"
        try:
            wrapper = _parse(wrapped, path, wrapped=True)
        except _XMLProblem as p:
            self.issues.error(path, p.line, p.reason, node.seq)
            return []
        if wrapper.text:
            self.issues.error(path, wrapper.line, f"unexpected text outside elements: {wrapper.text[:40]!r}",
                              node.seq)
        result: list[Node] = []
        for child in wrapper.children:
            if child.tag == "Include":
                result.extend(self.include(child, chain + (key,)))
            else:
                self.expand(child, chain + (key,))
                result.append(child)
        return result


def load_tree(data: bytes | str, file: str, issues: Issues, env: Mapping[str, str],
              base_dir: str | None = None, amps_version: str = AMPS_VERSION) -> Node | None:
    """Parse a configuration document and expand variables and includes.

    ``file`` names the document in messages and anchors relative includes (for text not read
    from a file, pass a name in angle brackets such as ``"<string>"``; includes are then
    resolved against ``base_dir``, default the current directory). ``amps_version`` is what
    ``${AMPS_VERSION}`` stands for (the version the server announces). Returns None when the
    document itself cannot be parsed (the error has been reported).
    """
    if isinstance(data, str):
        data = data.encode("utf-8")
    base = base_dir if base_dir is not None else (
        os.getcwd() if file.startswith("<") else os.path.dirname(os.path.abspath(file)))
    try:
        root = _parse(data, file, wrapped=False)
    except _XMLProblem as p:
        issues.error(file, p.line, p.reason)
        return None
    expander = _Expander(issues, env, file, base, amps_version)
    chain = () if file.startswith("<") else (os.path.realpath(file),)
    expander.expand(root, chain)
    return root


def report_missing_env(root: Node, issues: Issues) -> None:
    """Report every unset ``${NAME}`` outside elements marked ``ignored``, in document order."""
    stack = [root]
    while stack:
        node = stack.pop()
        if node.ignored:
            continue
        for name in node.missing_env:
            issues.error(node.file, node.line,
                         f"environment variable {name} is not set "
                         f"(referenced as ${{{name}}} in <{node.tag}>)",
                         node.seq)
        stack.extend(reversed(node.children))
