"""What one authenticated user may do: :class:`Permissions` and the :class:`TopicGrant` it hands out.

A command handler asks once, when it processes the command:

* reads (``subscribe``, ``delta_subscribe``, ``sow``, ``sow_and_subscribe``,
  ``sow_and_delta_subscribe``; on a queue also consuming and acking): :meth:`Permissions.check_read`
  for a literal topic (raises ``CommandError(not entitled)``), or, for a regex topic, nothing at
  subscribe time and :meth:`Permissions.read_grant` per concrete topic when it first has a message
  to deliver (``None`` = skip that topic silently);
* writes (``publish``, ``delta_publish``, ``sow_delete``; on a queue: publishing to it):
  :meth:`Permissions.check_write`.

A :class:`TopicGrant` carries the entitlement's filter (to AND with the subscriber's, as
parsed expressions: :meth:`TopicGrant.combined_filter`; for writes: :meth:`TopicGrant.admits`
on the incoming message, the delta itself for ``delta_publish``, each record for
``sow_delete``) and its select list (applied before the subscriber's).

A replication peer logs on with ``replication_logon`` rather than ``can_logon`` and may replicate
the records of a topic when :meth:`Permissions.may_replicate` says so (``replicated-topics``; the
default module: every topic; simple access: the topics it could publish to).

The ``message_type`` argument is part of the interface AMPS modules see; the built-in modules and
the permission-document format grant per topic whatever the type.

While entitlement is disabled (:class:`SecurityState`: SIGUSR1, ``amps-action-do-disable-entitlement``)
every check answers "allowed, unfiltered", for existing connections too; grants already handed out
stay as they were (re-enabling re-checks nothing).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from amps_emulator.protocol import reasons
from amps_emulator.protocol.filter import compile_filter, conjoin
from amps_emulator.protocol.reasons import CommandError
from amps_emulator.protocol.saferegex import SafePattern, compile_pattern

from .documents import PermissionDocument, PermissionEntry, is_regex_topic

__all__ = ["TopicGrant", "ALLOW", "Permissions", "AllowAllPermissions", "SimpleAccessPermissions",
           "DocumentPermissions", "SecurityState", "combine_filters", "may_take_over_name",
           "not_entitled"]

_CACHE_LIMIT = 10_000


def combine_filters(entitlement: str | None, subscriber: str | None) -> str | None:
    """The filter a subscription really uses: the entitlement's AND the subscriber's, joined
    as parsed expressions (:func:`protocol.filter.conjoin`), never as text: a subscriber's
    filter that does not parse on its own (``1=1) OR (1=1``) raises ``FilterError``
    (``bad filter``) instead of escaping the entitlement's. The text returned is printed
    from the joined tree; it is what the command carries on (handlers, journal, replication)."""
    if entitlement is None:
        return subscriber
    if subscriber is None or not subscriber.strip():
        return entitlement
    return conjoin(entitlement, subscriber).text


class TopicGrant:
    """Access granted to one topic: an optional filter (read or write) and select list."""

    __slots__ = ("filter_text", "select", "_fn")

    def __init__(self, filter_text: str | None = None, select: str | None = None) -> None:
        self.filter_text = filter_text
        self.select = select
        self._fn: Callable[..., bool] | None = \
            compile_filter(filter_text) if filter_text is not None else None

    @property
    def unrestricted(self) -> bool:
        return self._fn is None and self.select is None

    def admits(self, doc: Any, ctx: Any = None) -> bool:
        """Whether a decoded message body passes the entitlement filter (always, without one)."""
        if self._fn is None:
            return True
        return bool(self._fn(doc, ctx))

    def combined_filter(self, subscriber: str | None) -> str | None:
        """See :func:`combine_filters` (raises ``FilterError`` for a subscriber's bad filter)."""
        return combine_filters(self.filter_text, subscriber)

    def __repr__(self) -> str:
        return f"TopicGrant(filter={self.filter_text!r}, select={self.select!r})"


#: the grant of an unrestricted topic
ALLOW = TopicGrant()


class SecurityState:
    """The switches every connection's checks consult (SIGUSR1 / SIGUSR2, the disable/enable actions)."""

    __slots__ = ("authentication_enabled", "entitlement_enabled")

    def __init__(self) -> None:
        self.authentication_enabled = True
        self.entitlement_enabled = True


_ALWAYS_ON = SecurityState()


def not_entitled(user: str, topic: str) -> CommandError:
    """The refusal AMPS sends (the client raises ``NotEntitledException``)."""
    return CommandError(reasons.NOT_ENTITLED, f'User "{user}" not entitled to topic "{topic}".')


def may_take_over_name(current_user: str, new_user: str) -> bool:
    """A logon may take over a client name in use only when the authenticated users are the same
    (the old connection is then dropped); otherwise the logon fails with ``name in use``."""
    return current_user == new_user


class Permissions:
    """The base: public checks with a per-topic cache; subclasses say what one topic gets."""

    def __init__(self, user: str, *, can_logon: bool = True, replication_logon: bool = False,
                 state: SecurityState | None = None) -> None:
        self.user = user
        self.can_logon = can_logon
        self.replication_logon = replication_logon
        self.state = state if state is not None else _ALWAYS_ON
        self._cache: dict[tuple[str, bool], TopicGrant | None] = {}
        self._replicated_cache: dict[str, bool] = {}

    # -- what subclasses decide
    def _lookup(self, topic: str, write: bool) -> TopicGrant | None:
        raise NotImplementedError

    def _admin(self, path: str, write: bool) -> bool:
        raise NotImplementedError

    def _replicated(self, topic: str) -> bool:
        raise NotImplementedError

    # -- the checks
    def _grant(self, topic: str, write: bool) -> TopicGrant | None:
        if not self.state.entitlement_enabled:
            return ALLOW
        key = (topic, write)
        try:
            return self._cache[key]
        except KeyError:
            pass
        grant = self._lookup(topic, write)
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[key] = grant
        return grant

    def read_grant(self, message_type: str, topic: str) -> TopicGrant | None:
        """The read grant for a concrete topic, or ``None`` (not entitled). Never raises."""
        return self._grant(topic, False)

    def write_grant(self, message_type: str, topic: str) -> TopicGrant | None:
        return self._grant(topic, True)

    def check_read(self, message_type: str, topic: str) -> TopicGrant:
        """The read grant, or ``CommandError(not entitled)``."""
        grant = self._grant(topic, False)
        if grant is None:
            raise not_entitled(self.user, topic)
        return grant

    def check_write(self, message_type: str, topic: str) -> TopicGrant:
        grant = self._grant(topic, True)
        if grant is None:
            raise not_entitled(self.user, topic)
        return grant

    def check_subscribe(self, message_type: str, topic: str, *, regex: bool | None = None
                        ) -> TopicGrant | None:
        """For a subscribe / sow command: a literal topic is checked now (raises when refused);
        a regex topic (``regex`` None: decided from its characters) returns ``None``: call
        :meth:`read_grant` per concrete topic, skipping those it refuses, silently."""
        if regex is None:
            regex = is_regex_topic(topic)
        if regex:
            return None
        return self.check_read(message_type, topic)

    # queues: reading is consuming and acking; writing is publishing into the queue (its
    # DefaultPublishTopic forwarding grants nothing on that topic)
    def check_queue_consume(self, message_type: str, queue: str) -> TopicGrant:
        return self.check_read(message_type, queue)

    def check_queue_ack(self, message_type: str, queue: str) -> TopicGrant:
        return self.check_read(message_type, queue)

    def check_queue_publish(self, message_type: str, queue: str) -> TopicGrant:
        return self.check_write(message_type, queue)

    def read_filter(self, message_type: str, topic: str) -> str | None:
        grant = self.read_grant(message_type, topic)
        return grant.filter_text if grant is not None else None

    def write_filter(self, message_type: str, topic: str) -> str | None:
        grant = self.write_grant(message_type, topic)
        return grant.filter_text if grant is not None else None

    def select(self, message_type: str, topic: str) -> str | None:
        """The entitlement's select list for reading ``topic`` (applied before the subscriber's)."""
        grant = self.read_grant(message_type, topic)
        return grant.select if grant is not None else None

    def check_admin(self, path: str, *, write: bool = False) -> bool:
        """Whether the Admin resource ``path`` may be read (GET) or written."""
        if not self.state.entitlement_enabled:
            return True
        return self._admin(path, write)

    def may_replicate(self, topic: str) -> bool:
        """Whether a replication peer logged on with this identity may replicate records of
        ``topic`` into this instance (AMPS's "replication allowed", ``replicated-topics``)."""
        if not self.state.entitlement_enabled:
            return True
        cache = self._replicated_cache
        allowed = cache.get(topic)
        if allowed is None:
            if len(cache) >= _CACHE_LIMIT:
                cache.clear()
            allowed = cache[topic] = self._replicated(topic)
        return allowed


class AllowAllPermissions(Permissions):
    """``amps-default-entitlement-module``: everything allowed, nothing filtered, replication
    included."""

    def __init__(self, user: str, *, state: SecurityState | None = None) -> None:
        super().__init__(user, replication_logon=True, state=state)

    def _replicated(self, topic: str) -> bool:
        return True

    def _lookup(self, topic: str, write: bool) -> TopicGrant | None:
        return ALLOW

    def _admin(self, path: str, write: bool) -> bool:
        return True


class SimpleAccessPermissions(Permissions):
    """``libamps_simple_access_entitlement.so``: the same rules for every user. A topic is allowed
    when ``AllowedTopics`` matches it and ``DeniedTopics`` does not, for the operations in
    ``GrantedPermissions``. Admin resources are not topics: allowed. A replication peer may log
    on, and replicate the topics it could publish to."""

    def __init__(self, user: str, *, allowed: str = ".*", denied: str | None = None, read: bool = True,
                 write: bool = True, state: SecurityState | None = None) -> None:
        super().__init__(user, replication_logon=True, state=state)
        self._allowed: SafePattern = compile_pattern(allowed)
        self._denied: SafePattern | None = compile_pattern(denied) if denied is not None else None
        self._read = read
        self._write = write

    def _lookup(self, topic: str, write: bool) -> TopicGrant | None:
        if not (self._write if write else self._read):
            return None
        if self._allowed.search(topic) is None:
            return None
        if self._denied is not None and self._denied.search(topic) is not None:
            return None
        return ALLOW

    def _admin(self, path: str, write: bool) -> bool:
        return True

    def _replicated(self, topic: str) -> bool:
        return self._lookup(topic, True) is not None


def _first_match(entries: tuple[PermissionEntry, ...], name: str) -> PermissionEntry | None:
    for e in entries:
        if e.matches(name):
            return e
    return None


class DocumentPermissions(Permissions):
    """Permissions from a web-entitlements / ``file:`` document: first matching entry wins."""

    def __init__(self, doc: PermissionDocument, *, user: str | None = None,
                 state: SecurityState | None = None) -> None:
        super().__init__(user if user is not None else (doc.user_name or doc.user), can_logon=doc.logon,
                         replication_logon=doc.replication_logon, state=state)
        self.document = doc

    def _lookup(self, topic: str, write: bool) -> TopicGrant | None:
        entry = _first_match(self.document.topics, topic)
        if entry is None:
            return None
        if write:
            return TopicGrant(entry.write_filter) if entry.write else None
        if not entry.read:
            return None
        if entry.read_filter is None and entry.select is None:
            return ALLOW
        return TopicGrant(entry.read_filter, entry.select)

    def _admin(self, path: str, write: bool) -> bool:
        entry = _first_match(self.document.admin, path)
        if entry is None:
            return False
        return entry.write if write else entry.read

    def _replicated(self, topic: str) -> bool:
        """``replicated-topics``: the first entry naming the topic decides (a bare name or
        regex grants it; an object entry grants it unless its ``write`` is false); no entry,
        or no list, refuses it."""
        entry = _first_match(self.document.replicated_topics, topic)
        return entry is not None and entry.write
