"""SOW message expiration: deadlines and the expiry index.

Rules (User Guide, "SOW Message Expiration" / "Setting Per-Message Lifetime"):

* The deadline is computed when a publish or delta publish is applied and stored with the
  record as an absolute UNIX time, so it survives restarts and config changes; every update
  resets it.
* A per-message expiration ``e`` (seconds) overrides the topic's ``Expiration``; ``e = 0``
  means "never expires".  Without ``e`` the topic's default lifetime applies (none when the
  topic says ``enabled`` or has no expiration).
* An ``e`` that is not a number is refused with ``CommandError(header malformed)``.
* The per-message deadline is stored even when the topic has expiration disabled (AMPS keeps
  it), but records only expire while expiration is enabled for the topic.

Expiry index: one ordered table per topic whose keys are ``u64 big-endian microseconds +
SowKey``, so "everything due by now" is one range scan from the start and the next deadline
is the first key. An active cycle removes what is due, and a read never returns an expired
record even before the cycle ran: queries skip expired records and ``publish`` over an expired
record treats it as gone.
"""

from __future__ import annotations

from amps_emulator.protocol.reasons import HEADER_MALFORMED, CommandError

__all__ = ["deadline", "expiry_key", "expiry_bound", "deadline_of_key", "skey_of_key"]

_U64_MAX = (1 << 64) - 1


def deadline(now: float, message_expiration: float | int | str | None,
             topic_default: float | None) -> float | None:
    """Absolute expiration time for a record published at ``now`` (``None`` = never)."""
    e = message_expiration
    if e is not None and e != "":
        try:
            e = float(e)
        except (TypeError, ValueError):
            raise CommandError(HEADER_MALFORMED, f"expiration {e!r} is not a number") from None
        if e != e:
            raise CommandError(HEADER_MALFORMED, "expiration is NaN")
        if e <= 0:
            return None
        return now + e
    if topic_default:
        return now + topic_default
    return None


def _us(t: float) -> int:
    v = round(t * 1_000_000)
    return 0 if v < 0 else (_U64_MAX if v > _U64_MAX else v)


def expiry_key(when: float, skey: str) -> bytes:
    return _us(when).to_bytes(8, "big") + skey.encode()


def expiry_bound(now: float) -> bytes:
    """Exclusive upper bound of the keys due at ``now`` (deadline <= now)."""
    return (_us(now) + 1).to_bytes(8, "big") if _us(now) < _U64_MAX else b"\xff" * 9


def deadline_of_key(key: bytes) -> float:
    return int.from_bytes(key[:8], "big") / 1_000_000


def skey_of_key(key: bytes) -> str:
    return key[8:].decode()
