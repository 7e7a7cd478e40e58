"""Typed inbound commands and the option-string grammar.

A :class:`Command` is what one client frame means: the canonical header fields (whatever
spelling the client used) plus the body as raw bytes. Bodies are never decoded here; the
server decodes a message body at most once, when something needs its content.
"""

from __future__ import annotations

from typing import Any

import msgspec

from amps_emulator.protocol import reasons
from amps_emulator.protocol.headers import ACK_TYPES, COMMAND_ALIASES
from amps_emulator.protocol.reasons import CommandError

_F = msgspec.field
_Id = str | int | None  # identifiers some clients send as bare numbers
# Numeric header fields: kept as sent when not a whole number (``finish_command`` refuses them
# with an ``invalid ...`` reason for that command alone, never a dropped connection).
_Num = int | float | str | None


class Command(msgspec.Struct, kw_only=True, gc=False):
    """One decoded client command. Unset fields are ``None``; ``body`` is ``bytes``.

    The header JSON is decoded straight into this struct (msgspec, in C). Each canonical
    attribute reads the spelling the official Python client uses on the wire; the
    ``*_alt`` fields catch the other documented spelling and are folded into the canonical
    attribute by ``__post_init__``, so handlers only ever look at the canonical names.
    """

    command: str = _F(default="", name="c")
    body: bytes = _F(default=b"", name="~body")
    cid: _Id = None
    topic: str | None = _F(default=None, name="t")
    ack_type: str | None = _F(default=None, name="a")
    seq: _Num = _F(default=None, name="s")
    expiration: _Num = _F(default=None, name="e")
    options: str | None = _F(default=None, name="o")
    sow_key: _Id = _F(default=None, name="k")
    correlation_id: _Id = _F(default=None, name="x")
    filter: str | None = None
    bookmark: str | None = None
    sub_id: _Id = None
    sub_ids: str | None = _F(default=None, name="sids")
    query_id: _Id = None
    batch_size: _Num = None
    top_n: _Num = None
    skip_n: _Num = None
    orderby: str | None = None
    sow_keys: str | None = None
    client_name: str | None = None
    user_id: str | None = None
    password: str | None = _F(default=None, name="pw")
    version: str | None = None
    message_type: str | None = _F(default=None, name="mt")
    timestamp: str | None = _F(default=None, name="ts")
    lease_period: str | None = _F(default=None, name="lp")
    group_seq: _Num = _F(default=None, name="gseq")
    length: _Num = _F(default=None, name="l")
    heartbeat: str | None = None
    auth_key: str | None = None
    status: str | None = None
    reason: str | None = None
    data_only: str | None = None
    # Alternate spellings (long for short and short for long), folded in by __post_init__.
    command_alt: str | None = _F(default=None, name="cmd")
    cid_alt: _Id = _F(default=None, name="cmd_id")
    topic_alt: str | None = _F(default=None, name="topic")
    ack_type_alt: str | None = _F(default=None, name="ack_type")
    seq_alt: _Num = _F(default=None, name="seq")
    expiration_alt: _Num = _F(default=None, name="expiration")
    options_alt: str | None = _F(default=None, name="opts")
    sow_key_alt: _Id = _F(default=None, name="sow_key")
    correlation_id_alt: _Id = _F(default=None, name="correlation_id")
    bookmark_alt: str | None = _F(default=None, name="bm")
    sub_ids_alt: str | None = _F(default=None, name="sub_ids")
    batch_size_alt: _Num = _F(default=None, name="bs")
    password_alt: str | None = _F(default=None, name="password")
    timestamp_alt: str | None = _F(default=None, name="timestamp")
    lease_period_alt: str | None = _F(default=None, name="lease_period")
    group_seq_alt: _Num = _F(default=None, name="group_seq_num")
    message_type_alt: str | None = _F(default=None, name="message_type")
    # Derived views, computed on first use (wire names no client uses).
    cached_acks: frozenset[str] | None = _F(default=None, name="~acks")
    cached_opts: dict[str, str | bool] | None = _F(default=None, name="~opts")

    def __post_init__(self) -> None:
        if self.command_alt is not None or self.cid_alt is not None or self.topic_alt is not None \
                or self.ack_type_alt is not None or self.seq_alt is not None \
                or self.expiration_alt is not None or self.options_alt is not None \
                or self.sow_key_alt is not None or self.correlation_id_alt is not None \
                or self.bookmark_alt is not None or self.sub_ids_alt is not None \
                or self.batch_size_alt is not None or self.password_alt is not None \
                or self.timestamp_alt is not None or self.lease_period_alt is not None \
                or self.group_seq_alt is not None or self.message_type_alt is not None:
            for name in _ALT_FIELDS:
                alt = getattr(self, name + "_alt")
                if alt is not None and not getattr(self, name):
                    setattr(self, name, alt)
        # Numbers may arrive quoted ("e":"30") and ids as bare numbers; the common case
        # (already the right type or absent) costs one check per field.
        if self.seq is not None and self.seq.__class__ is not int:
            self.seq = _as_int(self.seq, "s")
        if self.expiration is not None and self.expiration.__class__ is not int:
            self.expiration = _as_int(self.expiration, "e")
        if self.batch_size is not None and self.batch_size.__class__ is not int:
            self.batch_size = _as_int(self.batch_size, "batch_size")
        if self.top_n is not None and self.top_n.__class__ is not int:
            self.top_n = _as_int(self.top_n, "top_n")
        if self.skip_n is not None and self.skip_n.__class__ is not int:
            self.skip_n = _as_int(self.skip_n, "skip_n")
        if self.group_seq is not None and self.group_seq.__class__ is not int:
            self.group_seq = _as_int(self.group_seq, "gseq")
        if self.length is not None and self.length.__class__ is not int:
            self.length = _as_int(self.length, "l")
        if self.cid is not None and self.cid.__class__ is not str:
            self.cid = str(self.cid)
        if self.sow_key is not None and self.sow_key.__class__ is not str:
            self.sow_key = str(self.sow_key)
        if self.correlation_id is not None and self.correlation_id.__class__ is not str:
            self.correlation_id = str(self.correlation_id)
        if self.sub_id is not None and self.sub_id.__class__ is not str:
            self.sub_id = str(self.sub_id)
        if self.query_id is not None and self.query_id.__class__ is not str:
            self.query_id = str(self.query_id)

    # -- derived views ------------------------------------------------------------
    @property
    def acks(self) -> frozenset[str]:
        """The ack types the client asked for (``a`` split on commas)."""
        acks = self.cached_acks
        if acks is None:
            ack_type = self.ack_type
            if not ack_type:
                acks = _NO_ACKS
            else:  # one shared frozenset per distinct ``a`` text (immutable, so shareable)
                acks = _ACK_SETS.get(ack_type)
                if acks is None:
                    if len(_ACK_SETS) > 256:
                        _ACK_SETS.clear()
                    acks = _ACK_SETS[ack_type] = frozenset(p for p in ack_type.split(",") if p)
            self.cached_acks = acks
        return acks

    @property
    def opts(self) -> dict[str, str | bool]:
        """The ``o`` option string parsed into a dict (flags map to ``True``)."""
        if self.cached_opts is None:
            self.cached_opts = parse_options(self.options) if self.options else {}
        return self.cached_opts


_NO_ACKS: frozenset[str] = frozenset()
_ACK_SETS: dict[str, frozenset[str]] = {}
_ALT_FIELDS = (
    "command", "cid", "topic", "ack_type", "seq", "expiration", "options", "sow_key",
    "correlation_id", "bookmark", "sub_ids", "batch_size", "password", "timestamp",
    "lease_period", "group_seq", "message_type",
)
decode_header = msgspec.json.Decoder(Command).decode


def finish_command(cmd: Command, body: bytes) -> Command:
    """Attach the body and normalise the command name; reject unknown commands and acks."""
    cmd.body = body
    raw = cmd.command
    canonical = COMMAND_ALIASES.get(raw)
    if canonical is None:
        if not raw:
            err = CommandError(reasons.HEADER_MALFORMED, "missing command")
        else:
            err = CommandError(reasons.UNKNOWN_COMMAND, raw)
            err.command = cmd  # type: ignore[attr-defined]
        err.cid = cmd.cid  # type: ignore[attr-defined]
        raise err
    cmd.command = canonical
    ack_type = cmd.ack_type
    if ack_type and ack_type not in ACK_TYPES:
        unknown = [a for a in ack_type.split(",") if a and a not in ACK_TYPES]
        if unknown:
            err = CommandError(reasons.HEADER_MALFORMED, f"unknown ack type {unknown[0]!r}")
            err.cid = cmd.cid  # type: ignore[attr-defined]
            raise err
    seq = cmd.seq
    if seq is not None and (seq.__class__ is not int or not 0 <= seq <= _U64) \
            or cmd.expiration is not None or cmd.batch_size is not None \
            or cmd.top_n is not None or cmd.skip_n is not None or cmd.group_seq is not None \
            or cmd.length is not None:
        check_numbers(cmd)
    return cmd


def _as_int(value: Any, key: str) -> Any:
    """``value`` as an int when it is a whole number (``"30"``, ``30.0``); else unchanged,
    for :func:`check_numbers` to refuse."""
    if value.__class__ is float and value.is_integer():
        return int(value)
    if value.__class__ is str:
        text = value.strip()
        if len(text) < 64 and text.isascii() and (
                text.isdigit() or text[:1] in "+-" and text[1:].isdigit()):
            return int(text)
    return value


_U64 = (1 << 64) - 1
_U32 = (1 << 32) - 1
#: (attribute, wire key, reason, largest value) of every numeric header field
_NUMBERS = (
    ("seq", "s", reasons.INVALID_SEQUENCE, _U64),
    ("expiration", "e", reasons.INVALID_EXPIRATION, _U32),
    ("batch_size", "batch_size", reasons.INVALID_BATCH_SIZE, _U32),
    ("top_n", "top_n", reasons.INVALID_TOPN, _U64),
    ("skip_n", "skip_n", reasons.INVALID_OPTIONS, _U64),
    ("group_seq", "gseq", reasons.INVALID_SEQUENCE, _U64),
    ("length", "l", reasons.HEADER_MALFORMED, _U64),
)


def check_numbers(cmd: Command) -> None:
    """Refuse a command whose numeric fields are not integers in their wire range (an ``s``
    above 2^64-1 cannot be journaled, sequenced or acked)."""
    for attr, key, reason, top in _NUMBERS:
        value = getattr(cmd, attr)
        if value is not None and (value.__class__ is not int or not 0 <= value <= top):
            shown = repr(value)
            if len(shown) > 40:
                shown = shown[:40] + "..."
            err = CommandError(reason, f"{key}={shown} is not an integer in 0..{top}")
            err.command = cmd  # type: ignore[attr-defined]
            err.cid = cmd.cid  # type: ignore[attr-defined]
            raise err


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
