"""Message type registry: AMPS type name -> codec, built from the ``MessageTypes`` config.

``fix``, ``nvfix``, ``xml``, ``json``, ``bflat``, ``msgpack``, ``bson`` and ``binary`` are
predeclared (AMPS needs no ``MessageType`` for them); a declaration can change a predeclared
type's settings (``<Name>fix</Name><FieldSeparator>124</FieldSeparator>``) or add a type whose
``Module`` is a built-in one, ``composite-local``/``composite-global`` (nested
``MessageType`` part types, any predeclared or previously declared type), ``protobuf`` or
``struct``.  Any other ``Module`` names a custom ``.so`` module, which the emulator cannot
load: :func:`refuse_custom_module` gives the start-up error, with the file:line the config
layer passes in ``MessageTypeDecl.source``.

Declared types are built when the registry is built (so their errors surface at start-up);
predeclared types are built when first asked for, so a predeclared type this installation
cannot serve (``bson`` with pymongo's package shadowed) is only an error for a config that
uses it.  A ``protobuf`` type compiles its ``.proto`` when declared (:mod:`.protobufmsg`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .base import MessageCodec, MessageTypeConfigError
from .bflat import BflatCodec
from .binary import BinaryCodec
from .composite import CompositeGlobalCodec, CompositeLocalCodec
from .fix import (
    DEFAULT_FIELD_SEPARATOR,
    DEFAULT_HEADER_SEPARATOR,
    DEFAULT_MESSAGE_SEPARATOR,
    FixCodec,
    NvfixCodec,
)
from .jsonmsg import JsonCodec
from .msgpackmsg import MsgpackCodec
from .structmsg import StructCodec
from .xmlmsg import XmlCodec

__all__ = ["MessageTypeDecl", "MessageTypeRegistry", "build_registry", "refuse_custom_module",
           "PREDECLARED", "BUILTIN_MODULES", "VIEWLESS_MODULES"]

PREDECLARED = ("fix", "nvfix", "xml", "json", "bflat", "msgpack", "bson", "binary")
BUILTIN_MODULES = (*PREDECLARED, "composite-local", "composite-global", "protobuf", "struct")
#: modules whose types cannot be a View's MessageType (User Guide, message types chapter: a
#: view builds messages from arbitrary values, which these fixed or unparsed layouts cannot
#: hold; they may still underlie a view or be joined); their codecs' ``capabilities.views``
VIEWLESS_MODULES = ("binary", "composite-global", "protobuf", "struct")
_SEPARATED = ("fix", "nvfix")


@dataclass(frozen=True)
class MessageTypeDecl:
    """One ``MessageTypes/MessageType`` element, as the config layer read it."""

    name: str
    module: str | None = None  # None: the built-in type of the same name
    field_separator: int | None = None
    header_separator: int | None = None
    message_separator: int | None = None
    parts: tuple[str, ...] = ()  # composite: nested MessageType names, in order
    proto_paths: tuple[str, ...] = ()
    proto_file: str | None = None
    proto_type: str | None = None
    fields: tuple[str, ...] = ()  # struct: Field elements, in order
    options: str | None = None  # custom modules only
    #: AMPSVersionCompliance (2, 4 or 5; None: the default, 4): the FIX tags of the
    #: /AMPS/SOWStats messages written in a fix type (no difference for the other types)
    version_compliance: int | None = None
    source: str | None = None  # "file:line" of the element, for errors

    @property
    def effective_module(self) -> str:
        return self.module if self.module is not None else self.name


def refuse_custom_module(decl: MessageTypeDecl) -> MessageTypeConfigError:
    """The start-up error for a ``MessageType`` whose ``Module`` is a custom library."""
    return MessageTypeConfigError(
        f"MessageType {decl.name!r} uses Module {decl.effective_module!r}: custom message type "
        f"modules are shared libraries built for AMPS, which the emulator cannot load; the "
        f"built-in modules are {', '.join(BUILTIN_MODULES)}", decl.source)


def _bson_unavailable(decl: MessageTypeDecl) -> MessageTypeConfigError:
    return MessageTypeConfigError(
        f"MessageType {decl.name!r} (bson) needs pymongo's bson package, which is not "
        f"installed in this environment (or the unrelated PyPI 'bson' package shadows it)",
        decl.source)


def _protobuf_unavailable(decl: MessageTypeDecl) -> MessageTypeConfigError:
    missing = [k for k, v in (("ProtoPath", decl.proto_paths), ("ProtoFile", decl.proto_file),
                              ("Type", decl.proto_type)) if not v]
    if missing:
        return MessageTypeConfigError(
            f"protobuf MessageType {decl.name!r} needs {', '.join(missing)}", decl.source)
    return MessageTypeConfigError(
        f"protobuf MessageType {decl.name!r}: compiling {decl.proto_file!r} needs the protobuf "
        f"runtime and a .proto compiler (grpcio-tools), which are not installed", decl.source)


class MessageTypeRegistry:
    """Type name -> codec (built once, then shared: codecs hold no per-message state)."""

    def __init__(self) -> None:
        self._codecs: dict[str, MessageCodec] = {}
        self._decls: dict[str, MessageTypeDecl] = {}

    def names(self) -> list[str]:
        return sorted({*PREDECLARED, *self._decls, *self._codecs})

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name in self._codecs or name in self._decls
                                          or name in PREDECLARED)

    def codec(self, name: str) -> MessageCodec:
        """The codec of type ``name``; :class:`MessageTypeConfigError` if it is unknown or
        cannot be served here."""
        c = self._codecs.get(name)
        if c is not None:
            return c
        decl = self._decls.get(name)
        if decl is None:
            if name not in PREDECLARED:
                raise MessageTypeConfigError(f"unknown message type {name!r}")
            decl = MessageTypeDecl(name)
        c = self._build(decl)
        self._codecs[name] = c
        return c

    def declare(self, decl: MessageTypeDecl) -> MessageCodec:
        """Add (or re-declare a predeclared) type and build its codec now."""
        if decl.name in self._decls:
            raise MessageTypeConfigError(f"MessageType {decl.name!r} is declared twice",
                                         decl.source)
        c = self._build(decl)
        self._decls[decl.name] = decl
        self._codecs[decl.name] = c
        return c

    def _build(self, d: MessageTypeDecl) -> MessageCodec:
        module = d.effective_module
        if module not in BUILTIN_MODULES:
            raise refuse_custom_module(d)
        seps = (d.field_separator, d.header_separator, d.message_separator)
        if module not in _SEPARATED and any(s is not None for s in seps):
            raise MessageTypeConfigError(
                f"FieldSeparator/HeaderSeparator/MessageSeparator apply to fix and nvfix, not "
                f"{module}", d.source)
        if d.parts and not module.startswith("composite-"):
            raise MessageTypeConfigError(f"nested MessageType elements apply to composite "
                                         f"types, not {module}", d.source)
        if d.fields and module != "struct":
            raise MessageTypeConfigError(f"Field elements apply to struct, not {module}",
                                         d.source)
        if (d.proto_paths or d.proto_file or d.proto_type) and module != "protobuf":
            raise MessageTypeConfigError(f"ProtoPath/ProtoFile/Type apply to protobuf, not "
                                         f"{module}", d.source)
        if d.options is not None:
            raise MessageTypeConfigError(f"Options apply to custom modules, not {module}",
                                         d.source)
        simple: dict[str, Callable[[], MessageCodec]] = {
            "json": JsonCodec, "xml": XmlCodec, "bflat": BflatCodec, "msgpack": MsgpackCodec,
            "binary": BinaryCodec,
        }
        make = simple.get(module)
        c: MessageCodec
        if make is not None:
            c = make()
        elif module in _SEPARATED:
            cls = FixCodec if module == "fix" else NvfixCodec
            try:
                c = cls(DEFAULT_FIELD_SEPARATOR if d.field_separator is None else d.field_separator,
                        DEFAULT_HEADER_SEPARATOR if d.header_separator is None
                        else d.header_separator,
                        DEFAULT_MESSAGE_SEPARATOR if d.message_separator is None
                        else d.message_separator)
            except ValueError as e:
                raise MessageTypeConfigError(str(e), d.source) from None
        elif module == "struct":
            if not d.fields:
                raise MessageTypeConfigError(f"struct MessageType {d.name!r} needs Field "
                                             f"elements", d.source)
            try:
                c = StructCodec(d.name, d.fields)
            except MessageTypeConfigError as e:
                raise MessageTypeConfigError(e.reason, d.source) from None
        elif module.startswith("composite-"):
            if not d.parts:
                raise MessageTypeConfigError(f"{module} MessageType {d.name!r} needs at least one "
                                             f"nested MessageType", d.source)
            parts = []
            for p in d.parts:
                if p == d.name:
                    raise MessageTypeConfigError(f"{d.name!r} cannot be a part of itself", d.source)
                try:
                    parts.append(self.codec(p))
                except MessageTypeConfigError as e:
                    raise MessageTypeConfigError(f"part {p!r} of {d.name!r}: {e.reason}",
                                                 d.source) from None
            comp = CompositeLocalCodec if module == "composite-local" else CompositeGlobalCodec
            c = comp(d.name, parts)
        elif module == "bson":
            try:
                from .bsonmsg import BsonCodec
            except ImportError:  # pymongo missing, or the unrelated PyPI ``bson`` shadowing it
                raise _bson_unavailable(d) from None
            c = BsonCodec()
        else:  # protobuf
            try:
                from .protobufmsg import ProtobufCodec
            except ImportError:
                raise _protobuf_unavailable(d) from None
            if not (d.proto_paths and d.proto_file and d.proto_type):
                raise _protobuf_unavailable(d)
            try:
                c = ProtobufCodec.from_config(d.name, d.proto_paths, d.proto_file, d.proto_type)
            except MessageTypeConfigError as e:
                raise MessageTypeConfigError(e.reason, d.source) from None
        if c.name != d.name:
            c.name = d.name  # a declared type answers to its own name
        if isinstance(c, FixCodec) and d.version_compliance is not None:
            c.version_compliance = d.version_compliance
        return c


def build_registry(decls: Iterable[MessageTypeDecl] = ()) -> MessageTypeRegistry:
    """A registry with the predeclared types and ``decls`` (in config order: a composite may
    use only types declared before it); raises :class:`MessageTypeConfigError`."""
    reg = MessageTypeRegistry()
    for d in decls:
        reg.declare(d)
    return reg
