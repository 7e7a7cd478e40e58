"""docs/guides/coming-from-amps.md, "spark": every line of its side-by-side table run as printed
(spark's words through ``amps-spark``, and the ``amps-emulator-client`` equivalent) against a
server on port 0, with what it prints checked against the table and the shape of the
guide's examples (the patterns of tests/integration/cli/test_spark_cli.py)."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading

import pytest

from tests.integration.cli.test_spark_cli import DELETED, PUBLISHED, RECEIVED
from tests.support.clients import clients_for
from tests.support.paths import ROOT
from tests.support.servers import config_xml, start_server, until

CONFIG = """<SOW><Topic><Name>order</Name><MessageType>json</MessageType><Key>/id</Key>
  <Durability>transient</Durability></Topic></SOW>"""
#: the page's commands as shell functions on this worktree's code (not whatever is installed)
FUNCTIONS = (f'py() {{ "{sys.executable}" -m "$@"; }}; '
             "amps-spark() { py amps_emulator.protocol.spark_cli \"$@\"; }; "
             "spark() { amps-spark \"$@\"; }; "
             "amps-emulator-client() { py amps_emulator.protocol.client_cli \"$@\"; }; ")


def readme_rows() -> dict[str, tuple[str, str]]:
    """The table's rows by spark command: (the spark line, the amps-emulator-client line)."""
    text = (ROOT / "docs" / "guides" / "coming-from-amps.md").read_text()
    section = text.split("\n## spark\n", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, tuple[str, str]] = {}
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        spark_line = re.findall(r"`([^`]+)`", cells[0])[0].replace("\\|", "|")
        client_line = re.findall(r"`([^`]+)`", cells[2])[0].replace("\\|", "|")
        command = re.search(r"\bspark (\w+)", spark_line)
        assert command is not None, spark_line
        rows[command[1]] = (spark_line, client_line)
    return rows


class Shell:
    """One line of the page in bash, in a session of its own (so it can be stopped whole)."""

    def __init__(self, line: str) -> None:
        self.proc = subprocess.Popen(
            ["bash", "-c", FUNCTIONS + line], cwd=ROOT, text=True, start_new_session=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines: queue.Queue[str] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for ln in self.proc.stdout:
            self.lines.put(ln.rstrip("\n"))

    def line(self, timeout: float = 15.0) -> str:
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            self.stop()
            assert self.proc.stderr is not None
            raise AssertionError(f"no output; stderr: {self.proc.stderr.read()}") from None

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
        self.proc.wait(timeout=15)

    def finish(self) -> tuple[int, list[str], list[str]]:
        """Wait for it to end: (status, every line of standard output, of standard error)."""
        self.proc.wait(timeout=60)
        self.reader.join(timeout=15)
        assert self.proc.stderr is not None
        err = self.proc.stderr.read()
        out = []
        while not self.lines.empty():
            out.append(self.lines.get())
        return self.proc.returncode, out, err.splitlines()


def subscriptions(srv, count: int) -> bool:
    """True once the server holds exactly ``count`` subscriptions."""
    return until(lambda: srv.call(
        lambda: sum(len(c.subs) for c in srv.server.broker.by_name.values()) == count))


def run(line: str) -> tuple[int, list[str], list[str]]:
    return Shell(line).finish()


@pytest.fixture
def spark_srv(tmp_path):
    s = start_server(config_xml(tmp_path, extra=CONFIG))
    yield s
    s.stop()


def test_the_tables_lines_run_and_print_what_it_says(spark_srv):
    rows = readme_rows()
    assert list(rows) == ["ping", "publish", "sow", "subscribe", "sow_and_subscribe",
                          "sow_delete"]
    port = spark_srv.uri.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)[1]
    for command, (spark_line, client_line) in list(rows.items()):
        assert "localhost:9007" in spark_line and "localhost:9007" in client_line
        assert client_line.split()[:2] == ["amps-emulator-client", command] or \
            client_line.split("| ")[1].split()[:2] == ["amps-emulator-client", command]
        rows[command] = (spark_line.replace("localhost:9007", f"localhost:{port}"),
                         client_line.replace("localhost:9007", f"localhost:{port}"))
    official = next(clients_for(spark_srv.uri))("checker")

    rc, out, _ = run(rows["ping"][0])
    assert rc == 0 and re.fullmatch(rf"Successfully connected to tcp://[^@/]+@localhost:{port}"
                                    r"/amps/json", out[0]), out
    rc, out, _ = run(rows["ping"][1])
    assert rc == 0 and set(json.loads(out[0])) == {"server", "version", "round_trip_ms"}
    assert json.loads(out[0])["version"] == "5.3.4.0"

    rc, out, err = run(rows["publish"][0])
    assert rc == 0 and out == [] and (m := PUBLISHED.fullmatch(err[0])) and m[1] == "1"
    rc, out, err = run(rows["publish"][1])
    assert rc == 0 and re.fullmatch(r"published 1 messages to order in \d+\.\d{3}s \(\d+/s\)",
                                    (out + err)[0]), (out, err)

    rc, out, err = run(rows["sow"][0])
    assert rc == 0 and out == ['{"id":1,"qty":5}']
    assert (m := RECEIVED.fullmatch(err[0])) and m[1] == "1"
    rc, out, err = run(rows["sow"][1])
    record = json.loads(out[0])
    assert rc == 0 and (record["c"], record["t"], record["data"]) == ("sow", "order",
                                                                       {"id": 1, "qty": 5})
    assert "1 records" in out + err

    streaming = Shell(rows["subscribe"][0])
    try:
        assert subscriptions(spark_srv, 1)
        official.publish("order", json.dumps({"id": 1, "qty": 6}))
        assert streaming.line() == '{"id": 1, "qty": 6}'
    finally:
        streaming.stop()
    assert subscriptions(spark_srv, 0)
    client = Shell(rows["subscribe"][1])
    assert subscriptions(spark_srv, 1)
    official.publish("order", json.dumps({"id": 1, "qty": 7}))
    rc, out, _ = client.finish()
    message = json.loads(out[0])
    assert rc == 0 and (message["c"], message["data"]) == ("p", {"id": 1, "qty": 7})

    streaming = Shell(rows["sow_and_subscribe"][0])
    try:
        assert streaming.line() == '{"id": 1, "qty": 7}'  # the record, then the update
        official.publish("order", json.dumps({"id": 2, "qty": 8}))
        assert streaming.line() == '{"id": 2, "qty": 8}'
    finally:
        streaming.stop()
    rc, out, _ = run(rows["sow_and_subscribe"][1])
    assert rc == 0 and [json.loads(x)["c"] for x in out] == ["sow"]  # -n 1: the first record

    rc, out, err = run(rows["sow_delete"][0])
    assert rc == 0 and out == [] and (m := DELETED.fullmatch(err[0])) and m[1] == "1"
    official.publish("order", json.dumps({"id": 1, "qty": 9}))
    official.flush(5000)
    rc, out, _ = run(rows["sow_delete"][1])
    assert rc == 0 and json.loads(out[0]) == {"topic": "order", "records_deleted": 1}
    official.close()
