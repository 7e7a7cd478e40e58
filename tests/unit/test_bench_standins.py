"""The in-process benches drive the message path through stand-ins of the broker: when the
message path starts reading something new of the broker, a stand-in falls behind and its
bench stops running. Run each on a few messages so that shows here, not in a bench run."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import bench_sow_upsert


@pytest.mark.parametrize("runs", [False, True], ids=["one-by-one", "runs"])
@pytest.mark.parametrize("durability", ["persistent", "transient"])
def test_sow_upsert_bench_runs_on_the_current_message_path(tmp_path: Path, durability: str,
                                                           runs: bool) -> None:
    inserts, updates = bench_sow_upsert.run(durability, 50, 10, str(tmp_path), runs)
    assert inserts > 0 and updates > 0
