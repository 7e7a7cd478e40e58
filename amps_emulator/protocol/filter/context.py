"""Per-message values that the AMPS message, client and information functions read."""

from __future__ import annotations

__all__ = ["MessageContext"]


class MessageContext:
    """What the current message's filter evaluation may ask about, beyond the body.

    Every attribute is optional and defaults to ``None``; a function whose value is not
    provided returns NULL.  Attribute -> function:

    ``topic`` TOPIC_NAME, ``bookmark`` BOOKMARK, ``sow_key`` SOW_KEY, ``sow_key_hash``
    SOW_KEY_HASH, ``correlation_id`` CORRELATION_ID, ``message_size`` MESSAGE_SIZE,
    ``last_updated`` LAST_UPDATED (falls back to ``timestamp``), ``last_read`` LAST_READ,
    ``last_leased`` LAST_LEASED, ``lease_count`` LEASE_COUNT, ``client_name`` CLIENT_NAME,
    ``user`` USER, ``remote_address`` REMOTE_ADDRESS, ``client_version`` CLIENT_VERSION,
    ``instance_name`` AMPS_INSTANCE_NAME, ``group_name`` AMPS_GROUP_NAME.
    ``lookup`` VALUE_LOOKUP (``lookup(name, values) -> str | None``, the loaded
    ``libamps_udf_experimental.so`` module's lookups: :mod:`~protocol.filter.modules`).
    ``timestamp`` (the message's time as UNIX seconds), ``sub_id`` and ``lease_period``
    are carried for the server's use.
    """

    __slots__ = (
        "topic", "bookmark", "sow_key", "sow_key_hash", "correlation_id", "message_size",
        "timestamp", "last_updated", "last_read", "last_leased", "lease_count", "lease_period",
        "client_name", "user", "remote_address", "client_version", "sub_id",
        "instance_name", "group_name", "lookup",
    )

    def __init__(self, topic=None, bookmark=None, sow_key=None, correlation_id=None,
                 client_name=None, timestamp=None, sub_id=None, lease_period=None, *,
                 sow_key_hash=None, message_size=None, last_updated=None, last_read=None,
                 last_leased=None, lease_count=None, user=None, remote_address=None,
                 client_version=None, instance_name=None, group_name=None, lookup=None) -> None:
        self.topic = topic
        self.bookmark = bookmark
        self.sow_key = sow_key
        self.correlation_id = correlation_id
        self.client_name = client_name
        self.timestamp = timestamp
        self.sub_id = sub_id
        self.lease_period = lease_period
        self.sow_key_hash = sow_key_hash
        self.message_size = message_size
        self.last_updated = last_updated
        self.last_read = last_read
        self.last_leased = last_leased
        self.lease_count = lease_count
        self.user = user
        self.remote_address = remote_address
        self.client_version = client_version
        self.instance_name = instance_name
        self.group_name = group_name
        self.lookup = lookup

    def __repr__(self) -> str:
        set_ = ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__
                         if getattr(self, k) is not None)
        return f"MessageContext({set_})"
