"""The one catalogue of AMPS failure reasons the emulator sends to clients.

Every client-visible ``reason`` string lives here, spelled exactly as AMPS spells it, so
that the official client maps each to the same exception type it raises against AMPS
(see ``docs/design/amps-wire-protocol.md`` section 11). Code elsewhere raises
:class:`CommandError` with one of these constants; the server turns it into a failure ack.
"""

from __future__ import annotations

# Reasons that the official client maps to specific exception classes.
BAD_FILTER = "bad filter"  # BadFilterException
BAD_REGEX_TOPIC = "bad regex topic"  # BadRegexTopicException
REGEX_TOPIC_NOT_SUPPORTED = "regex topic not supported"  # BadRegexTopicException
BAD_SOW_KEY = "bad sow key"  # BadSowKeyException
INVALID_TOPIC = "invalid topic"  # InvalidTopicException
NOT_ENTITLED = "not entitled"  # NotEntitledException
NAME_IN_USE = "name in use"  # NameInUseException
AUTH_FAILURE = "auth failure"  # AuthenticationException
LOGON_REQUIRED = "logon required"  # LogonRequiredException
SUBID_IN_USE = "subid in use"  # SubidInUseException
INVALID_BOOKMARK = "invalid bookmark"  # InvalidBookmarkException
INVALID_SUBID = "invalid subid"  # InvalidSubIdException
INVALID_OPTIONS = "invalid options"  # InvalidOptionsException
INVALID_ORDER_BY = "invalid order by"  # InvalidOrderByException
INVALID_MESSAGE_TYPE = "invalid message type"  # CommandException
ORDERBY_TOO_LARGE = "orderby too large"  # CommandException
SOW_STORE_FAILED = "sow store failed"  # PublishException
TX_STORE_FAILURE = "tx store failure"  # PublishException
TX_LOG_NOT_FOUND = "tx log not found"  # PublishException
TXN_REPLAY_FAILED = "txn replay failed"  # ReplayFailedException

# Reasons that reach the application as a generic CommandException.
DUPLICATE_LOGON = "duplicate logon"
MISSING_FIELDS = "missing fields"
UNKNOWN_COMMAND = "unknown command"
UNKNOWN_ERROR = "unknown error"
INVALID_BATCH_SIZE = "invalid batch size"
INVALID_TOPN = "invalid top_n"
HEADER_MALFORMED = "header malformed"
MESSAGE_TOO_LARGE = "message too large"
INVALID_SEQUENCE = "invalid sequence"  # ``s`` not an integer in 0..2^64-1
INVALID_EXPIRATION = "invalid expiration"  # ``e`` not an integer in 0..2^32-1

# Out-of-focus reasons (``reason`` on ``oof`` messages).
OOF_MATCH = "match"
OOF_DELETED = "deleted"
OOF_EXPIRED = "expired"
OOF_ENTITLEMENT = "entitlement"

# Reasons a server gives when it closes a connection (logged, not sent).
DISCONNECT_SLOW_CLIENT = "slow client"
DISCONNECT_HEARTBEAT = "heartbeat timeout"
DISCONNECT_NAME_IN_USE = "name in use"
DISCONNECT_PROTOCOL = "protocol error"


class CommandError(Exception):
    """A command that cannot be carried out; becomes a failure ack with ``reason``."""

    #: the ``cid`` the failure ack answers, when the frame got far enough to show one
    cid: str | None = None
    #: the decoded command (a ``protocol.command.Command``) when decoding got that far
    command: object = None

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail
