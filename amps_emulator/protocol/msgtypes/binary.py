"""``binary``: opaque bytes.

AMPS reads no fields in a binary body (docs/design/beyond-json.md A.3): the tree is ``None``, so every
identifier is NULL; a binary part of a composite message contributes nothing.  What works:
publish/subscribe, SOW topics keyed by the publisher's ``SowKey``, bookmark replay, queues --
all on the exact bytes.  Refused by AMPS (:class:`~.base.UnsupportedByType` here): delta merge
(a delta publish is stored as the literal message; a delta subscription gets full messages),
views, select lists, aggregated subscriptions and ``/AMPS/`` topics (the server never builds a
binary body).  Content filters are syntax-checked and can only see NULL.
"""

from __future__ import annotations

from .base import Capabilities, MessageCodec, Tree

__all__ = ["BinaryCodec"]


class BinaryCodec(MessageCodec):
    name = "binary"
    capabilities = Capabilities(filters=False, delta=False, views=False, select=False,
                                aggregates=False, amps_topics=False)

    def decode(self, body: bytes) -> Tree:
        return None
