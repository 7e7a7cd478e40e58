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
