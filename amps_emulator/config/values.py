"""Validators for non-unit values: ``InetAddr``, enumerations, regexes, XPath keys, names.

Like :mod:`config.units`, each function takes element text and returns a value or raises
``ValueError`` with a human reason; the loader adds file and line.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping

_HOSTNAME = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
                       r"(\.[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?")
_IPV4_LIKE = re.compile(r"[0-9.]+")

#: characters that make a topic name a regular expression rather than a literal
REGEX_METACHARACTERS = frozenset("^$.*+?()[]{}|\\")


def parse_port(text: str) -> int:
    if not text.isdigit():
        raise ValueError(f"invalid port {text!r} (expected a number 0-65535)")
    port = int(text)
    if port > 65535:
        raise ValueError(f"port {port} out of range (0-65535)")
    return port


def parse_inet_addr(text: str) -> tuple[str | None, int]:
    """Parse ``9007``, ``host:9007``, ``1.2.3.4:9007`` or ``[::1]:9007`` to ``(host, port)``.

    A bare port gives ``host=None``: listen on every interface, as AMPS does.
    """
    t = text.strip()
    if t.isdigit():
        return None, parse_port(t)
    if t.startswith("["):
        m = re.fullmatch(r"\[([^\]]*)\]:(.*)", t)
        if m is None:
            raise ValueError(f"invalid address {t!r} (expected [ipv6-address]:port, e.g. [::1]:9007)")
        host = m.group(1)
        try:
            ipaddress.IPv6Address(host.split("%", 1)[0])
        except ValueError:
            raise ValueError(f"invalid IPv6 address {host!r} in {t!r}") from None
        return host, parse_port(m.group(2))
    if t.count(":") > 1:
        raise ValueError(f"invalid address {t!r}: put an IPv6 address in brackets, e.g. [::1]:9007")
    if ":" not in t:
        raise ValueError(f"invalid address {t!r} (expected port, host:port or [ipv6]:port)")
    host, port = t.split(":", 1)
    if not host:
        raise ValueError(f"invalid address {t!r}: empty host "
                         "(write just the port to listen on all interfaces)")
    if _IPV4_LIKE.fullmatch(host):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise ValueError(f"invalid IPv4 address {host!r} in {t!r}") from None
    elif not _HOSTNAME.fullmatch(host):
        raise ValueError(f"invalid host name {host!r} in {t!r}")
    return host, parse_port(port)


def suggest(word: str, candidates: Iterable[str]) -> str | None:
    """The closest candidate to a misspelt ``word`` (case-insensitive first), or None."""
    candidates = list(candidates)
    for c in candidates:
        if c.lower() == word.lower():
            return c
    close = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    return close[0] if close else None


def enum(allowed: Iterable[str], synonyms: Mapping[str, str] | None = None,
         *, case_sensitive: bool = False) -> Callable[[str], str]:
    """A parser accepting one of ``allowed`` (or a synonym mapped to one)."""
    allowed = tuple(allowed)
    table: dict[str, str] = {}
    for a in allowed:
        table[a if case_sensitive else a.lower()] = a
    for k, v in (synonyms or {}).items():
        table[k if case_sensitive else k.lower()] = v

    def parse(text: str) -> str:
        key = text.strip() if case_sensitive else text.strip().lower()
        if key in table:
            return table[key]
        hint = suggest(text.strip(), allowed)
        extra = f"; did you mean {hint!r}?" if hint else ""
        raise ValueError(f"invalid value {text.strip()!r} (expected one of: {', '.join(allowed)}){extra}")

    return parse


def is_regex(topic: str) -> bool:
    """True when a topic name contains regular-expression metacharacters."""
    return any(ch in REGEX_METACHARACTERS for ch in topic)


def parse_regex(text: str) -> str:
    """A topic name or regular expression; checked to compile. Returns the text."""
    try:
        re.compile(text)
    except re.error as e:
        raise ValueError(f"invalid regular expression {text!r}: {e}") from None
    return text


def parse_xpath(text: str) -> str:
    """An AMPS XPath-style field identifier such as ``/orderId`` or ``/55``."""
    t = text.strip()
    if not t.startswith("/") or t == "/" or any(ch.isspace() for ch in t):
        raise ValueError(f"invalid field identifier {t!r} (expected an XPath such as /orderId)")
    return t


def parse_comma_list(text: str) -> tuple[str, ...]:
    items = tuple(part.strip() for part in text.replace("\n", ",").split(","))
    items = tuple(i for i in items if i)
    if not items:
        raise ValueError("empty list")
    return items


def parse_name(text: str) -> str:
    """An AMPS instance name: no path separators, ``$`` or ``~``.

    Spaces are allowed here (AMPS starts with them; the loader warns, since the reference
    says a name should not contain them)."""
    bad = [ch for ch in text if ch in "/\\$~"]
    if bad:
        raise ValueError(
            f"invalid instance name {text!r}: it must not contain '/', '\\', '$' or '~'"
        )
    return text


_TIMESTAMP = re.compile(r"\d{8}T\d{2}(\d{2}(\d{2}(\.\d+)?)?)?Z?")
_BOOKMARK = re.compile(r"\d+\|\d+\|\d*\|?")


def parse_recovery_point(text: str) -> str:
    """``epoch``, ``now``, ``creation``, an ISO-8601 ``YYYYmmddTHHMMSS[Z]`` time or a bookmark."""
    t = text.strip()
    if t.lower() in ("epoch", "now", "creation"):
        return t.lower()
    if _TIMESTAMP.fullmatch(t) or _BOOKMARK.fullmatch(t):
        return t
    raise ValueError(
        f"invalid recovery point {t!r} (expected epoch, now, creation, a timestamp such as "
        "20240102T123500Z or a bookmark)"
    )


def _join_side(text: str, whole: str) -> tuple[str, str]:
    t = text.strip()
    parts = re.findall(r"\[([^\]]*)\]", t)
    if parts and re.fullmatch(r"(\[[^\]]*\]\s*\.\s*){1,2}\[[^\]]*\]", t):
        topic, field = parts[-2].strip(), parts[-1].strip()  # [message type].[topic].[field]
    else:
        i = t.find("/")
        if i <= 0:
            raise ValueError(f"invalid join {whole.strip()!r}: {t!r} is not [topic].[/field]")
        topic, field = t[:i].strip().rstrip(".").strip("[] "), t[i:].strip("[] ")
    if not topic or not field.startswith("/") or field == "/":
        raise ValueError(f"invalid join {whole.strip()!r}: {t!r} is not [topic].[/field]")
    return topic, field


def parse_join(text: str) -> tuple[tuple[str, str], tuple[str, str]]:
    """A view's ``Join``: ``[a].[/x]=[b].[/y]`` (a message type may lead each side:
    ``[json].[a].[/x]``; brackets are optional: ``a/x=b/y``) -> ((a, /x), (b, /y))."""
    left, eq, right = text.partition("=")
    if not eq or "=" in right:
        raise ValueError(f"invalid join {text.strip()!r}: expected one '=' between two fields")
    return _join_side(left, text), _join_side(right, text)
