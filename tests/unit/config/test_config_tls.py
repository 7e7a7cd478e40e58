"""TLS and WebSocket transports in the config: what is served, and located errors."""

from __future__ import annotations

import pytest

from amps_emulator.config import ConfigError, loads_config
from tests.support.tls import self_signed
from tests.unit.config.test_config_errors import line_of, only_error, wrap


def _transport(type_: str = "tcps", protocol: str = "amps", extra: str = "") -> str:
    return wrap(f"""
        <Transports>
            <Transport>
                <Name>secure</Name><Type>{type_}</Type><InetAddr>9443</InetAddr>
                <Protocol>{protocol}</Protocol>
                {extra}
            </Transport>
        </Transports>
    """)


@pytest.fixture(scope="module")
def pem(tmp_path_factory):
    return self_signed(tmp_path_factory.mktemp("tls"))


@pytest.mark.parametrize(("type_", "protocol"), [("tcps", "amps"), ("tcp", "amps"),
                                                 ("tcps", "websocket"), ("tcp", "websocket")])
def test_certificate_and_key_make_a_tls_transport(pem, type_, protocol) -> None:
    cert, key = pem
    cfg = loads_config(_transport(type_, protocol, f"<Certificate>{cert}</Certificate>"
                                  f"<PrivateKey>{key}</PrivateKey><Ciphers>HIGH</Ciphers>"))
    (t,) = cfg.transports
    assert cfg.warnings == ()
    assert (t.tls, t.protocol, t.certificate, t.private_key, t.ciphers) == (
        True, protocol, str(cert), str(key), "HIGH")


def test_websocket_without_tls() -> None:
    cfg = loads_config(_transport("tcp", "websocket"))
    assert cfg.warnings == () and [(t.protocol, t.tls) for t in cfg.transports] == [("websocket", False)]


def test_tcps_needs_certificate_and_key() -> None:
    text = _transport("tcps")
    e = only_error(text)
    assert e.line == line_of(text, "<Transport>") and "requires <Certificate> and <PrivateKey>" in e.reason


def test_key_without_certificate(pem) -> None:
    text = _transport("tcp", extra=f"<PrivateKey>{pem[1]}</PrivateKey>")
    assert "<PrivateKey> without <Certificate>" in only_error(text).reason


@pytest.mark.parametrize("which", ["Certificate", "PrivateKey"])
def test_unreadable_file_is_reported_at_its_element(pem, tmp_path, which) -> None:
    files = {"Certificate": str(pem[0]), "PrivateKey": str(pem[1])}
    files[which] = str(tmp_path / "missing.pem")
    text = _transport(extra="".join(f"<{k}>{v}</{k}>" for k, v in files.items()))
    e = only_error(text)
    assert e.line == line_of(text, f"<{which}>")
    assert f"cannot read {which} {tmp_path / 'missing.pem'}" in e.reason


def test_key_that_does_not_match_the_certificate(pem, tmp_path) -> None:
    _, other_key = self_signed(tmp_path / "other")
    text = _transport(extra=f"<Certificate>{pem[0]}</Certificate><PrivateKey>{other_key}</PrivateKey>")
    e = only_error(text)
    assert e.line == line_of(text, "<Certificate>") and "cannot load certificate" in e.reason


def test_ciphers_that_select_nothing(pem) -> None:
    text = _transport(extra=f"<Certificate>{pem[0]}</Certificate><PrivateKey>{pem[1]}</PrivateKey>"
                            "<Ciphers>NO-SUCH-CIPHER</Ciphers>")
    e = only_error(text)
    assert e.line == line_of(text, "<Ciphers>") and "NO-SUCH-CIPHER" in e.reason


def test_server_start_fails_with_file_and_line_when_the_files_went_away(pem, tmp_path) -> None:
    import asyncio
    import shutil

    from amps_emulator.server.app import Server

    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    shutil.copy(pem[0], cert)
    shutil.copy(pem[1], key)
    text = _transport(extra=f"<Certificate>{cert}</Certificate><PrivateKey>{key}</PrivateKey>")
    cfg = loads_config(text, "tls.xml")
    key.unlink()

    with pytest.raises(ConfigError) as info:
        asyncio.run(Server(cfg).start())
    assert str(info.value).startswith(f"tls.xml:{line_of(text, '<Transport>')}: ")
    assert "cannot read PrivateKey" in str(info.value)


def test_sample_config_has_a_websocket_transport_and_a_tls_example() -> None:
    from amps_emulator.config import sample_config

    text = sample_config()
    cfg = loads_config(text, "sample.xml")
    assert [t.protocol for t in cfg.transports if t.protocol == "websocket"] == ["websocket"]
    assert "<Type>tcps</Type>" in text and "<Certificate>" in text  # commented out: no files


# --- SecureSocketProtocols and Ciphers -----------------------------------------------------

def _tls(pem, extra: str = "", type_: str = "tcps") -> str:
    return _transport(type_, extra=f"<Certificate>{pem[0]}</Certificate><PrivateKey>{pem[1]}</PrivateKey>"
                                   + extra)


def test_secure_socket_protocols_are_read_oldest_first(pem) -> None:
    cfg = loads_config(_tls(pem, "<SecureSocketProtocols>TLSv1.3  tlsv1.2</SecureSocketProtocols>"))
    (t,) = cfg.transports
    assert cfg.warnings == () and t.secure_socket_protocols == ("TLSv1.2", "TLSv1.3")
    (plain,) = loads_config(_tls(pem)).transports
    assert plain.secure_socket_protocols is None  # AMPS's default: TLSv1.1 TLSv1.2 TLSv1.3


def test_the_server_context_negotiates_only_the_protocols_listed(pem) -> None:
    import ssl

    from amps_emulator.config.tls import server_context

    only13 = server_context(str(pem[0]), str(pem[1]), protocols=("TLSv1.3",))
    assert (only13.minimum_version, only13.maximum_version) == (ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_3)
    default = server_context(str(pem[0]), str(pem[1]))
    assert (default.minimum_version, default.maximum_version) == (ssl.TLSVersion.TLSv1_1, ssl.TLSVersion.TLSv1_3)
    gap = server_context(str(pem[0]), str(pem[1]), protocols=("TLSv1.1", "TLSv1.3"))
    assert gap.options & ssl.OP_NO_TLSv1_2 and not gap.options & ssl.OP_NO_TLSv1_3


@pytest.mark.parametrize(("value", "says"), [("TLSv1.3 TLSv2", "unknown protocol 'TLSv2'"),
                                             ("TLS1.2", "unknown protocol 'TLS1.2'"),
                                             (" ", "empty <SecureSocketProtocols>")])
def test_a_bad_protocol_list_is_refused_at_its_line(pem, value, says) -> None:
    text = _tls(pem, f"\n<SecureSocketProtocols>{value}</SecureSocketProtocols>")
    e = only_error(text)
    assert e.line == line_of(text, "<SecureSocketProtocols>") and says in e.reason, e


def test_protocols_this_openssl_cannot_negotiate_are_warned_about(pem) -> None:
    text = _tls(pem, "\n<SecureSocketProtocols>SSLv2 TLSv1.3</SecureSocketProtocols>")
    cfg = loads_config(text)
    (w,) = cfg.warnings
    assert w.line == line_of(text, "<SecureSocketProtocols>") and "SSLv2 cannot be negotiated" in w.reason
    assert cfg.transports[0].secure_socket_protocols == ("SSLv2", "TLSv1.3")
    text = _tls(pem, "\n<SecureSocketProtocols>SSLv2</SecureSocketProtocols>")
    e = only_error(text)
    assert e.line == line_of(text, "<SecureSocketProtocols>") and "none of SSLv2" in e.reason


def test_tls_settings_on_a_plain_transport_are_warned_about() -> None:
    text = _transport("tcp", extra="\n<SecureSocketProtocols>TLSv1.3</SecureSocketProtocols>")
    (w,) = loads_config(text).warnings
    assert w.line == line_of(text, "<SecureSocketProtocols>") and "the transport is not TLS" in w.reason


REPL = """<AMPSConfig>
  <Name>A</Name>
  <Transports>
    <Transport><Name>clients</Name><Type>tcp</Type><InetAddr>0</InetAddr></Transport>
    <Transport><Name>amps-replication</Name><Type>amps-replication-secure</Type><InetAddr>0</InetAddr>
      <Certificate>{cert}</Certificate><PrivateKey>{key}</PrivateKey>
      {listener}
    </Transport>
  </Transports>
  <TransactionLog><JournalDirectory>j</JournalDirectory>
    <Topic><Name>.*</Name><MessageType>json</MessageType></Topic></TransactionLog>
  <Replication>
    <Destination><Group>B</Group><SyncType>async</SyncType>
      <Topic><Name>.*</Name><MessageType>json</MessageType></Topic>
      <Transport><Type>amps-replication-secure</Type><InetAddr>9109</InetAddr>
        {dest}
      </Transport>
    </Destination>
  </Replication>
</AMPSConfig>
"""


def test_the_replication_transport_takes_protocols_and_ciphers(pem) -> None:
    text = REPL.format(cert=pem[0], key=pem[1], dest="<Ciphers>ECDHE+AESGCM</Ciphers>",
                       listener="<SecureSocketProtocols>TLSv1.3</SecureSocketProtocols>"
                                "<Ciphers>ECDHE+AESGCM</Ciphers>")
    cfg = loads_config(text)
    assert cfg.warnings == ()
    listener = cfg.replication_listener
    assert (listener.secure_socket_protocols, listener.ciphers) == (("TLSv1.3",), "ECDHE+AESGCM")
    (tr,) = cfg.replication.destinations[0].transports
    assert tr.ciphers == "ECDHE+AESGCM"
    offered = {c["name"] for c in tr.client_context().get_ciphers() if c["protocol"] != "TLSv1.3"}
    assert offered and all("ECDHE" in n and "GCM" in n for n in offered), offered


@pytest.mark.parametrize(("listener", "dest", "tag"), [
    ("<SecureSocketProtocols>TLSv9</SecureSocketProtocols>", "", "<SecureSocketProtocols>"),
    ("", "<Ciphers>NO-SUCH-CIPHER</Ciphers>", "<Ciphers>"),
])
def test_bad_replication_tls_settings_are_refused_at_their_line(pem, listener, dest, tag) -> None:
    text = REPL.format(cert=pem[0], key=pem[1], listener=listener, dest=dest)
    e = only_error(text)
    assert e.line == line_of(text, tag), e


# --- PerMessageDeflate ---------------------------------------------------------------------

@pytest.mark.parametrize(("value", "enabled", "warned"), [
    (None, True, None), ("enabled", True, None), ("disabled", False, None), ("Disabled", False, None),
    ("off", True, "neither enabled nor disabled"),
])
def test_per_message_deflate_is_on_unless_disabled(value, enabled, warned) -> None:
    extra = "" if value is None else f"\n<PerMessageDeflate>{value}</PerMessageDeflate>"
    text = _transport("tcp", "websocket", extra)
    cfg = loads_config(text)
    assert cfg.transports[0].per_message_deflate is enabled
    if warned is None:
        assert cfg.warnings == ()
    else:
        (w,) = cfg.warnings
        assert w.line == line_of(text, "<PerMessageDeflate>") and warned in w.reason


def test_per_message_deflate_on_an_amps_transport_is_warned_about() -> None:
    text = _transport("tcp", "amps", "\n<PerMessageDeflate>disabled</PerMessageDeflate>")
    (w,) = loads_config(text).warnings
    assert w.line == line_of(text, "<PerMessageDeflate>") and "not websocket" in w.reason
