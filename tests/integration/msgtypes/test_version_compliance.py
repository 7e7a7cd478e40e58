"""``MessageType/AMPSVersionCompliance``: the FIX tags of ``/AMPS/SOWStats``, through the
official Python client. The Configuration Reference: 4 (the default) writes AMPS 4.X's tags,
topic 20066 and record count 20067; 5 writes the tags unified with ``/AMPS/ClientStatus``,
topic 20068 and record count 20075; the other message types are the same under both."""

from __future__ import annotations

import json
import queue

import pytest

from amps_emulator.config import ConfigError, loads_config
from amps_emulator.protocol.msgtypes import build_registry
from tests.support.clients import client_for
from tests.support.servers import start_server

AMPS = pytest.importorskip("AMPS")

_FIX = build_registry().codec("fix")


def _config(compliance: str) -> str:
    # fix answers to the compliance under test; fix4 is a second fix type left at the default
    return f"""<AMPSConfig><Name>compliance</Name><SOWStatsInterval>100ms</SOWStatsInterval>
<MessageTypes>
  <MessageType><Name>fix</Name><Module>fix</Module>
    <AMPSVersionCompliance>{compliance}</AMPSVersionCompliance></MessageType>
  <MessageType><Name>fix4</Name><Module>fix</Module></MessageType>
  <MessageType><Name>json</Name><Module>json</Module>
    <AMPSVersionCompliance>{compliance}</AMPSVersionCompliance></MessageType>
</MessageTypes>
<Transports><Transport><Name>any</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
  <Protocol>amps</Protocol></Transport></Transports>
<SOW><Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
  <Durability>transient</Durability></Topic></SOW>
</AMPSConfig>"""


@pytest.fixture(scope="module")
def unified():
    s = start_server(_config("5"))
    pub = client_for(s, "compliance-pub", "json")
    pub.publish("orders", '{"id": 1}')
    pub.publish("orders", '{"id": 2}')
    pub.publish_flush()
    yield s
    pub.close()
    s.stop()


def _first(srv, name: str, mt: str, flt: str) -> bytes:
    got: queue.Queue[bytes] = queue.Queue()
    c = client_for(srv, name, mt)
    try:
        c.subscribe(lambda m: got.put(bytes(m.get_data_raw())), "/AMPS/SOWStats", flt)
        return got.get(timeout=5)
    finally:
        c.close()


def test_compliance_5_writes_the_unified_fix_tags(unified) -> None:
    # a filter on the unified tag: only a message that carries it arrives
    fields = _FIX.decode(_first(unified, "unified", "fix", "/20068 = 'orders'"))
    assert fields["20068"] == "orders" and int(fields["20075"]) == 2
    assert fields["20007"] == "json" and "20065" in fields
    assert "20066" not in fields and "20067" not in fields
    # a fix type without the element keeps the 4.X tags
    fields = _FIX.decode(_first(unified, "default", "fix4", "/20066 = 'orders'"))
    assert fields["20066"] == "orders" and int(fields["20067"]) == 2
    assert "20068" not in fields and "20075" not in fields
    # and json is the same under 5
    body = json.loads(_first(unified, "json-reader", "json", "/SOWStats/topic = 'orders'"))
    assert body["SOWStats"]["record_count"] == 2


def test_the_element_takes_2_4_or_5() -> None:
    with pytest.raises(ConfigError, match="AMPSVersionCompliance> must be 2, 4 or 5"):
        loads_config(_config("3"))
    # AMPS 2.X's tags are not in 60East's documents: accepted, said, written as 4.X's
    cfg = loads_config(_config("2"))
    assert any("AMPSVersionCompliance" in str(w) for w in cfg.warnings)
    assert not any("AMPSVersionCompliance" in str(w) for w in loads_config(_config("5")).warnings)
