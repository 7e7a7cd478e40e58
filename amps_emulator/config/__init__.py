"""AMPS configuration files (``AMPSConfig`` XML) read into frozen, typed structures.

``load_config(path)`` and ``loads_config(text, filename=...)`` raise :class:`ConfigError`
listing every error (``str()`` of it: one ``file:line: reason`` per line); ``cfg.warnings``
holds one :class:`ConfigIssue` per real AMPS element the emulator ignores. ``default_config()``
is the built-in config. The structures and units are in :mod:`.model`; which elements are read,
added and warned about is docs/reference/config.md.
"""

from .defaults import default_config
from .errors import ConfigError, ConfigIssue
from .loader import load_config, loads_config
from .model import (
    Action,
    ActionOption,
    ActionStep,
    Admin,
    Config,
    ConflatedTopic,
    LogTarget,
    Queue,
    SowTopic,
    TransactionLog,
    Transport,
    TxLogTopic,
    View,
)
from .sample import sample_config

__all__ = [
    "Action",
    "ActionOption",
    "ActionStep",
    "Admin",
    "Config",
    "ConfigError",
    "ConfigIssue",
    "ConflatedTopic",
    "LogTarget",
    "Queue",
    "SowTopic",
    "Transport",
    "TransactionLog",
    "TxLogTopic",
    "View",
    "default_config",
    "load_config",
    "loads_config",
    "sample_config",
]
