"""SowKeys: generation from ``Key`` fields, validation of publisher-provided keys.

Generated keys
--------------
AMPS concatenates the key domain (the topic name unless ``KeyDomain`` is set) and the values of
the ``Key`` fields with a separator and takes a checksum.  Here: an unsigned 64-bit BLAKE2b
digest (personalised ``amps-sow-key``) over ``len:domain`` followed by ``len:value`` for each
key field in configuration order, rendered as decimal digits (AMPS's generated keys are
decimal numbers too).  Length prefixes make the encoding injective, BLAKE2b makes it stable
across processes, restarts and platforms.  Applications must treat the value as opaque.

A value's text: strings as they are, ``true``/``false``, integers in decimal, floats as
``repr`` (``5.0``), arrays and objects as compact JSON.  So ``{"id": 5}`` and ``{"id": "5"}``
name the same record (AMPS reads key values as text), ``5.0`` a different one.

A Key field the message has no value for (absent, or JSON ``null``) counts as an empty value:
its text is ``""`` and the key is generated as usual.  A message missing some Key fields is
keyed on the values it has plus empty ones; a message missing all of them is keyed on empty
values only, so every such message of a topic (or KeyDomain) is one and the same record, which
the SOW and the Admin's SOW views list under that generated key like any other.  ``{"id": ""}``
and ``{}`` therefore name the same record.  The same holds for every message type (the
decoded field tree is what is read, whatever the type).

Evidence, since AMPS's own text never states the case outright:

* 60East's FAQ "How does AMPS construct the SowKey for a message?" defines the key as a
  checksum over the key domain and, per Key field, whatever value the message holds at the
  field's path, delimited: a function of values, with no error case; a path the message
  holds nothing at contributes nothing between its delimiters.
* 60East's shipped Python samples (amps-python-client sdist, ``samples/``) run against their
  own ``sample.xml``: ``AMPSNVFIXBuilderPublisher.py`` publishes ``sample=data|even=more
  data|1=123|`` to ``messages-sow``, which ``sample.xml`` declares as an nvfix SOW topic with
  ``Key /messageNumber``, and ``AMPSNVFIXShredderSubscriber.py`` subscribed to that topic prints
  the message's fields.  Refusing the publish would leave the shipped subscriber silent, so
  AMPS stores (and delivers) a message that lacks its Key field.  The rule "the docs and
  60East's shipped files win" decides it; nothing 60East publishes says JSON differs.

A body that does not parse as the topic's message type at all has no field tree to read: that
publish is still refused with reason ``bad sow key`` (the official client raises
``BadSowKeyException``), the detail saying why.  This part is the emulator's
decision (no 60East text covers a malformed body on a keyed topic), kept so that a
mis-typed publisher is told rather than silently collapsed into the empty-key record.

Publisher-provided keys (topics without ``Key``)
-----------------------------------------------
Must be non-empty, at most :data:`MAX_KEY_LENGTH` characters (LMDB key size) and use only the
Base64 alphabet ``A-Za-z0-9+/=``; otherwise ``bad sow key``.  On a topic with ``Key`` fields
a ``k`` header sent by the publisher is ignored (the key comes from the data).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from typing import Any

import msgspec

from amps_emulator import accel
from amps_emulator.protocol.filter.values import fmt_float, resolve
from amps_emulator.protocol.reasons import BAD_SOW_KEY, CommandError
from amps_emulator.sow.paths import PathError, parse_path

__all__ = [
    "KeyGenerator", "generate_sow_key", "validate_sow_key", "parse_sow_keys", "key_text",
    "MAX_KEY_LENGTH", "sow_key", "sow_key_py", "sow_keyed", "sow_keyed_py",
]

MAX_KEY_LENGTH = 255  # so that index keys stay within LMDB's 511-byte key limit
_BASE64 = re.compile(r"[A-Za-z0-9+/=]+\Z")
_PERSON = b"amps-sow-key"
_encode = msgspec.json.encode


def key_text(v: Any) -> str | None:
    """The text of a key field value, ``None`` for no value."""
    t = type(v)
    if t is str:
        return v
    if v is None:
        return None
    if t is bool:
        return "true" if v else "false"
    if t is int:
        return str(v)
    if t is float:
        return fmt_float(v)
    return _encode(v).decode()


_BASE = hashlib.blake2b(digest_size=8, person=_PERSON)  # immutable template, only copied


def _digest(parts: Iterable[str], h=None) -> str:
    if h is None:
        h = _BASE.copy()
    for p in parts:
        b = p.encode("utf-8", "surrogatepass")
        h.update(b"%d:" % len(b))
        h.update(b)
    return str(int.from_bytes(h.digest(), "big"))


def _digest_update(h, p: str) -> None:
    b = p.encode("utf-8", "surrogatepass")
    h.update(b"%d:" % len(b))
    h.update(b)


_I64 = 1 << 63


def sow_key_py(prefix: bytes, value: Any) -> str | None:
    """The SowKey of a topic keyed on one field whose value is ``value``, ``prefix`` being
    the key domain as absorbed first (``b"%d:%b" % (len(domain), domain)``): for an int
    within 64 bits or a str without lone surrogates, else ``None`` (then the general way,
    :meth:`KeyGenerator.__call__`, computes it). The pure-Python twin of the compiled
    ``_speedups.sow_key`` (same results for the same inputs)."""
    t = value.__class__
    if t is int:
        if not -_I64 <= value < _I64:
            return None
        b = b"%d" % value
    elif t is str:
        try:
            b = value.encode("utf-8")
        except UnicodeEncodeError:
            return None
    else:
        return None
    h = _BASE.copy()
    h.update(prefix)
    h.update(b"%d:%b" % (len(b), b))
    return str(int.from_bytes(h.digest(), "big"))


def sow_keyed_py(prefix: bytes, field: str, docs: list[Any]) -> list[tuple[Any, str]]:
    """(document, :func:`sow_key_py` of its ``field``) of each of ``docs`` from the first
    on, up to (without) the first that is not a dict or whose value it declines (a missing
    field: ``None``, declined). The pure-Python twin of the compiled ``_speedups.sow_keyed``
    (:meth:`KeyGenerator.keyed`'s common loop)."""
    out: list[tuple[Any, str]] = []
    for doc in docs:
        if doc.__class__ is not dict:
            break
        k = sow_key_py(prefix, doc.get(field))
        if k is None:
            break
        out.append((doc, k))
    return out


if accel.COMPILED:
    from amps_emulator import _speedups

    #: the SowKey of a one-field Key's int or str value (compiled when built; see sow_key_py)
    sow_key = _speedups.sow_key
    sow_keyed = _speedups.sow_keyed
else:
    sow_key = sow_key_py
    sow_keyed = sow_keyed_py


def generate_sow_key(domain: str, values: Iterable[str]) -> str:
    """The generated SowKey for a key domain and the key values' texts, in Key order."""
    return _digest((domain, *values))


def validate_sow_key(key: Any) -> str:
    """A publisher-provided SowKey, checked; raises ``CommandError(bad sow key)``."""
    if not isinstance(key, str) or not key:
        raise CommandError(BAD_SOW_KEY, "a SowKey is required for this topic")
    if len(key) > MAX_KEY_LENGTH:
        raise CommandError(BAD_SOW_KEY, f"SowKey longer than {MAX_KEY_LENGTH} characters")
    if _BASE64.match(key) is None:
        raise CommandError(BAD_SOW_KEY, "SowKey must use only Base64 characters")
    return key


def parse_sow_keys(keys: str | Iterable[str] | None) -> list[str]:
    """The ``sow_keys`` header (comma list) or an iterable of keys, as a de-duplicated list."""
    if keys is None:
        return []
    items = keys.split(",") if isinstance(keys, str) else keys
    out: dict[str, None] = {}
    for k in items:
        k = k.strip()
        if k:
            out[k] = None
    return list(out)


class KeyGenerator:
    """Computes a topic's SowKey for a decoded message (generated-key topics only)."""

    __slots__ = ("domain", "paths", "texts", "_single", "_seed", "_prefix")

    def __init__(self, domain: str, key_paths: Iterable[str]) -> None:
        self.domain = domain
        self.texts = tuple(key_paths)
        try:
            self.paths = tuple(parse_path(p) for p in self.texts)
        except PathError as e:
            raise ValueError(f"bad Key field: {e}") from None
        if not self.paths or any(not p for p in self.paths):
            raise ValueError("Key fields must name a field")
        # fast path: one top-level key field read with dict.get
        p0 = self.paths[0]
        self._single = p0[0] if len(self.paths) == 1 and len(p0) == 1 else None
        self._seed = _BASE.copy()  # hasher with the domain already absorbed
        _digest_update(self._seed, domain)
        d = domain.encode("utf-8", "surrogatepass")
        self._prefix = b"%d:%b" % (len(d), d)  # what _seed absorbed (for sow_key)

    def of_text(self, text: bytes) -> str:
        """The SowKey of a message whose (one) Key field's text is ``text`` (UTF-8)."""
        h = self._seed.copy()
        h.update(b"%d:%b" % (len(text), text))
        return str(int.from_bytes(h.digest(), "big"))

    def values(self, doc: Any) -> list[str]:
        """The texts of the Key fields' values in ``doc`` (``""`` for a field without one).

        ``doc`` is the decoded body; ``None`` means it did not parse (``bad sow key``)."""
        if doc is None:
            raise CommandError(BAD_SOW_KEY, "message body does not parse as a message of the "
                               "topic's type: no Key field can be read")
        out = []
        for path in self.paths:
            if self._single is not None and type(doc) is dict:
                v = doc.get(self._single)
            else:
                v = resolve(doc, path) if isinstance(doc, (dict, list)) else None
            s = key_text(v)
            out.append("" if s is None else s)
        return out

    def keyed(self, docs: list[Any]) -> list[tuple[Any, str]]:
        """(document, SowKey) of each of ``docs``, up to the first that has no SowKey."""
        single = self._single
        prefix = self._prefix
        if not isinstance(single, str):  # (none, or an array index: never a dict's field)
            out: list[tuple[Any, str]] = []
        else:  # the common run, in one call; the rest (if any) one by one
            out = sow_keyed(prefix, single, docs)
            if len(out) == len(docs):
                return out
            docs = docs[len(out):]
        append = out.append
        for doc in docs:
            if single is not None and doc.__class__ is dict:
                k = sow_key(prefix, doc.get(single))  # (__call__'s hot path, inlined)
                if k is not None:
                    append((doc, k))
                    continue
            try:
                append((doc, self(doc)))
            except CommandError:
                break
        return out

    def __call__(self, doc: Any) -> str:
        single = self._single
        if single is not None and type(doc) is dict:
            # the hot path (one top-level Key field): the same bytes hashed as _digest's, for
            # an int or a str without key_text's call (b"%d" % v is str(v) encoded)
            v: Any = doc.get(single)  # a decoded JSON value
            k = sow_key(self._prefix, v)  # an int or a str: in one call
            if k is not None:
                return k
            t = v.__class__
            b: bytes
            if t is int:
                b = b"%d" % v
            elif t is str:
                b = v.encode("utf-8", "surrogatepass")
            else:
                s = key_text(v)
                b = b"" if s is None else s.encode("utf-8", "surrogatepass")
            return self.of_text(b)
        return _digest(self.values(doc), self._seed.copy())
