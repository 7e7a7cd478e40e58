"""``amps-unix`` transports in the configuration: ``FileName`` required (``InetAddr`` not),
``FileMask`` an octal mode, the path checked (never a file that is not a socket), and what
has no effect warned about at its line."""

from __future__ import annotations

import socket

import pytest

from amps_emulator.config import loads_config
from tests.unit.config.test_config_errors import errors_of, line_of, only_error, wrap


def transports(*inner: str) -> str:
    return wrap("<Transports>\n" + "\n".join(
        f"<Transport><Name>t{i}</Name>\n{body}\n</Transport>" for i, body in enumerate(inner))
        + "\n</Transports>")


def unix(path: str, extra: str = "") -> str:
    return f"<Type>amps-unix</Type><Protocol>amps</Protocol>\n<FileName>{path}</FileName>{extra}"


def test_a_unix_transport_is_read_with_its_path_and_mode(tmp_path):
    cfg = loads_config(transports(unix(f"{tmp_path}/a.sock", "<FileMask>0640</FileMask>")))
    (t,) = cfg.transports
    assert (t.type, t.file_name, t.file_mask, t.inet_addr, t.tls) == (
        "amps-unix", f"{tmp_path}/a.sock", 0o640, "", False)
    assert not cfg.warnings


def test_file_name_is_required_and_inet_addr_is_not_needed():
    text = transports("<Type>amps-unix</Type><Protocol>amps</Protocol>")
    e = only_error(text)
    assert e.line == line_of(text, "<Transport>") and "requires <FileName>" in e.reason


@pytest.mark.parametrize("mask", ["999", "0x1ff", "12345", "", "rw"])
def test_a_file_mask_that_is_not_an_octal_mode_is_an_error_at_its_line(tmp_path, mask):
    text = transports(unix(f"{tmp_path}/a.sock", f"\n<FileMask>{mask}</FileMask>"))
    e = only_error(text)
    assert e.line == line_of(text, "<FileMask>") and "FileMask" in e.reason


def test_a_file_that_is_not_a_socket_is_an_error_at_file_name(tmp_path):
    (tmp_path / "plain").write_text("x")
    text = transports(unix(f"{tmp_path}/plain"))
    e = only_error(text)
    assert e.line == line_of(text, "<FileName>") and "is not a socket" in e.reason
    assert (tmp_path / "plain").read_text() == "x"


def test_a_socket_file_there_is_accepted(tmp_path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(tmp_path / "old.sock"))
    s.close()
    assert loads_config(transports(unix(f"{tmp_path}/old.sock"))).transports


@pytest.mark.parametrize("path", ["/no/such/dir/a.sock", "/tmp/" + "x" * 120, " "])
def test_a_path_that_cannot_be_bound_is_an_error(path):
    text = transports(unix(path))
    e = only_error(text)
    assert e.line == line_of(text, "<FileName>")


def test_two_transports_on_one_path_is_an_error(tmp_path):
    text = transports(unix(f"{tmp_path}/a.sock"), unix(f"{tmp_path}/a.sock"))
    e = only_error(text)
    assert e.line == line_of(text, "<Transport>", 2) and "also transport 't0'" in e.reason


def test_what_has_no_effect_is_warned_about(tmp_path):
    text = transports(
        unix(f"{tmp_path}/a.sock", "\n<InetAddr>9000</InetAddr>\n<Certificate>c.pem</Certificate>"),
        "<Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>\n<FileName>x.sock</FileName>")
    cfg = loads_config(text)
    assert [(w.line, w.reason.split(": ", 1)[1]) for w in cfg.warnings] == [
        (line_of(text, "<InetAddr>9000"), "<InetAddr> has no effect on an amps-unix transport"),
        (line_of(text, "<Certificate>"), "<Certificate> has no effect on an amps-unix transport"),
        (line_of(text, "<FileName>x.sock"),
         "<FileName> has no effect: the transport is not amps-unix")]
    assert [t.tls for t in cfg.transports] == [False, False]


def test_a_tcp_transport_still_needs_inet_addr():
    text = transports("<Type>tcp</Type><Protocol>amps</Protocol>")
    assert "missing required element <InetAddr>" in only_error(text).reason
    assert len(errors_of(transports("<Protocol>amps</Protocol>"))) == 1  # (no Type: one error)
