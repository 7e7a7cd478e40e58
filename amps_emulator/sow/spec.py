"""``TopicSpec``: what the SOW engine needs to know about one ``SOW/Topic`` entry.

:func:`spec_from_config` maps a configuration ``SOW/Topic`` struct onto this frozen value for
the server and the offline pipeline alike. It reads the struct through :class:`TopicConfig`,
the fields it needs, so the SOW package does not import the configuration package.

Fields
------
``name``            the topic name (``Name``).
``message_type``    only ``"json"`` is stored and queried by content; other types could be stored
                    with publisher-provided keys but content queries need JSON.
``keys``            ``Key`` XPaths such as ``"/clientName"``; empty = the publisher provides the
                    SowKey (``k``) on every publish.
``key_domain``      ``KeyDomain``; ``None`` = the topic name.
``durability``      ``"persistent"`` (LMDB) or ``"transient"`` (memory).
``file_name``       ``FileName``; ``%n`` expands to the topic name (:func:`expand_file_name`).
``expiration``      ``None`` (expiration disabled), ``"enabled"`` (per-message ``e`` only) or a
                    default lifetime in seconds (per-message ``e`` still overrides it).
``hash_indexes``    ``HashIndex`` entries, each a tuple of field XPaths.
``indexes``         ``Index`` entries (memo indexes created up front).
``history``         ``History`` (:class:`sow.history.HistorySpec`: window and granularity in
                    seconds), ``None`` = no history, no historical queries.
``preprocessing``   the ``Preprocessing/Field`` texts; ``enrichment`` the ``Enrichment/Field``
                    texts (:mod:`sow.enrichment`); empty = none.
``chaining``        ``KeyGenerator`` through the chaining key generator
                    (:class:`sow.auxiliary.ChainSpec`), ``None`` = none.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, TypeAlias

from amps_emulator.protocol.topics import qualify
from amps_emulator.sow.auxiliary import ChainSpec
from amps_emulator.sow.history import HistorySpec

__all__ = ["TopicSpec", "TopicConfig", "spec_from_config", "expand_file_name", "PERSISTENT",
           "TRANSIENT"]

PERSISTENT = "persistent"
TRANSIENT = "transient"

Expiration: TypeAlias = str | float | None


@dataclass(frozen=True)
class TopicSpec:
    name: str
    message_type: str = "json"
    keys: tuple[str, ...] = ()
    key_domain: str | None = None
    durability: str = PERSISTENT
    file_name: str | None = None
    expiration: Expiration = None
    hash_indexes: tuple[tuple[str, ...], ...] = ()
    indexes: tuple[str, ...] = ()
    history: HistorySpec | None = None
    preprocessing: tuple[str, ...] = ()
    enrichment: tuple[str, ...] = ()
    chaining: ChainSpec | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("TopicSpec needs a topic name")
        if self.durability not in (PERSISTENT, TRANSIENT):
            raise ValueError(f"durability must be 'persistent' or 'transient', not {self.durability!r}")
        # tolerate lists from callers; keep the value hashable
        object.__setattr__(self, "keys", tuple(self.keys))
        object.__setattr__(self, "hash_indexes", tuple(tuple(h) for h in self.hash_indexes))
        object.__setattr__(self, "indexes", tuple(self.indexes))
        object.__setattr__(self, "preprocessing", tuple(self.preprocessing))
        object.__setattr__(self, "enrichment", tuple(self.enrichment))
        exp = self.expiration
        if isinstance(exp, str) and exp.strip().lower() == "enabled":
            object.__setattr__(self, "expiration", "enabled")
        elif exp is not None:
            try:
                exp = float(exp)  # seconds (a numeric string is accepted too)
            except (TypeError, ValueError):
                raise ValueError(
                    f"expiration must be None, 'enabled' or seconds, not {exp!r}") from None
            exp = float(exp)
            if exp < 0:
                raise ValueError("expiration must not be negative")
            object.__setattr__(self, "expiration", exp)

    @property
    def domain(self) -> str:
        """The key domain used for generated SowKeys."""
        return self.key_domain if self.key_domain is not None else self.name

    @property
    def generated_keys(self) -> bool:
        return bool(self.keys)

    @property
    def expiration_enabled(self) -> bool:
        return self.expiration is not None

    @property
    def default_lifetime(self) -> float | None:
        """The topic's default message lifetime in seconds (``None``: no default)."""
        e = self.expiration
        if e is None or isinstance(e, str) or e == 0:  # the only string left is "enabled"
            return None
        return float(e)

    @property
    def persistent(self) -> bool:
        return self.durability == PERSISTENT


def expand_file_name(spec: TopicSpec, default_dir: str = "./sow") -> str:
    """The topic's ``FileName`` with ``%n`` replaced by the topic name.

    Without a ``FileName`` the file is ``<default_dir>/<topic>.sow``.  Topic names may contain
    ``/``; those characters are kept (they are path separators in the expanded name, as AMPS
    would create them) -- the SOW store only uses the directory part, see
    :func:`sow.store.env_directory`.
    """
    fn = spec.file_name
    if not fn:
        return os.path.join(default_dir, f"{spec.name}.sow")
    return fn.replace("%n", spec.name)


class TopicConfig(Protocol):
    """The fields of a configuration ``SOW/Topic`` (``config.model.SowTopic``) that
    :func:`spec_from_config` reads."""

    @property
    def name(self) -> str: ...
    @property
    def message_type(self) -> str: ...
    @property
    def keys(self) -> Iterable[str]: ...
    @property
    def key_domain(self) -> str | None: ...
    @property
    def durability(self) -> str: ...
    @property
    def resolved_file_name(self) -> str | None: ...
    @property
    def expiration(self) -> float | None: ...
    @property
    def expiration_enabled(self) -> bool: ...
    @property
    def hash_indexes(self) -> Iterable[Iterable[str]]: ...
    @property
    def indexes(self) -> Iterable[str]: ...
    @property
    def history(self) -> tuple[float, float] | None: ...
    @property
    def preprocessing(self) -> Iterable[str]: ...
    @property
    def enrichment(self) -> Iterable[str]: ...
    @property
    def key_generator(self) -> ChainingConfig | None: ...


class ChainingConfig(Protocol):
    """The chaining ``KeyGenerator`` of a configuration topic (``config.auxiliary.ChainingKeys``)."""

    @property
    def primary(self) -> str: ...
    @property
    def secondary(self) -> Iterable[str]: ...
    @property
    def file_name(self) -> str | None: ...
    @property
    def validation(self) -> bool: ...


def spec_from_config(t: TopicConfig) -> TopicSpec:
    """The :class:`TopicSpec` of a configuration ``SOW/Topic`` entry."""
    expiration: Expiration = None
    if t.expiration is not None:
        expiration = t.expiration
    elif t.expiration_enabled:
        expiration = "enabled"
    return TopicSpec(
        name=qualify(t.name, t.message_type), message_type=t.message_type, keys=tuple(t.keys),
        key_domain=t.key_domain,
        durability=t.durability, file_name=t.resolved_file_name, expiration=expiration,
        hash_indexes=tuple(tuple(h) for h in t.hash_indexes), indexes=tuple(t.indexes),
        history=None if t.history is None else HistorySpec(*t.history),
        preprocessing=tuple(t.preprocessing), enrichment=tuple(t.enrichment),
        chaining=None if (kg := t.key_generator) is None else ChainSpec(
            kg.primary, tuple(kg.secondary), kg.file_name, kg.validation),
    )
