"""State of the World: the SOW storage engine (pure storage, synchronous, no I/O loop).

Entry points::

    from amps_emulator.sow import Sow, TopicSpec
    sow = Sow([TopicSpec("orders", keys=("/id",))], default_dir="./sow", sync=True)
    t = sow.topic("orders")
    r = t.publish(b'{"id":1,"px":10}', bookmark="1|1|", position=1)   # PublishResult
    q = t.query("/px > 5", order_by="/px DESC", top_n=10)              # QueryResult
    d = t.delete_by_filter("1=1")                                      # DeleteResult
    sow.commit()                                                       # once per loop turn

Modules: ``spec`` (TopicSpec), ``keys`` (SowKeys), ``record`` (Record, on-disk layout),
``store`` (Sow, SowStore, TransientStore, TopicStore protocol), ``topic`` (Topic: writes,
deletes, expiration, indexes), ``scan`` (its base class: queries and counts), ``recovery``
(a journal record applied to a topic),
``backend`` (the record storage interface), ``memory_backend`` / ``lmdb_backend`` (its two
implementations), ``lmdb_keys`` (LMDB record keys), ``lmdb_scan`` (scans of stored bodies),
``lmdbenv`` (LMDB environment, batching, map growth), ``lmdb_tables`` (its index tables),
``tables`` (in-memory index tables), ``index`` (hash and memo indexes), ``planner``,
``query`` (orderby, select, paging, results), ``delta`` (delta merge, changed fields),
``expiry`` (deadlines, expiry index keys), ``paths`` (XPath field paths).
"""

from amps_emulator.sow.delta import changed_fields, delta_message, merge
from amps_emulator.sow.keys import generate_sow_key, parse_sow_keys, validate_sow_key
from amps_emulator.sow.query import (
    DeleteResult,
    PublishResult,
    QueryResult,
    apply_select,
    parse_order_by,
    parse_select,
)
from amps_emulator.sow.record import Record, amps_timestamp
from amps_emulator.sow.spec import TopicSpec, expand_file_name
from amps_emulator.sow.store import Sow, SowDamagedError, SowStore, TopicStore, TransientStore, env_directory
from amps_emulator.sow.topic import Topic

__all__ = [
    "SowDamagedError",
    "Sow", "SowStore", "TransientStore", "TopicStore", "Topic", "TopicSpec", "Record",
    "PublishResult", "QueryResult", "DeleteResult", "merge", "changed_fields", "delta_message",
    "generate_sow_key", "validate_sow_key", "parse_sow_keys", "parse_order_by", "parse_select",
    "apply_select", "amps_timestamp", "expand_file_name", "env_directory",
]
