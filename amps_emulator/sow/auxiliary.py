"""What two of AMPS's auxiliary modules do to the SOW (User Guide, "Auxiliary Modules").

:class:`ChainingKeyGenerator` -- the chaining key generator (a topic's ``KeyGenerator``)
------------------------------------------------------------------------------------------
Every message of a chain of identifiers gets the SowKey of the chain's first identifier, so
that an update to any document of the chain updates one record. A message's identifiers are
the value of its *primary* field (the document itself) and of its *secondary* fields (the
documents it updates or extends). The generator keeps ``identifier -> head``:

* a secondary value names a chain: the head recorded for it, else the value itself (the
  message is keyed as if its primary field held that value); the message's primary value is
  then recorded as a member of that chain;
* a message with no secondary value is keyed on the head recorded for its primary value,
  else it starts a chain of its own (its primary value is the head);
* a message whose identifiers name two different chains (two secondary values, or its primary
  value and a secondary one) is refused (``bad sow key``): it is not processed, as in AMPS;
  so is a message with no chaining value at all;
* ``Validation``: the secondary values that name no chain yet are recorded too, so that a
  later message joining two chains that would have been one had messages arrived in
  another order is refused rather than keyed into a second record.

Values compare as text (:func:`~sow.keys.key_text`: ``1`` and ``"1"`` are one identifier).
The key is the one a ``Key`` of the primary field would generate for the head
(:func:`~sow.keys.generate_sow_key`). With a ``FileName`` the pairs recorded are appended to
that file (one JSON ``[identifier, head]`` a line, written as they are recorded) and read
back when the topic opens, so chains outlive a restart; a line cut short by a crash is
skipped (and ended, so that the next line starts on its own).

:class:`ValueLookups` -- ``VALUE_LOOKUP`` of ``libamps_udf_experimental.so``
----------------------------------------------------------------------------
A lookup names a SOW topic, its lookup fields and the field it returns. The configuration
gives the topic a hash index on the lookup fields (:mod:`config.auxiliary.lookups`), which
the topic keeps through every publish, delete and expiry; a lookup is one probe of that
index, the records it names checked for an exact match (the filter language's ``=``), and
the return field of the first that matches, as text (NULL when none does).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import msgspec

from amps_emulator.protocol.filter.values import compare3, resolve, to_str
from amps_emulator.protocol.reasons import BAD_SOW_KEY, CommandError
from amps_emulator.sow.index import HashIndex
from amps_emulator.sow.keys import generate_sow_key, key_text
from amps_emulator.sow.paths import parse_path

__all__ = ["ChainSpec", "ChainingKeyGenerator", "LookupSpec", "ValueLookups"]

log = logging.getLogger("amps_emulator.sow")


@dataclass(frozen=True)
class ChainSpec:
    """A topic's chaining ``KeyGenerator``: primary field, secondary fields, FileName,
    Validation."""

    primary: str
    secondary: tuple[str, ...]
    file_name: str | None = None
    validation: bool = False


def _text(doc: Any, path: tuple) -> str | None:
    v = resolve(doc, path)
    if type(v) is list:
        v = v[0] if v else None
    t = key_text(v)
    return t if t else None


class ChainingKeyGenerator:
    """The SowKey of a message of a chaining topic (module docstring)."""

    def __init__(self, domain: str, spec: ChainSpec) -> None:
        self.domain = domain
        self.spec = spec
        self._primary = parse_path(spec.primary)
        self._secondary = tuple(parse_path(s) for s in spec.secondary)
        self._head: dict[str, str] = {}
        if spec.file_name is not None:
            self._load(spec.file_name)

    def _load(self, name: str) -> None:
        """Read the chains recorded in ``name`` (created when it is not there)."""
        directory = os.path.dirname(name)
        if directory:
            os.makedirs(directory, exist_ok=True)
        if os.path.exists(name):
            with open(name, "rb") as f:
                lines = f.read().split(b"\n")
            if lines[-1]:  # a line cut short: ended, so that the next one starts on its own
                with open(name, "ab") as f:
                    f.write(b"\n")
            for line in lines:
                try:
                    member, head = msgspec.json.decode(line)
                except (msgspec.DecodeError, ValueError, TypeError):
                    continue  # (a line cut short when the server stopped, or the empty last)
                if type(member) is str and type(head) is str:
                    self._head[member] = head
        else:
            open(name, "ab").close()  # (OSError: the topic cannot open, as AMPS would not start)

    def _record(self, pairs: list[tuple[str, str]]) -> None:
        """Remember ``pairs`` (and append them to the FileName: a new document of a chain is
        a rare write, so the file is opened for it rather than held by every topic)."""
        if not pairs:
            return
        name = self.spec.file_name
        if name is not None:
            try:
                with open(name, "ab") as f:
                    f.write(b"".join(msgspec.json.encode([m, h]) + b"\n" for m, h in pairs))
            except OSError as exc:
                log.error("chaining key generator: cannot record the chain in %s: %s; the "
                          "message is refused", name, exc.strerror or exc)
                raise CommandError(BAD_SOW_KEY, "the chaining key generator cannot record the "
                                                "chain") from None
        for member, head in pairs:
            self._head[member] = head

    def __call__(self, doc: Any) -> str:
        if not isinstance(doc, dict):
            raise CommandError(BAD_SOW_KEY, "the message cannot be read for its chaining fields")
        heads = self._head
        primary = _text(doc, self._primary)
        found: dict[str, str] = {}  # head -> the identifier that names it
        unknown: list[str] = []
        for path in self._secondary:
            value = _text(doc, path)
            if value is None:
                continue
            head = heads.get(value)
            if head is None:
                unknown.append(value)
                head = value
            found.setdefault(head, value)
        if primary is not None and primary in heads:
            found.setdefault(heads[primary], primary)
        if len(found) > 1:
            raise CommandError(BAD_SOW_KEY, "the message resolves to two different message "
                                            f"chains ({', '.join(repr(v) for v in found.values())})")
        if found:
            head = next(iter(found))
        elif primary is not None:
            head = primary
        else:
            raise CommandError(BAD_SOW_KEY, "the message has none of the chaining fields "
                                            f"({', '.join((self.spec.primary, *self.spec.secondary))})")
        new = [(primary, head)] if primary is not None and primary not in heads else []
        if self.spec.validation:
            new += [(v, head) for v in unknown if v != primary]
        self._record(new)
        return generate_sow_key(self.domain, (head,))

    def keyed(self, docs: list[Any]) -> list[tuple[Any, str]]:
        """(document, SowKey) of each of ``docs`` up to the first that is refused."""
        out: list[tuple[Any, str]] = []
        for doc in docs:
            try:
                out.append((doc, self(doc)))
            except CommandError:
                break
        return out


@dataclass(frozen=True)
class LookupSpec:
    """One declared lookup: the SOW topic (as the SOW service names it), the field returned,
    the lookup fields."""

    name: str
    topic: str
    return_field: str
    fields: tuple[str, ...]


class ValueLookups:
    """``lookup(name, values) -> str | None`` over the SOW topics ``topic`` finds."""

    def __init__(self, lookups: Iterable[LookupSpec], topic: Callable[[str], Any]) -> None:
        self._specs = {s.name: (s, parse_path(s.return_field)) for s in lookups}
        self._topic = topic

    def __call__(self, name: str, values: tuple[Any, ...]) -> str | None:
        entry = self._specs.get(name)
        if entry is None:
            return None
        spec, returned = entry
        topic = self._topic(spec.topic)
        if topic is None or len(values) != len(spec.fields):
            return None
        index = next((ix for ix in topic.hash_indexes
                      if isinstance(ix, HashIndex) and ix.fields == spec.fields), None)
        if index is None:
            return None
        wanted = [v[0] if type(v) is list and v else v for v in values]
        if any(v is None for v in wanted):
            return None
        keys = index.lookup([[v] for v in wanted])
        for key in keys or ():
            record = topic.get(key)
            if record is None:
                continue
            doc = record.doc
            if all(compare3("=", resolve(doc, p), v) is True
                   for p, v in zip(index.paths, wanted, strict=True)):
                value = resolve(doc, returned)
                return to_str(value[0] if type(value) is list and value else value)
        return None
