"""The HTTP servers' options: the Admin section's ``Header``, ``AccessControlAllowOrigin``,
``AnonymousPaths``, ``SessionOptions``, HTTPS and Galvanometer elements, and a websocket
``Protocol``'s (and ``Transport``'s) ``HTTPHeader``, ``WWWAuthenticate``, ``TrustedAdmin``: what
they read into, and every bad value an error at its own line."""

from __future__ import annotations

import pytest

from amps_emulator.config import ConfigError, loads_config
from amps_emulator.config.httpd.admin import session_max_age
from amps_emulator.config.httpd.headers import MAX_HEADERS, parse_header
from tests.support.tls import self_signed

AUTH = "<Authentication><Module>amps-default-authentication-module</Module></Authentication>"
WS = ("<Transport><Name>ws</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>"
      "<Protocol>{protocol}</Protocol>{extra}</Transport>")


def wrap(admin: str | None = "", protocols: str = "", extra: str = "", protocol: str = "websocket",
         top: str = "") -> str:
    """One element per line, so each error's line is the line of its element."""
    lines = ["<AMPSConfig>", "<Name>t</Name>", top]
    if protocols:
        lines += ["<Protocols>", protocols, "</Protocols>"]
    if admin is not None:
        lines += ["<Admin>", "<InetAddr>127.0.0.1:0</InetAddr>", admin, "</Admin>"]
    lines += ["<Transports>", WS.format(protocol=protocol, extra=extra), "</Transports>",
              "</AMPSConfig>"]
    return "\n".join(lines)


def line_of(text: str, needle: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if needle in line)


def only_error(text: str) -> tuple[int, str]:
    with pytest.raises(ConfigError) as info:
        loads_config(text, "bad.xml")
    errs = info.value.errors
    assert len(errs) == 1, errs
    return errs[0].line, errs[0].reason


@pytest.mark.parametrize("text, header", [
    ('X-Special-Information: "AMPS Admin"', ("X-Special-Information", '"AMPS Admin"')),
    ("Vary:Origin", ("Vary", "Origin")),
    ("X-Empty:", ("X-Empty", "")),
])
def test_a_header_is_its_name_and_value_as_written(text, header):
    assert parse_header(text) == header


@pytest.mark.parametrize("text, why", [
    ("X-No-Colon", "not a header"),
    ("X Bad Name: v", "not a header name"),
    (": v", "not a header name"),
    ("X-Split: a\r\nX-Injected: b", "control character"),
    ("X-Split: a\nContent-Length: 0", "control character"),
    ("X-Nul: a\x00b", "control character"),
    ("X-Utf: caf\u00e9", "not ASCII"),
    ("Content-Length: 5", "frames the message"),
    ("transfer-encoding: chunked", "frames the message"),
    ("Connection: keep-alive", "frames the message"),
    ("Upgrade: h2c", "frames the message"),
    ("Sec-WebSocket-Accept: x", "frames the message"),
    ("X-Long: " + "a" * 5000, "longer than"),
])
def test_a_header_that_could_break_the_response_is_refused(text, why):
    with pytest.raises(ValueError, match=why):
        parse_header(text)


def test_admin_options_are_read():
    text = wrap("\n".join([
        "<Header>X-Special-Information: \"AMPS Admin\"</Header>",
        "<Header>Vary: Origin</Header>",
        r"<AccessControlAllowOrigin>^https://\w+\.my\.com$</AccessControlAllowOrigin>",
        "<AnonymousPaths>^/amps$</AnonymousPaths>",
        "<SessionOptions>max-age=60; path=/; HttpOnly; Secure</SessionOptions>",
        "<Galvanometer>disabled</Galvanometer>",
        "<SQLTransportInetAddr>proxy/amps/wss</SQLTransportInetAddr>",
        AUTH]))
    cfg = loads_config(text)
    a = cfg.admin
    assert a is not None
    assert a.headers == (("X-Special-Information", '"AMPS Admin"'), ("Vary", "Origin"))
    assert (a.allow_origin, a.anonymous_paths) == (r"^https://\w+\.my\.com$", "^/amps$")
    assert a.session_options == "max-age=60; path=/; HttpOnly; Secure"
    assert (a.galvanometer, a.sql_transport_inet_addr, a.tls) == (False, "proxy/amps/wss", False)
    assert not [w for w in cfg.warnings if "Admin" in w.reason or "<Header>" in w.reason]
    assert session_max_age(a.session_options) == 60.0
    assert session_max_age(None) == 86400.0 and session_max_age("path=/") == 86400.0


@pytest.mark.parametrize("element, why", [
    ("<Header>X-No-Colon</Header>", "not a header"),
    ("<Header>X-A: 1&#13;&#10;Set-Cookie: x=1</Header>", "control character"),
    ("<Header>Content-Length: 0</Header>", "frames the message"),
    ("<AccessControlAllowOrigin>(</AccessControlAllowOrigin>", "invalid regular expression"),
    ("<AnonymousPaths>^/amps/(</AnonymousPaths>", "invalid regular expression"),
    ("<SessionOptions>path=/&#10;Set-Cookie: x</SessionOptions>", "without CR or LF"),
    ("<SessionOptions>max-age=a day</SessionOptions>", "not a number of seconds"),
    ("<Galvanometer>maybe</Galvanometer>", "invalid switch"),
    ('<WWWAuthenticate>Basic realm="x"&#13;&#10;Set-Cookie: a=b</WWWAuthenticate>', "control character"),
])
def test_a_bad_admin_option_is_an_error_at_its_line(element, why):
    text = wrap(element + "\n" + AUTH)
    line, reason = only_error(text)
    assert line == line_of(text, element[:12]) and why in reason, reason


def test_more_headers_than_the_limit_is_an_error():
    text = wrap("\n".join(f"<Header>X-{i}: v</Header>" for i in range(MAX_HEADERS + 1)))
    line, reason = only_error(text)
    assert line == line_of(text, "<Admin>") and f"at most {MAX_HEADERS}" in reason


def test_https_files_load_at_config_time(tmp_path):
    cert, key = self_signed(tmp_path)
    ok = wrap(f"<Certificate>{cert}</Certificate>\n<PrivateKey>{key}</PrivateKey>\n"
              "<Ciphers>HIGH</Ciphers>\n<SecureSocketProtocols>TLSv1.2 TLSv1.3</SecureSocketProtocols>")
    a = loads_config(ok).admin
    assert a is not None and a.tls and a.ciphers == "HIGH"
    assert a.secure_socket_protocols == ("TLSv1.2", "TLSv1.3")
    for element, why, bad in [
        ("<Certificate>", "cannot read Certificate", f"<Certificate>{tmp_path}/none.pem</Certificate>\n"
                                                    f"<PrivateKey>{key}</PrivateKey>"),
        ("<PrivateKey>", "cannot read PrivateKey", f"<Certificate>{cert}</Certificate>\n"
                                                  f"<PrivateKey>{tmp_path}/none.pem</PrivateKey>"),
        ("<Ciphers>", "Ciphers 'NO-SUCH-CIPHER'", f"<Certificate>{cert}</Certificate>\n<PrivateKey>{key}"
                                                  "</PrivateKey>\n<Ciphers>NO-SUCH-CIPHER</Ciphers>"),
        ("<Certificate>", "without <PrivateKey>", f"<Certificate>{cert}</Certificate>"),
    ]:
        text = wrap(bad)
        line, reason = only_error(text)
        assert line == line_of(text, element) and why in reason, reason


def test_ciphers_without_a_certificate_are_warned_about():
    text = wrap("<Ciphers>HIGH</Ciphers>")
    got = [(w.line, w.reason) for w in loads_config(text).warnings]
    assert [line for line, r in got if "<Ciphers> in <Admin> has no effect" in r] == \
        [line_of(text, "<Ciphers>")]


def test_session_options_and_anonymous_paths_are_warned_about_where_admin_asks_no_one():
    text = wrap("<AnonymousPaths>^/amps$</AnonymousPaths>\n<SessionOptions>path=/</SessionOptions>")
    got = {w.reason.split(" ")[0]: w.line for w in loads_config(text).warnings}
    assert got["<AnonymousPaths>"] == line_of(text, "<AnonymousPaths>")
    assert got["<SessionOptions>"] == line_of(text, "<SessionOptions>")


def test_anonymous_paths_that_open_administrator_actions_are_warned_about():
    text = wrap("<AnonymousPaths>^/amps</AnonymousPaths>\n" + AUTH)
    warned = [w for w in loads_config(text).warnings if w.reason.startswith("<AnonymousPaths>")]
    assert [w.line for w in warned] == [line_of(text, "<AnonymousPaths>")]
    assert "/amps/administrator/clients/1/disconnect" in warned[0].reason
    narrow = wrap("<AnonymousPaths>^/amps/instance/replication</AnonymousPaths>\n" + AUTH)
    assert not [w for w in loads_config(narrow).warnings if "AnonymousPaths" in w.reason]


PORTAL = ("<Protocol>\n<Name>portal</Name>\n<Module>websocket</Module>\n{options}\n</Protocol>")


def test_websocket_protocol_options_are_read():
    text = wrap(AUTH, PORTAL.format(options="\n".join([
        '<WWWAuthenticate>Basic realm="HTTP Special"</WWWAuthenticate>',
        "<TrustedAdmin>enabled</TrustedAdmin>",
        "<HTTPHeader>X-Frame-Options: DENY</HTTPHeader>",
        "<HTTPHeader>X-Other: 1</HTTPHeader>"])),
        extra="<HTTPHeader>X-Transport: yes</HTTPHeader>", protocol="portal")
    cfg = loads_config(text)
    (p,) = cfg.protocols
    assert (p.www_authenticate, p.trusted_admin) == ('Basic realm="HTTP Special"', True)
    assert p.http_headers == (("X-Frame-Options", "DENY"), ("X-Other", "1"))
    (t,) = cfg.transports
    assert t.http_headers == (("X-Transport", "yes"),)
    assert not cfg.warnings, cfg.warnings


@pytest.mark.parametrize("option, why", [
    ("<HTTPHeader>Transfer-Encoding: chunked</HTTPHeader>", "frames the message"),
    ("<HTTPHeader>no colon</HTTPHeader>", "not a header"),
    ("<WWWAuthenticate>Basic</WWWAuthenticate>", "needs realm"),
    ("<TrustedAdmin>sometimes</TrustedAdmin>", "invalid switch"),
    ('<WWWAuthenticate>Basic realm="x"&#10;X-Injected: 1</WWWAuthenticate>', "control character"),
])
def test_a_bad_websocket_option_is_an_error_at_its_line(option, why):
    text = wrap(AUTH, PORTAL.format(options=option), protocol="portal")
    line, reason = only_error(text)
    assert line == line_of(text, option[:12]) and why in reason, reason


def test_negotiate_and_unknown_options_and_untrusted_admins_are_warned_about():
    text = wrap(None, PORTAL.format(options="\n".join([
        "<WWWAuthenticate>Negotiate</WWWAuthenticate>",
        "<TrustedAdmin>true</TrustedAdmin>",
        "<Compression>zlib</Compression>"])), protocol="portal")
    cfg = loads_config(text)
    (p,) = cfg.protocols
    assert p.www_authenticate is None  # not served: the upgrade is not challenged
    got = {w.reason.split(" ")[0]: w.line for w in cfg.warnings}
    assert got["<WWWAuthenticate>"] == line_of(text, "Negotiate")
    assert got["<Compression>"] == line_of(text, "<Compression>")
    assert got["<Protocol>"] == line_of(text, "<Protocol>")  # TrustedAdmin: no Admin sessions
    assert "TrustedAdmin" in next(w.reason for w in cfg.warnings if w.reason.startswith("<Protocol>"))


def test_options_of_another_module_and_headers_of_a_tcp_transport_are_warned_about():
    text = wrap("", "<Protocol><Name>c</Name><Module>amps</Module>\n"
                    "<HTTPHeader>X: y</HTTPHeader></Protocol>",
                extra="<HTTPHeader>X-Transport: yes</HTTPHeader>", protocol="c")
    cfg = loads_config(text)
    assert cfg.protocols[0].http_headers == ()
    reasons = [w.reason for w in cfg.warnings]
    assert any(r.startswith("<HTTPHeader> in <Protocol> 'c' is not supported") for r in reasons)
    assert any("<HTTPHeader> has no effect" in r for r in reasons)
