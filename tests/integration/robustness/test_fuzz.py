"""Issue 11's fuzz test: malformed and oversized frames of every kind at a running server
while an official-client publisher/subscriber pair keeps flowing. Nothing may stall that
flow for a second, drop a message of it, or leave a traceback in the server's log.

``AMPS_FUZZ_SECONDS`` (default 8) and ``AMPS_FUZZ_SEED`` (default 11) set the run; for a
long run with figures use ``bench/bench_fuzz.py``.
"""

from __future__ import annotations

import os

from tests.support.fuzz import SteadyFlow, config_extra, fuzz_in_process
from tests.support.procserver import ProcServer
from tests.support.servers import config_xml


def test_fuzzed_frames_do_not_disturb_a_steady_flow(tmp_path):
    seconds = float(os.environ.get("AMPS_FUZZ_SECONDS", "8"))
    seed = int(os.environ.get("AMPS_FUZZ_SEED", "11"))
    srv = ProcServer.with_config(tmp_path, lambda d: config_xml(d, extra=config_extra(d)))
    try:
        flow = SteadyFlow(srv.uri).start()
        stats = fuzz_in_process(srv.port, seed, seconds)
        flow.stop()
        figures = flow.figures()
        print(f"fuzz seed {seed}: {stats.frames} frames, {stats.bytes} bytes, "
              f"{stats.connections} connections in {seconds:g}s; steady flow: {figures}")
        assert srv.proc.poll() is None, "the server died"
        assert figures["received"] == figures["sent"] > 0
        assert flow.received == list(range(flow.sent)), "the steady flow lost or reordered"
        assert figures["max_latency_s"] < 1.0, f"the steady flow stalled: {figures}"
    finally:
        srv.stop()
    log = srv.stderr_path.read_text(errors="replace")
    for bad in ("Traceback", "Exception in callback", "Unhandled"):
        assert bad not in log, log[max(0, log.find(bad) - 2000):log.find(bad) + 3000]
