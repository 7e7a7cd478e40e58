"""Every AMPS message type as a codec: body bytes <-> the field tree the server reads.

Pure modules (no server state, no imports from ``server``, ``sow``, ``journal``, ``queues``)::

    from amps_emulator.protocol.msgtypes import build_registry, MessageTypeDecl, CodecError
    reg = build_registry([MessageTypeDecl("pipe-fix", module="fix", field_separator=124)])
    codec = reg.codec("pipe-fix")
    tree = codec.decode(b"35=D|55=IBM|38=150|")     # {'35': 'D', '55': 'IBM', '38': 150}
    compile_filter("/35 = 'D' AND /38 > 100")(tree)  # True: the JSON filter engine, unchanged

``base`` (interface, errors, helpers), one module per type (``jsonmsg``, ``fix`` for fix and
nvfix, ``xmlmsg``, ``msgpackmsg``, ``bsonmsg`` (pymongo's ``bson``), ``bflat``, ``binary``,
``composite``, ``structmsg``, ``protobufmsg`` (the user's ``.proto`` compiled at start-up; needs
the ``protobuf`` extra, imported only when a config declares such a type)) and ``registry``
(type name -> codec from the ``MessageTypes`` config).  A type this installation cannot serve
(protobuf without its extra) is refused with a :class:`MessageTypeConfigError` naming what is
missing; custom ``.so`` modules with :func:`refuse_custom_module`.
"""

from __future__ import annotations

from .base import (
    Capabilities,
    CodecError,
    MessageCodec,
    MessageTypeConfigError,
    Path,
    Tree,
    UnsupportedByType,
)
from .bflat import BflatCodec
from .binary import BinaryCodec
from .bsonmsg import BsonCodec
from .composite import CompositeGlobalCodec, CompositeLocalCodec
from .fix import FixCodec, NvfixCodec
from .jsonmsg import JsonCodec
from .msgpackmsg import MsgpackCodec
from .registry import (
    BUILTIN_MODULES,
    PREDECLARED,
    MessageTypeDecl,
    MessageTypeRegistry,
    build_registry,
    refuse_custom_module,
)
from .structmsg import StructCodec
from .xmlmsg import XmlCodec

__all__ = [
    "Capabilities", "CodecError", "MessageCodec", "MessageTypeConfigError", "Path", "Tree",
    "UnsupportedByType", "BflatCodec", "BinaryCodec", "BsonCodec", "CompositeGlobalCodec",
    "CompositeLocalCodec", "FixCodec", "NvfixCodec", "JsonCodec", "MsgpackCodec", "StructCodec",
    "XmlCodec", "BUILTIN_MODULES", "PREDECLARED", "MessageTypeDecl", "MessageTypeRegistry",
    "build_registry", "refuse_custom_module",
]
