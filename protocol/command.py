"""Typed inbound commands and the option-string grammar.

A :class:`Command` is what one client frame means: the canonical header fields (whatever
spelling the client used) plus the body as raw bytes. Bodies are never decoded here; the
server decodes a message body at most once, when something needs its content.
"""

from __future__ import annotations

from typing import Any

import msgspec

from protocol import reasons
from protocol.headers import ACK_TYPES, COMMAND_ALIASES, INBOUND_ALIASES
from protocol.reasons import CommandError

_INT_FIELDS = ("seq", "batch_size", "top_n", "skip_n", "length", "group_seq", "expiration")


class Command(msgspec.Struct, kw_only=True, gc=False):
    """One decoded client command. Unset fields are ``None``; ``body`` is ``bytes``."""

    command: str = ""
    body: bytes = b""
    cid: str | None = None
    topic: str | None = None
    ack_type: str | None = None
    seq: int | None = None
    expiration: int | None = None
    options: str | None = None
    sow_key: str | None = None
    correlation_id: str | None = None
    filter: str | None = None
    bookmark: str | None = None
    sub_id: str | None = None
    sub_ids: str | None = None
    query_id: str | None = None
    batch_size: int | None = None
    top_n: int | None = None
    skip_n: int | None = None
    orderby: str | None = None
    sow_keys: str | None = None
    client_name: str | None = None
    user_id: str | None = None
    password: str | None = None
    version: str | None = None
    message_type: str | None = None
    timestamp: str | None = None
    lease_period: str | None = None
    group_seq: int | None = None
    length: int | None = None
    heartbeat: str | None = None
    auth_key: str | None = None
    status: str | None = None
    reason: str | None = None
    data_only: str | None = None
    _acks: frozenset[str] | None = None
    _opts: dict[str, str | bool] | None = None

    # -- derived views ------------------------------------------------------------
    @property
    def acks(self) -> frozenset[str]:
        """The ack types the client asked for (``a`` split on commas)."""
        acks = self._acks
        if acks is None:
            acks = self._acks = (
                frozenset(p for p in self.ack_type.split(",") if p) if self.ack_type else _NO_ACKS
            )
        return acks

    @property
    def opts(self) -> dict[str, str | bool]:
        """The ``o`` option string parsed into a dict (flags map to ``True``)."""
        if self._opts is None:
            self._opts = parse_options(self.options) if self.options else {}
        return self._opts


_NO_ACKS: frozenset[str] = frozenset()


def command_from_header(header: dict[str, Any], body: bytes) -> Command:
    """Build a :class:`Command` from a decoded header object.

    Raises :class:`CommandError` (``header malformed`` / ``unknown command``) for a header
    that decodes but cannot be a valid command; ``cid`` is attached when it could be read.
    """
    fields: dict[str, Any] = {}
    for key, value in header.items():
        name = INBOUND_ALIASES.get(key)
        if name is None:
            continue  # unknown keys are tolerated, as AMPS tolerates extra fields
        if name in _INT_FIELDS_SET:
            value = _as_int(value, key)
        elif value is not None and value.__class__ is not str:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise _malformed(header, f"field {key!r} must be a string")
            value = str(value)
        fields[name] = value
    cmd = Command(body=body, **fields)
    raw = cmd.command
    if not raw:
        raise _malformed(header, "missing command")
    canonical = COMMAND_ALIASES.get(raw)
    if canonical is None:
        err = CommandError(reasons.UNKNOWN_COMMAND, raw)
        err.cid = cmd.cid  # type: ignore[attr-defined]
        err.command = cmd  # type: ignore[attr-defined]
        raise err
    cmd.command = canonical
    if cmd.ack_type:
        unknown = [a for a in cmd.ack_type.split(",") if a and a not in ACK_TYPES]
        if unknown:
            raise _malformed(header, f"unknown ack type {unknown[0]!r}")
    return cmd


_INT_FIELDS_SET = frozenset(_INT_FIELDS)


def _as_int(value: Any, key: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise CommandError(reasons.HEADER_MALFORMED, f"field {key!r} must be a number")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise CommandError(reasons.HEADER_MALFORMED, f"field {key!r} must be an integer")


def _malformed(header: dict[str, Any], detail: str) -> CommandError:
    err = CommandError(reasons.HEADER_MALFORMED, detail)
    cid = header.get("cid", header.get("cmd_id"))
    err.cid = cid if isinstance(cid, str) else None  # type: ignore[attr-defined]
    return err


def parse_options(text: str) -> dict[str, str | bool]:
    """Parse an AMPS option string: ``replace,oof,max_backlog=5,select=[-/,+/a]``.

    Commas inside ``[...]`` or ``(...)`` belong to the value. Flags map to ``True``;
    ``name=value`` to the stripped string value. Raises ``invalid options`` for
    unbalanced brackets.
    """
    out: dict[str, str | bool] = {}
    depth = 0
    start = 0
    parts: list[str] = []
    for i, ch in enumerate(text):
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
            if depth < 0:
                raise CommandError(reasons.INVALID_OPTIONS, text)
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth != 0:
        raise CommandError(reasons.INVALID_OPTIONS, text)
    parts.append(text[start:])
    for part in parts:
        part = part.strip()
        if not part:
            continue
        name, eq, value = part.partition("=")
        out[name.strip()] = value.strip() if eq else True
    return out
