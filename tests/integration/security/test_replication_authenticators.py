"""The exec and multimechanism authenticators on a secured pair (the instances of
:mod:`tests.integration.security.test_replication_auth`): the destination logs on with a
token a program prints, or with an LDAP user and its password file, and the pair replicates;
a program that fails refuses the link with one log line that never holds its output."""

from __future__ import annotations

import logging
import os
import stat
import sys
from pathlib import Path

import pytest

from amps_emulator.pair import free_port
from tests.integration.security.test_replication_auth import node, replicates, start
from tests.support.servers import until

pytest.importorskip("AMPS")

EXEC = "<Module><Name>run-proc-authenticator</Name><Library>libamps_exec_authenticator.so</Library></Module>"
MULTI = "<Module><Name>multi-authenticator</Name><Library>libamps_multi_authenticator.so</Library></Module>"


def token_program(tmp_path: Path, body: str) -> Path:
    """An executable script that runs ``body`` (Python) with the user name as ``sys.argv[2]``."""
    path = tmp_path / "token-program"
    path.write_text(f"#!{sys.executable}\nimport sys\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def with_module(xml: str, module: str) -> str:
    return xml.replace("</Modules>", module + "</Modules>", 1)


def exec_logon(program: Path) -> str:
    return ("<Authenticator><Module>run-proc-authenticator</Module><Options><UserName>peer</UserName>"
            f"<Command>{program} --user \"{{{{AMPS_USER_NAME}}}}\"</Command></Options></Authenticator>")


def test_the_exec_authenticator_logs_on_with_what_its_program_prints(tmp_path):
    program = token_program(tmp_path, "assert sys.argv[1:] == ['--user', 'peer']\nprint('peer-pw')")
    a_port, b_port = free_port(), free_port()
    a = start(with_module(node("A", tmp_path / "A", a_port, peer=("B", b_port),
                               logon=exec_logon(program)), EXEC), "A")
    b = start(node("B", tmp_path / "B", b_port), "B")
    try:
        replicates(a, b)
    finally:
        b.stop()
        a.stop()


def test_the_multi_authenticator_logs_on_with_an_ldap_user_and_password_file(tmp_path):
    pw = tmp_path / "peer.pw"
    pw.write_text("peer-pw\n")
    logon = ("<Authenticator><Module>multi-authenticator</Module><Options>"
             f"<LDAP.Username>peer</LDAP.Username><LDAP.PasswordFile>{pw}</LDAP.PasswordFile>"
             "</Options></Authenticator>")
    a_port, b_port = free_port(), free_port()
    a = start(with_module(node("A", tmp_path / "A", a_port, peer=("B", b_port), logon=logon), MULTI), "A")
    b = start(node("B", tmp_path / "B", b_port), "B")
    try:
        replicates(a, b)
    finally:
        b.stop()
        a.stop()


def test_a_failing_program_refuses_the_link_and_its_output_is_never_logged(tmp_path, caplog):
    program = token_program(tmp_path, "print('peer-pw-but-failing')\nsys.exit(4)")
    a_port, b_port = free_port(), free_port()
    with caplog.at_level(logging.DEBUG):
        a = start(with_module(node("A", tmp_path / "A", a_port, peer=("B", b_port),
                                   logon=exec_logon(program)), EXEC), "A")
        b = start(node("B", tmp_path / "B", b_port), "B")
        try:
            assert until(lambda: any("exited with status 4" in r.getMessage() for r in caplog.records))
            assert not a.call(lambda: a.server.replication.state("B").connected)
        finally:
            b.stop()
            a.stop()
    assert not [r for r in caplog.records if "peer-pw" in r.getMessage()]
    assert os.path.exists(program)
