"""Header field names of the AMPS "amps" protocol (JSON header, raw body).

Clients may spell a field long (``topic``) or short (``t``). Inbound, every spelling is
mapped onto one canonical attribute name of :class:`protocol.command.Command`. Outbound,
the server only ever emits keys from :data:`CLIENT_KNOWN_KEYS`: the official C client's
header scanner recognises keys by length and one or two characters, so any other key may
be silently mis-mapped to a different field (``shared/docs/amps-wire-protocol.md`` 2.2).
"""

from __future__ import annotations

# wire spelling -> canonical Command attribute
INBOUND_ALIASES: dict[str, str] = {
    "c": "command", "cmd": "command",
    "cid": "cid", "cmd_id": "cid",
    "t": "topic", "topic": "topic",
    "a": "ack_type", "ack_type": "ack_type", "ack": "ack_type",
    "s": "seq", "seq": "seq",
    "e": "expiration", "expiration": "expiration",
    "o": "options", "opts": "options",
    "k": "sow_key", "sow_key": "sow_key",
    "x": "correlation_id", "correlation_id": "correlation_id",
    "filter": "filter", "f": "filter",
    "bookmark": "bookmark", "bm": "bookmark",
    "sub_id": "sub_id", "sid": "sub_id",
    "sids": "sub_ids", "sub_ids": "sub_ids",
    "query_id": "query_id", "qid": "query_id",
    "bs": "batch_size", "batch_size": "batch_size",
    "top_n": "top_n",
    "skip_n": "skip_n",
    "orderby": "orderby",
    "sow_keys": "sow_keys",
    "client_name": "client_name",
    "user_id": "user_id",
    "pw": "password", "password": "password",
    "version": "version", "v": "version",
    "mt": "message_type", "message_type": "message_type",
    "ts": "timestamp", "timestamp": "timestamp",
    "lp": "lease_period", "lease_period": "lease_period",
    "gseq": "group_seq", "group_seq_num": "group_seq",
    "l": "length", "msg_len": "length",
    "heartbeat": "heartbeat", "hb": "heartbeat",
    "auth_key": "auth_key",
    "status": "status",
    "reason": "reason",
    "data_only": "data_only",
}

# Every key the official client's parser understands (amps-wire-protocol.md 2.2).
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
