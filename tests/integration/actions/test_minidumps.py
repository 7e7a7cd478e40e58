"""Minidumps in a running server: ``GET /amps/administrator/minidump``, ``amps-action-do-minidump``
and SIGQUIT write one into ``MiniDumpDirectory``, and ``amps-action-on-minidump`` runs after
each with its path."""

from __future__ import annotations

import logging
import os
import signal
import stat

from amps_emulator.config import loads_config
from amps_emulator.server.core.minidump import NAME_RE
from tests.integration.actions.test_actions import TRANSPORTS, action, module, publish_to, watch
from tests.support.clients import logged_on
from tests.support.procserver import ProcServer
from tests.support.servers import ServerThread, until

ON_DUMP = action(module("On", "on-minidump"), publish_to("dumps", '{"path":"{{AMPS_MINIDUMP_PATH}}"}'))
ON_ADMIN_DUMP = action(module("On", "on-admin", Path="dump"), module("Do", "do-minidump"),
                       publish_to("after", '{"dumped":true}'))


def xml(directory: str, actions: str, mask: str = "0600") -> str:
    return f"""<AMPSConfig><Name>dumps-test</Name>
<MiniDumpDirectory>{directory}</MiniDumpDirectory><MiniDumpFileMask>{mask}</MiniDumpFileMask>
<Admin><InetAddr>127.0.0.1:0</InetAddr></Admin>
{TRANSPORTS}
<Actions>{actions}</Actions>
</AMPSConfig>"""


def dumps_in(directory) -> list[str]:
    return sorted(n for n in os.listdir(directory)) if os.path.isdir(directory) else []


def test_the_admin_interface_writes_one_and_on_minidump_runs(tmp_path):
    where = tmp_path / "dumps"
    srv = ServerThread(loads_config(xml(str(where), ON_DUMP), "d.xml")).start()
    try:
        c = logged_on(srv.uri, "watcher")
        box = watch(c, "dumps")
        path = srv.http("/amps/administrator/minidump")["minidump"]
        assert dumps_in(where) == [os.path.basename(path)]
        assert NAME_RE.fullmatch(os.path.basename(path))
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        text = open(path).read()
        assert "reason: Admin interface" in text and "clients: 1: watcher" in text
        assert "== threads" in text and "== asyncio tasks" in text
        assert box.wait_for(1) and box.bodies("dumps") == [{"path": path}]
        c.close()
    finally:
        srv.stop()


def test_do_minidump_writes_one_and_the_action_goes_on(tmp_path):
    where = tmp_path / "dumps"
    # an on-minidump action that asks for a dump itself: one more dump, not an endless chain
    again = action(module("On", "on-minidump"), module("Do", "do-minidump"),
                   publish_to("dumps", '{"path":"{{AMPS_MINIDUMP_PATH}}"}'))
    srv = ServerThread(loads_config(xml(str(where), ON_ADMIN_DUMP + again), "d.xml")).start()
    try:
        c = logged_on(srv.uri, "watcher")
        box = watch(c, "dumps", "after")
        assert srv.http("/amps/administrator/actions/dump")["ran"] == 1
        assert box.wait_until(lambda items: len(items) == 2)
        assert box.bodies("after") == [{"dumped": True}]
        [first] = [b["path"] for b in box.bodies("dumps")]
        assert len(dumps_in(where)) == 2 and os.path.basename(first) in dumps_in(where)
        assert "reason: amps-action-do-minidump at d.xml:" in open(first).read()
        c.close()
    finally:
        srv.stop()


def test_a_chain_of_dumps_through_a_command_stops_at_the_depth_limit(tmp_path, caplog):
    """on-minidump runs a command, then asks for a dump: the rest of an action after its
    command is as deep in the chain as its start, so the chain ends at the depth limit
    instead of dumping for ever."""
    from amps_emulator.server.services.actions import MAX_DEPTH

    where = tmp_path / "dumps"
    loop = action(module("On", "on-minidump"), module("Do", "do-execute-system", Command="true"),
                  module("Do", "do-minidump"))
    srv = ServerThread(loads_config(xml(str(where), ON_ADMIN_DUMP + loop), "d.xml")).start()
    try:
        actions = srv.server.actions
        with caplog.at_level(logging.WARNING, logger="amps_emulator.actions"):
            assert srv.http("/amps/administrator/actions/dump")["ran"] == 1
            assert until(lambda: any("deeper than" in r.getMessage() for r in caplog.records), timeout=30)
            assert until(lambda: not actions.pending, timeout=30)
        assert 2 <= len(dumps_in(where)) <= MAX_DEPTH + 1
    finally:
        srv.stop()


def test_disabled_minidumps_write_nothing(tmp_path, caplog):
    srv = ServerThread(loads_config(xml("disabled", ON_ADMIN_DUMP + ON_DUMP), "d.xml")).start()
    try:
        c = logged_on(srv.uri, "watcher")
        box = watch(c, "dumps", "after")
        with caplog.at_level(logging.INFO, logger="amps_emulator.actions"):
            srv.http("/amps/administrator/minidump", expect=409)
            srv.http("/amps/administrator/actions/dump")
            assert box.wait_for(1)
        assert box.bodies() == [{"dumped": True}]  # the action went on; no on-minidump
        assert any("minidumps are disabled" in r.getMessage() for r in caplog.records)
        assert not os.path.exists("disabled")
        c.close()
    finally:
        srv.stop()


def test_sigquit_writes_a_minidump_and_the_server_keeps_serving(tmp_path):
    where = tmp_path / "dumps"
    cfg = tmp_path / "amps.xml"
    cfg.write_text(xml(str(where), ON_DUMP, mask="0640"))
    srv = ProcServer(tmp_path / "data", cfg).start()
    try:
        srv.proc.send_signal(signal.SIGQUIT)
        [name] = until(lambda: dumps_in(where))
        assert "reason: SIGQUIT" in until(lambda: open(where / name).read())
        assert srv.proc.poll() is None
    finally:
        srv.stop()
