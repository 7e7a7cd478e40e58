"""Replication between emulator instances (docs/design/replication.md 8.3): the link on the
``amps-replication`` transport, sans-IO.

* :mod:`.wire` -- frames (the AMPS frame codec: 4-byte length, JSON header, body), the
  handshake and its checks, and recognising a peer that is not an emulator.
* :mod:`.link` -- which records travel to a destination (Topic/MessageType/Filter, PassThrough
  by upstream Group, loop prevention by path), the sender (resync from the peer's per-publisher
  high-water marks, then live) and the receiver (duplicates dropped but acknowledged, records
  handed to an :class:`~.link.ApplyPort` with their original bookmark, conflated acks).
* :mod:`.peer_auth` -- the logon a connecting instance's hello carries, decided with the
  replication transport's Authentication/Entitlement, and the topics the peer may replicate.

AMPS's own replication protocol is proprietary: only emulators replicate with emulators.
"""

from amps_emulator.replication.link import ApplyPort, Receiver, Selection, Sender
from amps_emulator.replication.wire import PROTOCOL_VERSION, Hello, LinkRefused, NotAnEmulator

__all__ = ["PROTOCOL_VERSION", "ApplyPort", "Hello", "LinkRefused", "NotAnEmulator", "Receiver", "Selection",
           "Sender"]
