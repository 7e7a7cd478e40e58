"""The built-in configuration used when the server is started without a config file.

One JSON transport on 127.0.0.1:9007 (Type tcp, Protocol amps, MessageType json), a
transaction log in ``<data_dir>/journal`` recording every JSON topic (Topic Name ``.*``),
one SOW topic, ``orders`` (JSON, Key ``/id``, in ``<data_dir>/sow/orders.json.sow``) so that
a first ``sow`` query works as the quick start's examples show, and warnings logged to stderr
(stdout carries the ``ready:`` line). AMPS itself has no built-in configuration; the same
definitions written as an AMPS config are in ``--sample-config``.
"""

from __future__ import annotations

import os

from .model import Config, LogTarget, SowTopic, TransactionLog, Transport, TxLogTopic
from .schema import BUILTIN_MESSAGE_TYPES
from .sow_sections import resolve_file_name

DEFAULT_SOURCE = "<default>"
DEFAULT_PORT = 9007
DEFAULT_HOST = "127.0.0.1"
#: the built-in SOW topic: (name, message type, key)
DEFAULT_SOW_TOPIC = ("orders", "json", "/id")


def default_config(data_dir: str | os.PathLike[str] = "./amps-data") -> Config:
    """The emulator's built-in configuration, with all data under ``data_dir``."""
    base = os.fspath(data_dir).rstrip("/") or "/"
    topic, message_type, key = DEFAULT_SOW_TOPIC
    sow_file = os.path.join(base, "sow", "%n.sow")
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
        sow_topics=(
            SowTopic(file=DEFAULT_SOURCE, line=0, name=topic, message_type=message_type,
                     file_name=sow_file,
                     resolved_file_name=resolve_file_name(sow_file, topic, message_type),
                     keys=(key,)),
        ),
        message_types=BUILTIN_MESSAGE_TYPES,
        sow_directory=os.path.join(base, "sow"),
        source=DEFAULT_SOURCE,
    )
