"""``{{VARIABLE}}`` expansion in action options.

A run's variables map names to text (``str``) or message data (``bytes``, inserted as is, so
a binary or FIX body survives). ``AMPS_BYTE_XX`` (``XX`` two uppercase hex digits) is one byte;
any name the run does not define expands to nothing, as AMPS does. The clock variables
(``AMPS_DATETIME``, ``AMPS_UNIX_TIMESTAMP``) are put in each run's variables by the engine,
from the server clock, so a test clock drives them too.
"""

from __future__ import annotations

import datetime as _dt
import re

__all__ = ["Vars", "clock_variables", "expand", "expand_text", "to_text"]

#: a run's variables: text, or message data inserted byte for byte
Vars = dict[str, str | bytes]

_VAR = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_BYTE = re.compile(r"AMPS_BYTE_([0-9A-F]{2})")


def expand(template: str, variables: Vars) -> bytes:
    """``template`` with every ``{{NAME}}`` replaced by its value (bytes)."""
    out: list[bytes] = []
    pos = 0
    for m in _VAR.finditer(template):
        out.append(template[pos:m.start()].encode())
        out.append(_value(m.group(1), variables))
        pos = m.end()
    out.append(template[pos:].encode())
    return b"".join(out)


def expand_text(template: str | None, variables: Vars, default: str = "") -> str:
    """:func:`expand` as text (option values that name things: topics, filters, paths)."""
    if template is None:
        return default
    return expand(template, variables).decode("utf-8", "replace")


def to_text(value: str | bytes) -> str:
    return value if isinstance(value, str) else value.decode("utf-8", "replace")


def _value(name: str, variables: Vars) -> bytes:
    v = variables.get(name)
    if v is None:
        m = _BYTE.fullmatch(name)
        return bytes([int(m.group(1), 16)]) if m is not None else b""
    return v if isinstance(v, bytes) else v.encode()


def clock_variables(now: float) -> Vars:
    """``AMPS_DATETIME`` (ISO-8601, UTC) and ``AMPS_UNIX_TIMESTAMP`` (whole seconds) at ``now``."""
    moment = _dt.datetime.fromtimestamp(now, _dt.UTC)
    return {"AMPS_DATETIME": moment.isoformat(timespec="microseconds").replace("+00:00", "Z"),
            "AMPS_UNIX_TIMESTAMP": str(int(now))}
