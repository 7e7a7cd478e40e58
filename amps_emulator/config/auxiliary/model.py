"""What the configuration says about the auxiliary modules it loads (typed, checked)."""

from __future__ import annotations

import msgspec

__all__ = ["AuxModules", "ChainingKeys", "ValueLookupDef"]


class ValueLookupDef(msgspec.Struct, frozen=True, kw_only=True):
    """One ``Lookup`` option of ``libamps_udf_experimental.so``:
    ``name;count;message type;topic;return field;lookup field...``."""

    name: str
    message_type: str
    topic: str
    return_field: str
    fields: tuple[str, ...]  # as many as the declared count
    file: str = ""
    line: int = 0


class ChainingKeys(msgspec.Struct, frozen=True, kw_only=True):
    """A SOW topic's ``KeyGenerator`` through the chaining key generator: the primary field,
    the secondary fields (in order), the file the chains persist in, and ``Validation``."""

    module: str
    primary: str
    secondary: tuple[str, ...]
    file_name: str | None = None
    validation: bool = False


class AuxModules(msgspec.Struct, frozen=True, kw_only=True):
    """The auxiliary modules of a configuration's ``Modules`` that the emulator implements."""

    #: the function libraries loaded (:data:`protocol.filter.modules.FUNCTION_LIBRARIES`)
    function_libraries: frozenset[str] = frozenset()
    #: the experimental module's lookups, in declaration order
    lookups: tuple[ValueLookupDef, ...] = ()
