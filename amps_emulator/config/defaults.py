"""The built-in configuration used when the server is started without a config file.

One JSON transport on 127.0.0.1:9007 (Type tcp, Protocol amps, MessageType json), a
transaction log in ``<data_dir>/journal`` recording every JSON topic (Topic Name ``.*``),
SOW data under ``<data_dir>/sow``, and warnings logged to stderr (stdout carries the
``ready:`` line).
"""

from __future__ import annotations

import os

from .model import Config, LogTarget, TransactionLog, Transport, TxLogTopic
from .schema import BUILTIN_MESSAGE_TYPES

DEFAULT_SOURCE = "<default>"
DEFAULT_PORT = 9007
DEFAULT_HOST = "127.0.0.1"


def default_config(data_dir: str | os.PathLike[str] = "./amps-data") -> Config:
    """The emulator's built-in configuration, with all data under ``data_dir``."""
    base = os.fspath(data_dir).rstrip("/") or "/"
    return Config(
        name="AMPS-Emulator",
        description="built-in default configuration",
        transports=(
            Transport(file=DEFAULT_SOURCE, line=0, name="json-tcp", type="tcp", host=DEFAULT_HOST,
                      port=DEFAULT_PORT, inet_addr=f"{DEFAULT_HOST}:{DEFAULT_PORT}",
                      message_type="json", protocol="amps"),
        ),
        logging=(LogTarget(file=DEFAULT_SOURCE, line=0, protocol="stderr", level="warning"),),
        transaction_log=TransactionLog(
            file=DEFAULT_SOURCE,
            line=0,
            journal_directory=os.path.join(base, "journal"),
            topics=(TxLogTopic(".*", "json"),),
        ),
        message_types=BUILTIN_MESSAGE_TYPES,
        sow_directory=os.path.join(base, "sow"),
        source=DEFAULT_SOURCE,
    )
