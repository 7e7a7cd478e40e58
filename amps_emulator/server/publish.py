"""The message path's shared steps, below the handlers and the listeners that write through it.

``store_publish`` puts a published message into its SOW topic and prepares it for the
fan-out; client publishes (``commands``), actions and views (``views.DerivedTopics.store``)
all store through it. It needs only the turn (the SOW commits at its end), so a listener
may call it without knowing the handlers or the server.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from amps_emulator.server.delivery import UNDECODED, Message, decode_or_none

if TYPE_CHECKING:
    from amps_emulator.server.ports import Turn
    from amps_emulator.sow import Topic


def store_publish(turn: Turn, topic: Topic, msg: Message, delta: bool,
                  position: int, key: str | None = None, stamp: float | None = None) -> None:
    """Upsert (or merge, for delta_publish) a published message into its SOW topic and
    prepare ``msg`` for the fan-out: the stored body, its SowKey, the record it replaced (for
    OOF ``match``) and, for delta subscribers, what changed. ``stamp``: the time the
    transaction log recorded the message (the record's timestamp; default now)."""
    doc = msg.doc if msg.doc is not UNDECODED else decode_or_none(msg.body)
    turn.request()  # the SOW commits at the end of this turn
    if delta or key is None:
        fn = topic.delta_publish if delta else topic.publish
        result = fn(msg.body, sow_key=msg.sow_key, expiration=msg.expiration,
                    bookmark=msg.bookmark or "", position=position, doc=doc, key=key,
                    timestamp=stamp)
    else:  # the common upsert: publish() with the body decoded and the key known
        result = topic.upsert(key, msg.body, doc, msg.expiration, msg.bookmark or "", position,
                              None, stamp)
    rec = result.record
    msg.sow_key = rec.sow_key
    msg.body = rec.data
    msg.doc = rec.doc
    msg.set_previous(result.previous)  # decoded only if a subscriber reads it
    msg.key_fields = topic.delta_keys  # the delta is computed only if a delta subscriber asks
