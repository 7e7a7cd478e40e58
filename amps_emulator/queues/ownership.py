"""Who owns the messages of a replicated queue on this instance (docs/design/replication.md section 4).

A distributed ``Queue`` or a ``GroupLocalQueue`` holds every message on every instance that
replicates it, but only the message's *owner* delivers it. The owner of a message entering
the queue is the instance the publish was first received by (a distributed queue), or the
queue's ``InitialOwner`` wherever it was published (a group local queue). Ownership then
moves only by a *transfer*: the owner grants another instance's request, or, with proxied
transfer enabled, an instance takes over messages whose owner is not reachable. A transfer
is journaled by the instance that decides it and replicated to every instance.

:class:`Ownership` is the state of one queue, sans-IO like the engine: it maps the positions
of the messages this instance does not own to their owner (a message not in the map is
owned here), picks the messages worth asking for, and counts transfers for the Admin.

When to ask: a non-owner asks for a message only when it has a subscription with room for it
and the message has waited longer than messages of this queue usually wait between arriving
here by replication and their replicated acknowledgement (an average this class keeps), so
an owner whose own consumers keep up is never asked. A request the owner refuses is simply
not answered; it is asked again after :data:`RETRY` seconds at the earliest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

__all__ = ["DEFAULT_WAIT", "MAX_WAIT", "RETRY", "Ownership"]

#: how long a message waits before its transfer is first asked for, before anything is measured
DEFAULT_WAIT = 0.02
#: the wait never grows beyond this (an owner that is slow to ack must not stall the others)
MAX_WAIT = 1.0
#: a transfer request not granted is repeated at most this often (seconds)
RETRY = 0.25
#: weight of a new observation in the average wait
_ALPHA = 0.2


class Ownership:
    """Ownership of the messages of one replicated queue, as seen by instance ``local``.

    ``initial_owner``: the ``InitialOwner`` of a ``GroupLocalQueue`` (None: a distributed
    queue, whose messages are owned by the instance they were published to)."""

    def __init__(self, local: str, initial_owner: str | None = None) -> None:
        self.local = local
        self.initial_owner = initial_owner
        #: position -> owner, for the queued messages this instance does not own
        self.foreign: dict[int, str] = {}
        self._arrived: dict[int, float] = {}  # position -> when a foreign message entered here
        self._asked: dict[int, float] = {}  # position -> when its transfer was last requested
        #: seconds a foreign message waits before this instance asks for it
        self.wait = DEFAULT_WAIT
        self.proxied = False  # proxied transfer enabled (Admin or action)
        self.transferred_in = 0
        self.transferred_out = 0

    # -- messages in and out -------------------------------------------------------------------
    def owner_of_new(self, origin: str | None) -> str:
        """The owner of a message entering the queue; ``origin``: the instance it was first
        published to (None: this one)."""
        if self.initial_owner is not None:
            return self.initial_owner
        return origin if origin else self.local

    def entered(self, position: int, origin: str | None, now: float) -> str:
        """A message entered the queue: note who owns it (returned)."""
        owner = self.owner_of_new(origin)
        if owner != self.local:
            self.foreign[position] = owner
            self._arrived[position] = now
        return owner

    def restore(self, owners: dict[int, str]) -> None:
        """After recovery: ``owners`` maps every message still queued to its owner."""
        self.foreign.clear()  # in place: subscriptions' eligibility reads this very dict
        self.foreign.update((p, o) for p, o in owners.items() if o != self.local)
        self._arrived = dict.fromkeys(self.foreign, 0.0)
        self._asked.clear()

    def left(self, position: int, now: float) -> None:
        """The message left the queue (acked, expired, sent at-most-once)."""
        arrived = self._arrived.pop(position, None)
        self._asked.pop(position, None)
        if self.foreign.pop(position, None) is not None and arrived:
            waited = now - arrived  # how long the owner took: the next requests wait as long
            self.wait = min(MAX_WAIT, max(0.0, (1 - _ALPHA) * self.wait + _ALPHA * waited))

    def owns(self, position: int) -> bool:
        return position not in self.foreign

    def owner(self, position: int) -> str:
        return self.foreign.get(position, self.local)

    @property
    def owned_elsewhere(self) -> int:
        return len(self.foreign)

    # -- transfers -------------------------------------------------------------------------------
    def moved(self, position: int, owner: str) -> bool:
        """A transfer of the message at ``position`` to ``owner`` (journaled here or replicated
        here). Returns True when this instance gained the message."""
        if owner == self.local:
            if self.foreign.pop(position, None) is None:
                return False
            self._arrived.pop(position, None)
            self._asked.pop(position, None)
            self.transferred_in += 1
            return True
        if position not in self.foreign:
            self.transferred_out += 1
        self.foreign[position] = owner
        self._arrived.setdefault(position, 0.0)
        return False

    def may_grant(self, position: int, reachable: Callable[[str], bool]) -> bool:
        """Whether this instance may give the message away: it owns it, or proxied transfer
        is on and its owner cannot be reached. (The first request wins: once granted the
        message is owned elsewhere and later requests find nothing to grant.)"""
        owner = self.foreign.get(position)
        return owner is None or (self.proxied and not reachable(owner))

    def to_request(self, candidates: Iterable[int], room: int, now: float,
                   reachable: Callable[[str], bool],
                   wanted: Callable[[int], bool] | None = None) -> tuple[dict[str, list[int]], list[int]]:
        """Of the ``candidates`` (positions, oldest first; default: every message owned
        elsewhere), those to ask their owner for, by owner, and those to claim at once
        (proxied transfer, owner unreachable); at most ``room`` in all (what this instance's
        subscriptions can take). ``wanted(position)``: whether the message is available here
        and some subscription with room would take it (asked last: it is the dear test)."""
        ask: dict[str, list[int]] = {}
        claim: list[int] = []
        # requests still in flight will fill the room if granted: ask for no more than the rest
        room -= sum(1 for p, t in self._asked.items() if now - t < RETRY and p in self.foreign)
        if room <= 0:
            return ask, claim
        n = 0
        for pos in candidates:
            owner = self.foreign.get(pos)
            if owner is None:
                continue
            if now - self._arrived.get(pos, 0.0) < self.wait:
                continue  # its owner may still deliver it
            up = reachable(owner)
            if not up and not self.proxied:
                continue
            if up and now - self._asked.get(pos, -RETRY) < RETRY:
                continue
            if wanted is not None and not wanted(pos):
                continue
            if not up:
                claim.append(pos)
            else:
                self._asked[pos] = now
                ask.setdefault(owner, []).append(pos)
            n += 1
            if n >= room:
                break
        return ask, claim

    def next_request_at(self, now: float) -> float | None:
        """When :meth:`to_request` may find something new (None: nothing owned elsewhere)."""
        if not self.foreign:
            return None
        return now + max(min(self.wait, RETRY), 0.005)
