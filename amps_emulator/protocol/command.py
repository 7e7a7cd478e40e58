"""Typed inbound commands and the option-string grammar.

A :class:`Command` is what one client frame means: the canonical header fields (whatever
spelling the client used) plus the body as raw bytes. Bodies are never decoded here; the
server decodes a message body at most once, when something needs its content.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from amps_emulator.protocol import reasons
from amps_emulator.protocol.headers import ACK_TYPES, COMMAND_ALIASES
from amps_emulator.protocol.reasons import CommandError

_F = msgspec.field
# As sent: identifiers some clients send as bare numbers, and numeric fields some send quoted
# ("30") or as floats (30.0). Only the ``wire_*`` fields hold these; the decoder derives the
# typed attributes handlers read from them.
_WireId = str | int | None
_WireNum = int | float | str | None
_U64 = (1 << 64) - 1
_U32 = (1 << 32) - 1
# The typed numbers hold integers in their wire range only: finish_command checks what the
# wire_* fields give them, and these bounds what a header could give under their "~" names
# (msgspec bounds an int at 2^63-1 at most, inside the 64-bit range).
_U64Num = Annotated[int, msgspec.Meta(ge=0, le=(1 << 63) - 1)]
_U32Num = Annotated[int, msgspec.Meta(ge=0, le=_U32)]


class Command(msgspec.Struct, kw_only=True, gc=False):
    """One decoded client command. Unset fields are ``None``; ``body`` is ``bytes``.

    The header JSON is decoded straight into this struct (msgspec, in C). Each canonical
    attribute reads the spelling the official Python client uses on the wire; the
    ``*_alt`` fields catch the other documented spelling and are folded into the canonical
    attribute by ``__post_init__``, so handlers only ever look at the canonical names.

    Identifiers (``cid``, ``sub_id``, ...) and numbers (``seq``, ``expiration``, ...) arrive
    in ``wire_*`` fields, which keep what the client sent, and handlers read the typed
    attribute of the same name: ``__post_init__`` sets each id as ``str`` (a bare number as
    it prints), and :func:`finish_command` each number as an ``int`` in its wire range, or
    refuses the command (``invalid sequence``, ... for that command alone, never a dropped
    connection). A struct built directly (not decoded) sets the typed attributes itself.
    """

    command: str = _F(default="", name="c")
    body: bytes = _F(default=b"", name="~body")
    topic: str | None = _F(default=None, name="t")
    ack_type: str | None = _F(default=None, name="a")
    options: str | None = _F(default=None, name="o")
    filter: str | None = None
    bookmark: str | None = None
    sub_ids: str | None = _F(default=None, name="sids")
    orderby: str | None = None
    sow_keys: str | None = None
    client_name: str | None = None
    user_id: str | None = None
    password: str | None = _F(default=None, name="pw")
    version: str | None = None
    message_type: str | None = _F(default=None, name="mt")
    timestamp: str | None = _F(default=None, name="ts")
    lease_period: str | None = _F(default=None, name="lp")
    heartbeat: str | None = None
    auth_key: str | None = None
    status: str | None = None
    reason: str | None = None
    data_only: str | None = None
    # Typed identifiers and numbers, set from the wire_* fields below (wire names no client
    # uses).
    cid: str | None = _F(default=None, name="~cid")
    sow_key: str | None = _F(default=None, name="~k")
    correlation_id: str | None = _F(default=None, name="~x")
    sub_id: str | None = _F(default=None, name="~sub_id")
    query_id: str | None = _F(default=None, name="~query_id")
    seq: _U64Num | None = _F(default=None, name="~s")
    expiration: _U32Num | None = _F(default=None, name="~e")
    batch_size: _U32Num | None = _F(default=None, name="~batch_size")
    top_n: _U64Num | None = _F(default=None, name="~top_n")
    skip_n: _U64Num | None = _F(default=None, name="~skip_n")
    group_seq: _U64Num | None = _F(default=None, name="~gseq")
    length: _U64Num | None = _F(default=None, name="~l")
    # The same fields as sent.
    wire_cid: _WireId = _F(default=None, name="cid")
    wire_sow_key: _WireId = _F(default=None, name="k")
    wire_correlation_id: _WireId = _F(default=None, name="x")
    wire_sub_id: _WireId = _F(default=None, name="sub_id")
    wire_query_id: _WireId = _F(default=None, name="query_id")
    wire_seq: _WireNum = _F(default=None, name="s")
    wire_expiration: _WireNum = _F(default=None, name="e")
    wire_batch_size: _WireNum = _F(default=None, name="batch_size")
    wire_top_n: _WireNum = _F(default=None, name="top_n")
    wire_skip_n: _WireNum = _F(default=None, name="skip_n")
    wire_group_seq: _WireNum = _F(default=None, name="gseq")
    wire_length: _WireNum = _F(default=None, name="l")
    # Alternate spellings (long for short and short for long), folded in by __post_init__.
    command_alt: str | None = _F(default=None, name="cmd")
    cid_alt: _WireId = _F(default=None, name="cmd_id")
    topic_alt: str | None = _F(default=None, name="topic")
    ack_type_alt: str | None = _F(default=None, name="ack_type")
    seq_alt: _WireNum = _F(default=None, name="seq")
    expiration_alt: _WireNum = _F(default=None, name="expiration")
    options_alt: str | None = _F(default=None, name="opts")
    sow_key_alt: _WireId = _F(default=None, name="sow_key")
    correlation_id_alt: _WireId = _F(default=None, name="correlation_id")
    bookmark_alt: str | None = _F(default=None, name="bm")
    sub_ids_alt: str | None = _F(default=None, name="sub_ids")
    batch_size_alt: _WireNum = _F(default=None, name="bs")
    password_alt: str | None = _F(default=None, name="password")
    timestamp_alt: str | None = _F(default=None, name="timestamp")
    lease_period_alt: str | None = _F(default=None, name="lease_period")
    group_seq_alt: _WireNum = _F(default=None, name="group_seq_num")
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
            for name, alt_name in _ALT_FIELDS:
                alt = getattr(self, alt_name)
                if alt is not None and not getattr(self, name):
                    setattr(self, name, alt)
        # Typed ids: the common case (a string, or absent) costs one check per field. The
        # numbers are read (and refused) by finish_command.
        ident = self.wire_cid
        if ident is not None:
            self.cid = ident if isinstance(ident, str) else str(ident)
        ident = self.wire_sow_key
        if ident is not None:
            self.sow_key = ident if isinstance(ident, str) else str(ident)
        ident = self.wire_correlation_id
        if ident is not None:
            self.correlation_id = ident if isinstance(ident, str) else str(ident)
        ident = self.wire_sub_id
        if ident is not None:
            self.sub_id = ident if isinstance(ident, str) else str(ident)
        ident = self.wire_query_id
        if ident is not None:
            self.query_id = ident if isinstance(ident, str) else str(ident)

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
#: (field, the field of its other spelling): the alternate spelling counts when the field
#: is unset or empty
_ALT_FIELDS = tuple((name, name.removeprefix("wire_") + "_alt") for name in (
    "command", "wire_cid", "topic", "ack_type", "wire_seq", "wire_expiration", "options",
    "wire_sow_key", "wire_correlation_id", "bookmark", "sub_ids", "wire_batch_size", "password",
    "timestamp", "lease_period", "wire_group_seq", "message_type",
))
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
            err.command = cmd
        err.cid = cmd.cid
        raise err
    cmd.command = canonical
    ack_type = cmd.ack_type
    if ack_type and ack_type not in ACK_TYPES:
        unknown = [a for a in ack_type.split(",") if a and a not in ACK_TYPES]
        if unknown:
            err = CommandError(reasons.HEADER_MALFORMED, f"unknown ack type {unknown[0]!r}")
            err.cid = cmd.cid
            raise err
    sent = cmd.wire_seq
    if sent is not None:
        cmd.seq = sent if isinstance(sent, int) and 0 <= sent <= _U64 \
            else _number(cmd, sent, "s", reasons.INVALID_SEQUENCE, _U64)
    if cmd.wire_expiration is not None or cmd.wire_batch_size is not None \
            or cmd.wire_top_n is not None or cmd.wire_skip_n is not None \
            or cmd.wire_group_seq is not None or cmd.wire_length is not None:
        _read_numbers(cmd)
    return cmd


#: the less common numeric header fields, in the order they are checked: (wire field, typed
#: field, the key named in the reason, the reason, the largest value)
_NUMBERS = (
    ("wire_expiration", "expiration", "e", reasons.INVALID_EXPIRATION, _U32),
    ("wire_batch_size", "batch_size", "batch_size", reasons.INVALID_BATCH_SIZE, _U32),
    ("wire_top_n", "top_n", "top_n", reasons.INVALID_TOPN, _U64),
    ("wire_skip_n", "skip_n", "skip_n", reasons.INVALID_OPTIONS, _U64),
    ("wire_group_seq", "group_seq", "gseq", reasons.INVALID_SEQUENCE, _U64),
    ("wire_length", "length", "l", reasons.HEADER_MALFORMED, _U64),
)


def _read_numbers(cmd: Command) -> None:
    """The less common numeric fields, in order (the first bad one is refused)."""
    for wire, field, key, reason, top in _NUMBERS:
        sent = getattr(cmd, wire)
        if sent is not None:
            setattr(cmd, field, sent if isinstance(sent, int) and 0 <= sent <= top
                    else _number(cmd, sent, key, reason, top))


def _number(cmd: Command, sent: int | float | str, key: str, reason: str, top: int) -> int:
    """``sent`` as an integer in 0..``top``; anything else (an ``s`` above 2^64-1 cannot be
    journaled, sequenced or acked) fails this command alone with ``reason``."""
    value = sent if isinstance(sent, int) else _as_int(sent)
    if value is not None and 0 <= value <= top:
        return value
    shown = repr(sent if value is None else value)
    if len(shown) > 40:
        shown = shown[:40] + "..."
    err = CommandError(reason, f"{key}={shown} is not an integer in 0..{top}")
    err.command = cmd
    err.cid = cmd.cid
    raise err


def _as_int(value: float | str) -> int | None:
    """``value`` as an int when it is a whole number (``"30"``, ``30.0``), else ``None``."""
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    text = value.strip()
    if len(text) < 64 and text.isascii() and (
            text.isdigit() or text[:1] in "+-" and text[1:].isdigit()):
        return int(text)
    return None


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
