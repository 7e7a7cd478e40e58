"""``protobuf``: one message of the ``Type`` a ``MessageType`` names, from the user's ``.proto``.

Start-up (:func:`compile_proto`): the ``ProtoFile`` is compiled with the protoc that
``grpcio-tools`` ships (run as ``python -m grpc_tools.protoc`` so its diagnostics, which name
the ``.proto`` file, line and column, can be read back) into a descriptor set with every import;
the set is loaded into a private ``descriptor_pool`` of the ``protobuf`` runtime, and the
message class of ``Type`` is built from it.  ``ProtoPath`` entries are ``alias;path`` (an
import or ``ProtoFile`` written ``alias/x.proto`` is looked up under ``path``), ``;path`` or
``path`` (no alias).  A file that does not compile, a ``Type`` the files do not define, a
missing path: :class:`MessageTypeConfigError` with protoc's ``file:line:column: reason``.

Tree mapping (field addressing as the AMPS User Guide gives it: identifiers start at the
members of the outer message, ``/person/personID`` for a nested message, a ``oneof`` member by
its name): scalars keep their protobuf type (integers of every width, ``float``/``double``,
``bool``, ``string``); ``bytes`` -> string (UTF-8 when valid, else one character per byte);
an enum -> the name of its value (the number when the value is not in the enum); a message ->
``dict``; a repeated field -> ``list`` (absent when empty); a map -> ``dict`` keyed by the
key's text.  A field with presence (proto2 ``optional``/``required``, proto3 ``optional``,
messages, ``oneof`` members) is absent when unset, except a proto2 field with an explicit
``[default = ...]``, which reads as its default (as AMPS reads it everywhere but in delta); a
proto3 field without presence always reads as its value (0, ``''``...).

Delta (proto2 only, as AMPS): :meth:`ProtobufCodec.merge_delta` merges the fields *set* in
the delta (defaults are not values there) into the stored message -- scalars replace, messages
merge recursively, repeated fields replace, map entries replace per key -- and serialises the
result.  Proto3 types have no delta (AMPS cannot tell an omitted field from a default one), and
proto2 types no select lists; no protobuf type builds views, aggregates or ``/AMPS/`` topics.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, EncodeError, Message

from .base import (
    MAX_DEPTH,
    Capabilities,
    CodecError,
    MessageCodec,
    MessageTypeConfigError,
    Tree,
    UnsupportedByType,
    bytes_text,
    value_text,
)

__all__ = ["ProtobufCodec", "compile_proto", "proto_include_args"]

_PROTOC_TIMEOUT = 120.0


def proto_include_args(proto_paths: Sequence[str]) -> list[str]:
    """protoc ``-I`` arguments for ``ProtoPath`` values (``alias;path``, ``;path``, ``path``)."""
    args: list[str] = []
    for entry in proto_paths:
        alias, sep, path = entry.partition(";")
        if not sep:
            alias, path = "", entry
        alias, path = alias.strip(), path.strip()
        if not path:
            raise ValueError(f"ProtoPath {entry!r} names no directory")
        if not os.path.isdir(path):
            raise ValueError(f"ProtoPath {entry!r}: {path!r} is not a directory")
        args.append(f"-I{alias}={path}" if alias else f"-I{path}")
    return args


def _well_known_include() -> list[str]:
    """The directory of the ``google/protobuf/*.proto`` files grpcio-tools ships
    (``ValueError`` when grpcio-tools, the compiler, is not installed)."""
    try:
        import grpc_tools
    except ImportError:
        raise ValueError("the .proto compiler (grpcio-tools, the protobuf extra) is not "
                         "installed") from None

    d = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    return [f"-I{d}"] if os.path.isdir(d) else []


def compile_proto(proto_paths: Sequence[str], proto_file: str) -> descriptor_pb2.FileDescriptorSet:
    """The descriptor set of ``proto_file`` and its imports; ``ValueError`` saying why not
    (with protoc's ``file:line:column: reason`` lines)."""
    includes = proto_include_args(proto_paths)
    with tempfile.TemporaryDirectory(prefix="amps-proto-") as tmp:
        out = os.path.join(tmp, "set.pb")
        cmd = [sys.executable, "-m", "grpc_tools.protoc", *includes, *_well_known_include(),
               "--include_imports", f"--descriptor_set_out={out}", proto_file]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=_PROTOC_TIMEOUT,
                                  check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise ValueError(f"protoc could not run: {e}") from None
        if done.returncode != 0 or not os.path.exists(out):
            why = "; ".join(ln.strip() for ln in (done.stderr + done.stdout).splitlines()
                            if ln.strip()) or f"protoc exited with status {done.returncode}"
            raise ValueError(why)
        with open(out, "rb") as f:
            return descriptor_pb2.FileDescriptorSet.FromString(f.read())


def _is_map(fd: FieldDescriptor) -> bool:
    mt = fd.message_type
    return bool(fd.is_repeated and mt is not None and mt.GetOptions().map_entry)


def _scalar(fd: FieldDescriptor, v: object) -> Tree:
    if fd.type == FieldDescriptor.TYPE_ENUM and isinstance(v, int):
        ev = fd.enum_type.values_by_number.get(v)
        return ev.name if ev is not None else v
    if isinstance(v, (bytes, bytearray)):
        return bytes_text(v)
    if v is None or isinstance(v, (str, bool, int, float)):
        return v
    raise CodecError(f"unexpected protobuf value {type(v).__name__}")


def _value(fd: FieldDescriptor, v: object, depth: int) -> Tree:
    if fd.message_type is not None and isinstance(v, Message):
        return _tree(v, depth + 1)
    return _scalar(fd, v)


def _tree(msg: Message, depth: int) -> dict[str, Tree]:
    if depth > MAX_DEPTH:
        raise CodecError("protobuf message nested too deeply")
    desc: Descriptor = msg.DESCRIPTOR
    out: dict[str, Tree] = {}
    for fd in desc.fields:
        name = fd.name
        if _is_map(fd):
            entries = getattr(msg, name)
            if len(entries):
                vfd = fd.message_type.fields_by_name["value"]
                m: dict[str, Tree] = {}
                for k in entries:
                    key = value_text(_scalar(fd.message_type.fields_by_name["key"], k))
                    m["" if key is None else key] = _value(vfd, entries[k], depth)
                out[name] = m
        elif fd.is_repeated:
            items = getattr(msg, name)
            if len(items):
                out[name] = [_value(fd, x, depth) for x in items]
        elif fd.has_presence:
            if msg.HasField(name):
                out[name] = _value(fd, getattr(msg, name), depth)
            elif fd.has_default_value and fd.message_type is None:
                out[name] = _scalar(fd, fd.default_value)
        else:
            out[name] = _scalar(fd, getattr(msg, name))
    return out


def _merge(old: Message, delta: Message, depth: int) -> None:
    """AMPS delta merge on messages: the fields set in ``delta`` go into ``old``."""
    if depth > MAX_DEPTH:
        raise CodecError("protobuf message nested too deeply")
    for fd, v in delta.ListFields():
        name = fd.name
        if _is_map(fd):
            getattr(old, name).MergeFrom(v)  # per key: the delta's entry replaces
        elif fd.is_repeated:
            old.ClearField(name)
            getattr(old, name).MergeFrom(v)
        elif fd.message_type is not None:
            _merge(getattr(old, name), v, depth + 1)
        else:
            setattr(old, name, v)


def _fill(msg: Message, tree: Tree, depth: int) -> None:
    """Set ``msg``'s fields from a tree (the inverse of :func:`_tree`)."""
    if depth > MAX_DEPTH:
        raise CodecError("protobuf message nested too deeply")
    if not isinstance(tree, dict):
        raise CodecError(f"a {msg.DESCRIPTOR.full_name} value must be an object")
    fields = msg.DESCRIPTOR.fields_by_name
    for name, v in tree.items():
        fd = fields.get(name)
        if fd is None:
            raise CodecError(f"{msg.DESCRIPTOR.full_name} has no field {name!r}")
        if v is None:
            continue
        if _is_map(fd):
            if not isinstance(v, dict):
                raise CodecError(f"map field {name!r} needs an object")
            target = getattr(msg, name)
            kfd = fd.message_type.fields_by_name["key"]
            vfd = fd.message_type.fields_by_name["value"]
            for k, x in v.items():
                key = _raw(kfd, k)
                if vfd.message_type is not None:
                    _fill(target[key], x, depth + 1)
                else:
                    target[key] = _raw(vfd, x)
        elif fd.is_repeated:
            items = v if isinstance(v, list) else [v]
            target = getattr(msg, name)
            for x in items:
                if fd.message_type is not None:
                    _fill(target.add(), x, depth + 1)
                else:
                    target.append(_raw(fd, x))
        elif fd.message_type is not None:
            _fill(getattr(msg, name), v, depth + 1)
        else:
            setattr(msg, name, _raw(fd, v))


_INT_TYPES = frozenset({
    FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT32,
    FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SINT64,
    FieldDescriptor.TYPE_FIXED32, FieldDescriptor.TYPE_FIXED64, FieldDescriptor.TYPE_SFIXED32,
    FieldDescriptor.TYPE_SFIXED64})


def _raw(fd: FieldDescriptor, v: Tree) -> object:
    """The protobuf value of a tree scalar for field ``fd``."""
    t = fd.type
    try:
        if t == FieldDescriptor.TYPE_ENUM:
            if isinstance(v, str):
                ev = fd.enum_type.values_by_name.get(v)
                if ev is None:
                    raise CodecError(f"{v!r} is not a value of {fd.enum_type.full_name}")
                return ev.number
            return int(v) if isinstance(v, (int, float)) else 0
        if t in _INT_TYPES:
            return int(v) if isinstance(v, (int, float, str)) else 0
        if t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
            return float(v) if isinstance(v, (int, float, str)) else 0.0
        if t == FieldDescriptor.TYPE_BOOL:
            return v if isinstance(v, bool) else v in ("true", 1)
        if t == FieldDescriptor.TYPE_BYTES:
            return v.encode("utf-8") if isinstance(v, str) else (value_text(v) or "").encode()
        return v if isinstance(v, str) else (value_text(v) or "")
    except (ValueError, OverflowError, UnicodeEncodeError) as e:
        raise CodecError(f"field {fd.name!r}: {e}") from None


class ProtobufCodec(MessageCodec):
    """Bodies of one message class; build with :meth:`from_config`."""

    def __init__(self, name: str, message_class: type[Message], proto3: bool) -> None:
        self.name = name
        self._cls = message_class
        self.proto3 = proto3
        self.capabilities = Capabilities(delta=not proto3, views=False, select=proto3,
                                         aggregates=False, amps_topics=False)

    @classmethod
    def from_config(cls, name: str, proto_paths: Sequence[str], proto_file: str,
                    type_name: str) -> ProtobufCodec:
        """Compile ``proto_file`` and take its message ``type_name``
        (:class:`MessageTypeConfigError` naming why not)."""
        if not proto_paths or not proto_file or not type_name:
            raise MessageTypeConfigError(
                f"protobuf MessageType {name!r} needs ProtoPath, ProtoFile and Type")
        try:
            fds = compile_proto(proto_paths, proto_file)
        except ValueError as e:
            raise MessageTypeConfigError(
                f"protobuf MessageType {name!r}: ProtoFile {proto_file!r} does not compile: {e}"
            ) from None
        pool = descriptor_pool.DescriptorPool()
        syntax: dict[str, str] = {}
        try:
            for f in fds.file:
                pool.Add(f)
                syntax[f.name] = f.syntax
            desc = pool.FindMessageTypeByName(type_name.lstrip("."))
        except KeyError:
            raise MessageTypeConfigError(
                f"protobuf MessageType {name!r}: Type {type_name!r} is not a message defined by "
                f"{proto_file!r} or its imports (give the package-qualified name)") from None
        except TypeError as e:
            raise MessageTypeConfigError(
                f"protobuf MessageType {name!r}: {proto_file!r}: {e}") from None
        if desc.containing_type is not None:
            raise MessageTypeConfigError(
                f"protobuf MessageType {name!r}: Type {type_name!r} is a nested message; AMPS "
                f"needs a top-level one")
        # proto2 when the file says so or says nothing (AMPS's reading too); else proto3 rules
        proto3 = syntax.get(desc.file.name, "") not in ("", "proto2")
        return cls(name, message_factory.GetMessageClass(desc), proto3)

    def _parse(self, body: bytes) -> Message:
        msg = self._cls()
        try:
            msg.MergeFromString(body)
        except (DecodeError, ValueError, TypeError, OverflowError, RecursionError) as e:
            raise CodecError(f"malformed {self.name} message: {e}") from None
        return msg

    def decode(self, body: bytes) -> Tree:
        msg = self._parse(bytes(body))
        try:
            return _tree(msg, 0)
        except RecursionError:
            raise CodecError("protobuf message nested too deeply") from None
        except (ValueError, TypeError) as e:  # a string field that is not UTF-8, ...
            raise CodecError(f"malformed {self.name} message: {e}") from None

    def encode(self, tree: Tree) -> bytes:
        msg = self._cls()
        try:
            _fill(msg, tree, 0)
            return bytes(msg.SerializePartialToString())
        except RecursionError:
            raise CodecError("protobuf message nested too deeply") from None
        except (EncodeError, ValueError, TypeError) as e:  # a value out of its field's range
            raise CodecError(f"cannot write {self.name}: {e}") from None

    def merge_delta(self, old: bytes, delta: bytes) -> bytes:
        if not self.capabilities.delta:
            raise UnsupportedByType(f"delta is not supported for protobuf version 3 type "
                                   f"{self.name}")
        stored = self._parse(bytes(old))
        try:
            _merge(stored, self._parse(bytes(delta)), 0)
            return bytes(stored.SerializePartialToString())
        except RecursionError:
            raise CodecError("protobuf message nested too deeply") from None
        except (ValueError, TypeError, EncodeError) as e:  # a string field that is not UTF-8
            raise CodecError(f"cannot merge {self.name} delta: {e}") from None
