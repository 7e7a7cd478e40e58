"""Who is at the other end of an incoming replication link, and what it may replicate here.

The connecting instance's hello carries its logon (:class:`~.wire.Logon`, from its
Destination's ``Authenticator``). :func:`log_on_peer` decides it with the replication
transport's Authentication and Entitlement (the transport's own blocks, else the instance's):
the identity must be accepted and hold ``replication-logon``; a refusal is a
:class:`LogonRefused`, whose ``reason`` goes to the peer (it logs it) and whose ``detail`` is
this side's log line. Without any Authentication/Entitlement configured (``security`` None)
every peer is accepted, as the default modules would.

The connecting side's logon is :func:`logon_for_link` its Authenticator (the default and
multimechanism authenticators' credentials: :func:`logon_with`; the exec authenticator's:
:mod:`.exec_auth`).

A :class:`PeerIdentity` then answers, per record, whether its topic is one the identity may
replicate here (``replicated-topics``). A refused record is dropped; the first refusal on a
link is logged at once, the rest are counted and summed up in one line when the link ends, so
a flood of refused records cannot flood the log.
"""

from __future__ import annotations

import logging

from amps_emulator.auth import Credentials, Session, TransportSecurity
from amps_emulator.config.model import ReplicationAuthenticator

from .exec_auth import run_exec_authenticator
from .wire import LinkRefused, Logon

log = logging.getLogger("amps_emulator.replication")

#: distinct refused topics remembered per link for the closing summary
_TOPICS_KEPT = 20


class LogonRefused(LinkRefused):
    """A peer's logon was refused: ``reason`` for the peer, ``detail`` for this side's log."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(reason)
        self.detail = detail


class PeerIdentity:
    """An accepted peer: its identity (``user``) and, when the instance is secured, the
    session whose permissions say which topics it may replicate here."""

    def __init__(self, peer: str, user: str, session: Session | None = None) -> None:
        self.peer = peer
        self.user = user
        self.session = session
        self.refused = 0
        self.refused_topics: list[str] = []

    @property
    def checks_topics(self) -> bool:
        """Whether records are checked at all (False: every topic is allowed)."""
        return self.session is not None

    def admits(self, topic: str) -> bool:
        """Whether the peer may replicate ``topic`` here; a refusal is logged (the first) or
        counted (the others)."""
        if self.session is None or self.session.permissions.may_replicate(topic):
            return True
        self.refused += 1
        if len(self.refused_topics) < _TOPICS_KEPT and topic not in self.refused_topics:
            self.refused_topics.append(topic)
        if self.refused == 1:
            log.error("replication link from %s: a record of topic %r refused: user %r may not "
                      "replicate it here (replicated-topics); further refusals on this link are "
                      "counted and reported when it ends", self.peer, topic, self.user)
        return False

    def close(self) -> None:
        """The link ended: report what was refused after the first, release the session."""
        if self.refused > 1:
            more = "" if len(self.refused_topics) < _TOPICS_KEPT else ", ..."
            log.error("replication link from %s: %d records refused in all (user %r may not "
                      "replicate topics %s%s)", self.peer, self.refused, self.user,
                      ", ".join(repr(t) for t in self.refused_topics), more)
        if self.session is not None:
            self.session.close()


async def log_on_peer(security: TransportSecurity | None, logon: Logon, peer: str) -> PeerIdentity:
    """The identity of the peer that sent ``logon``, or :class:`LogonRefused`."""
    if security is None:
        return PeerIdentity(peer, logon.user)
    outcome = await security.logon(Credentials(logon.user, logon.password), replication=True)
    if outcome.session is None:
        raise LogonRefused(f"logon of user {logon.user!r} refused: {outcome.reason}",
                           outcome.detail or outcome.reason)
    return PeerIdentity(peer, outcome.session.user_id or logon.user, outcome.session)


def logon_with(authenticator: ReplicationAuthenticator) -> Logon:
    """What an outgoing link logs on with (its Authenticator's credentials, read now); a
    password file or variable gone since start-up refuses the attempt (:class:`LinkRefused`)."""
    try:
        return Logon(*authenticator.credentials())
    except OSError as exc:
        raise LinkRefused(f"Authenticator: cannot read PasswordFileName {authenticator.password_file}: "
                          f"{exc.strerror or exc}") from None
    except KeyError:
        raise LinkRefused(f"Authenticator: PasswordEnvironmentVariable {authenticator.password_env} "
                          "is not set") from None


async def logon_for_link(authenticator: ReplicationAuthenticator) -> Logon:
    """What one attempt of an outgoing link logs on with: :func:`logon_with`, or for the
    exec authenticator the output of its program (run now, off the event loop)."""
    if authenticator.command is not None:
        return Logon(*await run_exec_authenticator(authenticator))
    return logon_with(authenticator)


__all__ = ["LogonRefused", "PeerIdentity", "log_on_peer", "logon_for_link", "logon_with"]
