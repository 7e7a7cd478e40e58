"""A published message as delivery sees it: its headers, its body decoded at most once, and what
the SOW record it replaced makes of it (the previous document, the delta)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from amps_emulator.protocol.filter import MessageContext
from amps_emulator.protocol.msgtypes import CodecError
from amps_emulator.protocol.topics import display_name
from amps_emulator.sow import delta_message

__all__ = ["UNDECODED", "Message", "decode_or_none", "encode_json"]

_decode = msgspec.json.decode
encode_json = msgspec.json.encode
#: a body not decoded yet (``Message.doc``), or a message not published to a SOW topic
#: (``Message.previous_doc``)
UNDECODED: Any = object()
_LAZY: Any = object()  # Message.previous_doc: read from _previous_rec on first use


def decode_or_none(body: bytes) -> Any:
    try:
        return _decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):  # too deep: no document
        return None



class Message:
    """What the fan-out needs to know about one published message."""

    __slots__ = ("topic", "body", "bookmark", "correlation_id", "sow_key", "expiration",
                 "client_name", "doc", "_previous_doc", "_previous_rec", "delta_body",
                 "delta_empty", "key_fields", "timestamp", "encode")

    # Positional arguments allowed (in this order): the publish hot path passes them so.
    def __init__(self, topic: str, body: bytes, bookmark: str | None = None,
                 correlation_id: str | None = None, sow_key: str | None = None,
                 expiration: int | None = None, client_name: str | None = None,
                 doc: Any = UNDECODED) -> None:
        self.topic = topic
        self.body = body
        self.bookmark = bookmark
        self.correlation_id = correlation_id
        self.sow_key = sow_key
        self.expiration = expiration
        self.client_name = client_name
        self.doc = doc
        self._previous_doc: Any = UNDECODED  # see previous_doc
        self._previous_rec: Any = None  # the replaced record, its doc not yet read
        self.delta_body: bytes | None = None  # what delta subscribers get (None: full body)
        self.delta_empty = False  # the delta changes nothing but the key
        self.key_fields: tuple[str, ...] | None = None  # set for SOW topics: deltas possible
        #: what writes the delta (the codec of the topic's type; JSON by default)
        self.encode: Callable[[Any], bytes] = encode_json
        #: when the publish was processed (µs since the epoch; the journal record's time when
        #: recorded): the ``ts`` of every delivery, SOW record and replay of this message
        self.timestamp: int | None = None

    @property
    def previous_doc(self) -> Any:
        """The body of the SOW record this message replaced (``None``: no record was
        replaced; ``UNDECODED``: not a SOW publish).  Decoded on first use only: most
        publishes have no OOF or delta subscriber that reads it."""
        d = self._previous_doc
        if d is _LAZY:
            d = self._previous_doc = self._previous_rec.doc
            self._previous_rec = None
        return d

    @previous_doc.setter
    def previous_doc(self, value: Any) -> None:
        self._previous_doc = value
        self._previous_rec = None

    def set_previous(self, rec: Any) -> None:
        """The SOW record (a :class:`sow.Record`, or ``None``) this message replaced; its
        body is decoded when :attr:`previous_doc` is first read."""
        if rec is None:
            self._previous_doc = None
        else:
            self._previous_doc = _LAZY
            self._previous_rec = rec

    def delta(self) -> bytes | None:
        """The changed fields plus the key, for delta subscribers (None: send the whole
        message, e.g. a new record). Computed once, on first use."""
        if self.delta_body is None and self.key_fields is not None \
                and self.previous_doc is not UNDECODED and self.previous_doc is not None:
            change, changed = delta_message(self.previous_doc, self.doc, self.key_fields)
            try:
                self.delta_body = self.encode(change)
            except CodecError:  # the type cannot write this delta: the whole message goes
                return None
            self.delta_empty = not changed
        return self.delta_body

    def context(self) -> MessageContext:
        return MessageContext(topic=display_name(self.topic), bookmark=self.bookmark, sow_key=self.sow_key,
                              correlation_id=self.correlation_id, client_name=self.client_name)
