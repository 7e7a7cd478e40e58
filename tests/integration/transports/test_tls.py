"""The official Python client over ``tcps://``: a throwaway self-signed certificate, the
client verifying it, and the same pub/sub, SOW and queue round trips as over TCP."""

from __future__ import annotations

import json

import AMPS
import pytest

from tests.support.clients import Collector, Inbox, clients_for
from tests.support.servers import start_server
from tests.support.tls import self_signed

TLS_CONFIG = """<AMPSConfig>
  <Name>tls-test</Name>
  <Transports>
    <Transport><Name>secure</Name><Type>tcps</Type><InetAddr>127.0.0.1:0</InetAddr>
      <MessageType>json</MessageType><Protocol>amps</Protocol>
      <Certificate>{cert}</Certificate><PrivateKey>{key}</PrivateKey>
      <Ciphers>ECDHE+AESGCM:ECDHE+CHACHA20</Ciphers></Transport>
  </Transports>
  <TransactionLog><JournalDirectory>{d}/journal</JournalDirectory>
    <Topic><Name>work</Name><MessageType>json</MessageType></Topic></TransactionLog>
  <SOW>
    <Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
      <Durability>transient</Durability></Topic>
    <Queue><Name>work</Name><MessageType>json</MessageType><LeasePeriod>30s</LeasePeriod></Queue>
  </SOW>
</AMPSConfig>"""

_ssl_ready: list[str] = []


def _trust(cert) -> None:
    """The client's TLS is process-wide: load it once, trusting every test's certificate."""
    if not _ssl_ready:
        AMPS.ssl_init()
        AMPS.ssl_set_verify(1)
        _ssl_ready.append("init")
    AMPS.ssl_load_verify_locations(str(cert), None)


@pytest.fixture
def tls_clients(tmp_path):
    cert, key = self_signed(tmp_path / "tls")
    _trust(cert)
    srv = start_server(TLS_CONFIG.format(d=tmp_path, cert=cert, key=key), "tls.xml")
    assert srv.uri.startswith("tcps://")
    yield from clients_for(srv.uri)
    srv.stop()


def test_pub_sub_sow_and_queue_over_tcps(tls_clients):
    sub, pub = tls_clients(), tls_clients()
    got = Collector()
    sub.subscribe(got, "orders", "/qty > 10")
    for i, qty in enumerate((5, 20, 30)):
        pub.publish("orders", json.dumps({"id": i, "qty": qty}))
    pub.flush(5000)
    assert [json.loads(d)["qty"] for _, _, d, _, _ in got.wait_for(2)] == [20, 30]

    sow = Inbox.of(pub, AMPS.Command("sow").set_topic("orders").set_filter("/qty >= 20"))
    assert sorted(d["id"] for kind, d in sow.take() if kind == "sow") == [1, 2]

    pub.publish("work", json.dumps({"job": 1}))
    pub.flush(5000)
    worker = tls_clients()
    jobs = Collector()

    def take_job(m) -> None:
        jobs(m)
        m.ack()

    worker.subscribe(take_job, "work")
    (delivery,) = jobs.wait_for(1)
    assert json.loads(delivery[2]) == {"job": 1}
    worker.flush(5000)
    worker.close()  # the acked job is gone: a new worker finds the queue empty
    later = Inbox.of(tls_clients(), AMPS.Command("subscribe").set_topic("work"))
    assert later.take() == []


def test_plain_tcp_client_is_not_served_on_a_tls_port(tmp_path):
    cert, key = self_signed(tmp_path / "tls")
    srv = start_server(TLS_CONFIG.format(d=tmp_path, cert=cert, key=key), "tls.xml")
    try:
        c = AMPS.Client("plain-on-tls")
        with pytest.raises(AMPS.AMPSException):
            c.connect(srv.uri.replace("tcps://", "tcp://"))
            c.logon(2000)
        c.close()
    finally:
        srv.stop()
