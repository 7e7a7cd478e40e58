"""A SOW topic's ``Preprocessing`` and ``Enrichment``: fields computed from expressions and
written into every message published to the topic (User Guide, "State of the World Message
Enrichment").

The message path (:func:`server.messaging.message_path.publish_message`) runs them on a
publish or delta publish before anything else happens to it:

1. :meth:`Enrichment.preprocess`: the ``Preprocessing`` fields, on the message alone; the
   SowKey is computed from the result, so a ``Key`` field may be one of them;
2. :meth:`Enrichment.enrich`: the ``Enrichment`` fields, which may also read the record the
   message replaces (``OF PREVIOUS``); for a delta publish this is before the merge, so a
   field the delta lacks reads NULL ``OF CURRENT``.

The result is what the transaction log records, the SOW stores, replication carries and
subscribers receive; records that come back from the log (recovery) or over replication are
therefore never enriched a second time. A ``ConflatedTopic`` applies its own ``Enrichment``
(without ``OF PREVIOUS``) to the records it publishes.

The fields are parsed and evaluated by :class:`protocol.filter.construct.FieldSet` (the
filter language's evaluator) and written into the body's field tree: for JSON the decoded
document, for the text types (fix, nvfix, xml) the tree that keeps each field's own text, so
that the fields no expression writes keep their exact spelling; the type's codec writes the
body back. A message that is not an object of fields (not readable, a JSON array) is left
as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from amps_emulator.protocol.filter import MessageContext
from amps_emulator.protocol.filter.construct import FieldSet, write_field
from amps_emulator.protocol.msgtypes import CodecError, MessageCodec
from amps_emulator.protocol.reasons import SOW_STORE_FAILED, CommandError

__all__ = ["Enrichment"]

_json_encode = msgspec.json.encode


class Enrichment:
    """The ``Preprocessing`` and ``Enrichment`` field lists of one topic (either may be
    empty), for bodies of the type ``codec`` reads (None: json)."""

    __slots__ = ("pre", "post", "codec", "uses_context", "reads_previous")

    def __init__(self, preprocessing: Sequence[str], enrichment: Sequence[str],
                 codec: MessageCodec | None = None) -> None:
        self.pre = FieldSet(preprocessing, previous=False) if preprocessing else None
        self.post = FieldSet(enrichment, previous=True) if enrichment else None
        self.codec = codec
        #: whether some field reads the message's context (TOPIC_NAME(), CLIENT_NAME(), ...)
        self.uses_context = any(f is not None and f.uses_context for f in (self.pre, self.post))
        #: whether some Enrichment field reads ``OF PREVIOUS`` (the stored record is looked up)
        self.reads_previous = self.post is not None and self.post.reads_previous

    def preprocess(self, body: bytes, doc: Any, ctx: MessageContext | None = None
                   ) -> tuple[bytes, Any]:
        """The body and document after the ``Preprocessing`` fields (unchanged if none)."""
        if self.pre is None:
            return body, doc
        return self._apply(self.pre, body, doc, None, ctx)

    def enrich(self, body: bytes, doc: Any, previous: Any = None,
               ctx: MessageContext | None = None) -> tuple[bytes, Any]:
        """The body and document after the ``Enrichment`` fields; ``previous``: the document
        of the record the message replaces (None: there is none)."""
        if self.post is None:
            return body, doc
        return self._apply(self.post, body, doc, previous, ctx)

    def _apply(self, fields: FieldSet, body: bytes, doc: Any, previous: Any,
               ctx: MessageContext | None) -> tuple[bytes, Any]:
        if type(doc) is not dict:
            return body, doc  # nothing to write fields into
        results = fields.evaluate(doc, previous, ctx)
        codec = self.codec
        try:
            if codec is None:
                out = dict(doc)  # (written copy-on-write: the caller's document stays as it was)
                for target, value, optional in results:
                    write_field(out, target, value, optional)
                return _json_encode(out), out
            tree = codec.text_tree(bytes(body))
            if type(tree) is not dict:
                return body, doc
            for target, value, optional in results:
                write_field(tree, target, value, optional)
            data = codec.encode(tree)
            return data, codec.decode(data)
        except (CodecError, msgspec.EncodeError, OverflowError, TypeError, ValueError) as exc:
            raise CommandError(SOW_STORE_FAILED, "the enriched message cannot be written as "
                               f"{codec.name if codec is not None else 'json'}: {exc}") from None
