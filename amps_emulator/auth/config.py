"""The ``Authentication`` / ``Entitlement`` configuration, as the auth layer uses it.

The typed blocks, the module catalogue, resolution and the reader live in the config layer
(:mod:`amps_emulator.config.security`), where the loader reads them with the rest of the file;
this module names them for the auth layer.
"""

from __future__ import annotations

from amps_emulator.config.security import (
    AUTHENTICATION,
    DEFAULT_AUTHENTICATION_MODULE,
    DEFAULT_ENTITLEMENT_MODULE,
    ENTITLEMENT,
    IMPLICIT_AUTHENTICATION_MODULE,
    KIND_DEFAULT,
    NO_AUTHENTICATION_MODULE,
    SIMPLE_ACCESS_LIBRARY,
    WEB_LIBRARY,
    ModuleDecl,
    OptionError,
    SecurityBlock,
    SecurityConfig,
    SimpleAccessOptions,
    WebOptions,
    block_from_values,
    load_security,
    read_security,
    resolve,
    simple_access_options,
    web_options,
)

__all__ = [
    "AUTHENTICATION",
    "ENTITLEMENT",
    "DEFAULT_AUTHENTICATION_MODULE",
    "DEFAULT_ENTITLEMENT_MODULE",
    "IMPLICIT_AUTHENTICATION_MODULE",
    "NO_AUTHENTICATION_MODULE",
    "WEB_LIBRARY",
    "SIMPLE_ACCESS_LIBRARY",
    "SecurityBlock",
    "ModuleDecl",
    "SecurityConfig",
    "resolve",
    "read_security",
    "load_security",
    "block_from_values",
    "KIND_DEFAULT",
    "WebOptions",
    "SimpleAccessOptions",
    "web_options",
    "simple_access_options",
    "OptionError",
]
