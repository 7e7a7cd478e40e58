"""Header field names of the AMPS "amps" protocol (JSON header, raw body).

Clients may spell a field long (``topic``) or short (``t``). Inbound, both spellings land
on one canonical attribute of :class:`protocol.command.Command` (its field table is the
alias table). Outbound,
the server only ever emits keys from :data:`CLIENT_KNOWN_KEYS`: the official C client's
header scanner recognises keys by length and one or two characters, so any other key may
be silently mis-mapped to a different field (``docs/design/amps-wire-protocol.md`` 2.2).
"""

from __future__ import annotations

# Every key the official client's parser understands (docs/design/amps-wire-protocol.md 2.2).
CLIENT_KNOWN_KEYS: frozenset[str] = frozenset(
    "c t s a e o l k x pw bs ts bm lp mt cmd cid ack seq opts sids gseq topic top_n "
    "cmd_id filter status reason sub_id matches user_id sub_ids version ack_type auth_key "
    "bookmark query_id sow_keys heartbeat expiration batch_size client_name topic_matches "
    "group_seq_num records_deleted records_updated records_inserted records_returned".split()
)

# Commands the server accepts, with their short forms normalised.
COMMAND_ALIASES: dict[str, str] = {
    "p": "publish",
    "publish": "publish",
    "delta_publish": "delta_publish",
    "logon": "logon",
    "subscribe": "subscribe",
    "delta_subscribe": "delta_subscribe",
    "sow": "sow",
    "sow_and_subscribe": "sow_and_subscribe",
    "sow_and_delta_subscribe": "sow_and_delta_subscribe",
    "sow_delete": "sow_delete",
    "unsubscribe": "unsubscribe",
    "flush": "flush",
    "heartbeat": "heartbeat",
    "start_timer": "start_timer",
    "stop_timer": "stop_timer",
}

ACK_TYPES: frozenset[str] = frozenset(
    ("received", "parsed", "processed", "persisted", "completed", "stats")
)
