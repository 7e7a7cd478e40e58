"""The Prometheus text the Admin interface writes, read back by the ``prometheus_client``
parser: label values with quotes, backslashes and line breaks, counters' ``_total`` names."""

from __future__ import annotations

import pytest

from amps_emulator.server.ops.metrics import _Text

parser = pytest.importorskip("prometheus_client.parser")


def test_awkward_label_values_survive_the_round_trip():
    out = _Text()
    names = ['say "hi"', "back\\slash", "two\nlines", "ünïcödé"]
    out.family("amps_client_messages_in", "counter", "Messages.",
               [({"client": n}, i) for i, n in enumerate(names)])
    out.family("amps_uptime_seconds", "gauge", "Seconds.", [({}, 1.25)])
    families = list(parser.text_string_to_metric_families("\n".join(out.lines) + "\n"))
    assert [(f.name, f.type) for f in families] == [("amps_client_messages_in", "counter"),
                                                    ("amps_uptime_seconds", "gauge")]
    samples = families[0].samples
    assert [s.name for s in samples] == ["amps_client_messages_in_total"] * 4
    assert [s.labels["client"] for s in samples] == names
    assert families[1].samples[0].value == 1.25
