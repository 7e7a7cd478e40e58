"""Subscription routing: which subscriptions a message on a topic may go to.

Subscriptions name a literal topic or a regular expression (PCRE-style, matching anywhere in
the topic name unless anchored, as AMPS does). Literal subscriptions are indexed by topic;
regex subscriptions are tested once per distinct topic and the answer is cached until the
set of subscriptions changes. Content filters are applied by the caller, which decodes the
message body at most once however many subscriptions test it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from amps_emulator.protocol.topics import (
    compile_topic_regex,
    is_regex_topic,
    split_topic,
)
from amps_emulator.sow.query import Select, compose_select, parse_select, selection

if TYPE_CHECKING:
    from amps_emulator.auth import Permissions, TopicGrant

_CACHE_LIMIT = 50_000
#: the server's own event topics (``/AMPS/ClientStatus``, ...: :mod:`server.services.event_topics`)
INTERNAL_PREFIX = "/AMPS/"


class ReadEntitlement:
    """A subscriber's read permissions (:class:`auth.Permissions`) for its message type."""

    __slots__ = ("permissions", "message_type", "regex", "_selects")

    def __init__(self, permissions: Permissions, message_type: str, regex: bool) -> None:
        self.permissions = permissions
        self.message_type = message_type
        self.regex = regex  # a regex subscription: concrete topics unentitled are skipped
        self._selects: dict[str, Select | None] = {}

    def grant(self, topic: str) -> TopicGrant | None:
        """The read grant for a concrete topic key (cached by the permissions), None: skip
        it. Permissions name topics as clients do: the key's name, of this type."""
        return self.permissions.read_grant(self.message_type, split_topic(topic)[0])

    def select(self, grant: TopicGrant, own: Select | None) -> Select | None:
        """The select list of a delivery under ``grant`` to a subscriber whose own list is
        ``own``: the entitlement's first, then the subscriber's (a literal topic has them
        composed already, in the subscription's own list)."""
        text = grant.select
        if text is None:
            return own
        try:
            return self._selects[text]
        except KeyError:
            mine = parse_select(text)
            sel = self._selects[text] = compose_select(mine, own) if mine is not None else own
            return sel


class Subscription:
    """One live subscription of one connection."""

    __slots__ = (
        "conn", "sub_id", "topic", "regex", "filter", "options", "delta", "cursor", "queue",
        "prefix", "_live", "select", "conflator", "queried", "message_type", "_entitlement",
        "internal", "withheld", "queue_filter",
    )

    #: moves whenever a subscription's :attr:`live` or :attr:`entitlement` is set, the two
    #: things that change how it is delivered to once it is routed: what the fan-out
    #: derived from a set of subscriptions (``Router.plans``) is derived again then
    revision: ClassVar[int] = 0

    def __init__(self, conn: Any, sub_id: str, topic: str, filter: Callable[..., bool] | None,
                 options: dict[str, Any], delta: bool = False) -> None:
        self.conn = conn
        self.sub_id = sub_id
        self.topic = topic
        name, self.message_type = split_topic(topic)  # a regex covers topics of its type
        # non_regex_topic: the topic is a name, whatever characters it holds
        self.regex = compile_topic_regex(name) if is_regex_topic(name) \
            and "non_regex_topic" not in options else None
        #: a regex reaches the /AMPS/ event topics only when it names them (``.*`` does not:
        #: an application's catch-all subscription does not get the server's events)
        self.internal = name.lstrip("^").startswith(INTERNAL_PREFIX)
        self.filter = filter
        self.options = options
        self.delta = delta
        self.cursor: Any = None  # server.replay.Cursor for bookmark subscriptions
        self.queue: Any = None  # server.queue_service.ConfiguredQueue for queue subscriptions
        #: a queue subscription's content filter over a message's position
        #: (server.services.queue_held.HeldFilter: one per subscription, whoever asks it)
        self.queue_filter: Any = None
        self.prefix: bytes | None = None  # queue deliveries: the header up to the bookmark
        #: state kept from the query's snapshot on (server.live.LiveState: a paginated
        #: window, an aggregated subscription's groups); it decides what is delivered
        self._live: Any = None
        self.conflator: Any = None  # server.conflation.Conflator (conflation=...)
        self.queried = False  # entered by sow_and_subscribe: the client holds its query's records
        #: what the subscriber may read, when security is configured (server.entitle): a
        #: regex topic's concrete topics are checked on delivery, an update leaving the
        #: read filter is an OOF with reason ``entitlement``
        self._entitlement: ReadEntitlement | None = None
        #: the ``select=[...]`` list applied to every delivery (None: whole messages)
        self.select: Select | None = selection(options.get("select"))  # bad: invalid options
        #: topic keys whose messages it does not get yet (a regex query's topics whose
        #: snapshots are still to come: :meth:`Router.withhold`); None: none
        self.withheld: set[str] | None = None

    @property
    def live(self) -> Any:
        """State kept from the query's snapshot on (server.live.LiveState: a paginated
        window, an aggregated subscription's groups); it decides what is delivered."""
        return self._live

    @live.setter
    def live(self, value: Any) -> None:
        self._live = value
        Subscription.revision += 1

    @property
    def entitlement(self) -> ReadEntitlement | None:
        """What the subscriber may read, when security is configured (server.entitle)."""
        return self._entitlement

    @entitlement.setter
    def entitlement(self, value: ReadEntitlement | None) -> None:
        self._entitlement = value
        Subscription.revision += 1

    def matches_topic(self, topic: str) -> bool:
        if self.regex is None:
            return topic == self.topic
        name, mt = split_topic(topic)
        if name.startswith(INTERNAL_PREFIX) and not self.internal:
            return False
        return mt == self.message_type and self.regex.search(name) is not None

    def __repr__(self) -> str:
        return f"Subscription({self.sub_id!r}, topic={self.topic!r})"


class Router:
    """All subscriptions of one server instance."""

    def __init__(self) -> None:
        self._literal: dict[str, list[Subscription]] = {}
        self._regex: list[Subscription] = []
        self._cache: dict[str, tuple[Subscription, ...]] = {}
        #: what the fan-out derived from a topic's subscriptions (its delivery plan, see
        #: :mod:`server.delivery.fanout`), forgotten with them
        self.plans: dict[str, Any] = {}

    def add(self, sub: Subscription) -> None:
        if sub.regex is None:
            self._literal.setdefault(sub.topic, []).append(sub)
        else:
            self._regex.append(sub)
        self._cache.clear()
        self.plans.clear()

    def remove(self, sub: Subscription) -> None:
        if sub.regex is None:
            subs = self._literal.get(sub.topic)
            if subs is not None:
                try:
                    subs.remove(sub)
                except ValueError:
                    pass
                if not subs:
                    del self._literal[sub.topic]
        else:
            try:
                self._regex.remove(sub)
            except ValueError:
                pass
        self._cache.clear()
        self.plans.clear()

    def withhold(self, sub: Subscription, topics: list[str]) -> None:
        """Match the regex subscription ``sub`` to none of ``topics`` until each is released
        (its query has not read that topic's snapshot yet, which will hold what is published
        to it meanwhile)."""
        sub.withheld = set(topics)
        for topic in topics:
            self._cache.pop(topic, None)

    def release(self, sub: Subscription, topic: str) -> None:
        """``sub`` matches ``topic`` again (see :meth:`withhold`)."""
        withheld = sub.withheld
        if withheld is not None:
            withheld.discard(topic)
            if not withheld:
                sub.withheld = None
            self._cache.pop(topic, None)

    def match(self, topic: str) -> tuple[Subscription, ...]:
        """Every subscription whose topic (literal or regex) covers ``topic``."""
        hit = self._cache.get(topic)
        if hit is not None:
            return hit
        found = list(self._literal.get(topic, ()))
        if self._regex:
            name, mt = split_topic(topic)
            internal = name.startswith(INTERNAL_PREFIX)
            for sub in self._regex:
                rx = sub.regex
                if rx is not None and sub.message_type == mt and (sub.internal or not internal) \
                        and rx.search(name) is not None \
                        and (sub.withheld is None or topic not in sub.withheld):
                    found.append(sub)
        result = tuple(found)
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
            self.plans.clear()
        self._cache[topic] = result
        return result
