"""The exec authenticator's program run: its output is the token (bounded, trimmed), its
user name argument expanded, and a slow, failing or silent program refuses the attempt
without its output in the reason."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

from amps_emulator.config.model import ReplicationAuthenticator
from amps_emulator.replication.exec_auth import run_exec_authenticator
from amps_emulator.replication.peer_auth import logon_for_link
from amps_emulator.replication.wire import LinkRefused, Logon


def program(*code: str, max_length: int = 1024, user: str = "repl") -> ReplicationAuthenticator:
    return ReplicationAuthenticator(module="exec", library="libamps_exec_authenticator.so", user=user,
                                    command=(sys.executable, "-c", "\n".join(code), "{{AMPS_USER_NAME}}"),
                                    max_length=max_length)


def run(auth: ReplicationAuthenticator, **kw) -> tuple[str, str]:
    return asyncio.run(run_exec_authenticator(auth, **kw))


def test_the_output_is_the_token_and_the_user_name_is_expanded():
    auth = program("import sys", "sys.stdout.write('tok-' + sys.argv[1] + '\\n')")
    assert run(auth) == ("repl", "tok-repl")
    assert asyncio.run(logon_for_link(auth)) == Logon("repl", "tok-repl")


def test_stdin_is_closed():
    auth = program("import sys", "print('eof' if sys.stdin.read() == '' else 'open')")
    assert run(auth)[1] == "eof"


def test_at_most_max_length_bytes_are_read_and_a_flood_does_not_block():
    auth = program("import sys", "sys.stdout.write('a' * 2_000_000)", max_length=16)
    assert run(auth) == ("repl", "a" * 16)


@pytest.mark.parametrize(("code", "reason"), [
    (("import sys", "print('s3cret-token')", "sys.exit(3)"), "exited with status 3"),
    (("pass",), "printed no credentials"),
])
def test_a_failing_or_silent_program_refuses_without_its_output(code, reason):
    with pytest.raises(LinkRefused) as info:
        run(program(*code))
    assert reason in info.value.reason and "s3cret" not in info.value.reason


def test_a_slow_program_is_stopped_at_the_time_bound(tmp_path):
    pid_file = tmp_path / "pid"
    auth = program("import os, sys, time", f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))",
                   "time.sleep(60)")
    with pytest.raises(LinkRefused, match="did not finish within 0.5 s"):
        run(auth, timeout=0.5)
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):  # killed and reaped
        os.kill(pid, 0)


def test_a_program_that_cannot_start_refuses():
    auth = ReplicationAuthenticator(module="exec", library="libamps_exec_authenticator.so", user="u",
                                    command=("/nonexistent/token-program",))
    with pytest.raises(LinkRefused, match="cannot run"):
        run(auth)
