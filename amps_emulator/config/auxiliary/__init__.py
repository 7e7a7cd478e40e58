"""The auxiliary modules AMPS ships (User Guide, "Auxiliary Modules") as the configuration
declares them in ``Modules/Module`` and uses them elsewhere.

* function libraries (:mod:`.catalogue`): ``libamps_udf_legacy_compatibility.so`` and
  ``libamps_udf_experimental.so`` with its ``Lookup`` options;
* the chaining SOW key generator (:mod:`.chaining`), a topic's ``KeyGenerator``;
* the exec and multimechanism authenticators (:mod:`.authenticators`), an ``Authenticator``
  of an outgoing replication connection.

The authentication and entitlement libraries are read by :mod:`config.security`. Any other
library is warned about and ignored (:func:`read_aux_modules`).
"""

from __future__ import annotations

from .catalogue import read_aux_modules
from .model import AuxModules, ChainingKeys, ValueLookupDef

__all__ = ["AuxModules", "ChainingKeys", "ValueLookupDef", "read_aux_modules"]
