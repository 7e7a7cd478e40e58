"""The config the docs' command-line session and spark table start the server with
(``examples/orders/amps.xml``) is valid and has the SOW topics those lines query."""

from __future__ import annotations

import os

from amps_emulator.config import default_config, load_config, loads_config, sample_config
from tests.support.paths import ROOT


def test_the_example_config_has_the_sow_topics_the_docs_query():
    for page in ("getting-started/cli-client.md", "guides/coming-from-amps.md"):
        assert "amps-emulator examples/orders/amps.xml" in (ROOT / "docs" / page).read_text()
    cfg = load_config(ROOT / "examples" / "orders" / "amps.xml")
    keys = {t.name: list(t.keys) for t in cfg.sow_topics}
    assert keys == {"orders": ["/id"], "order": ["/id"]}
    assert cfg.transports[0].port == 9007


def _data_dirs(cfg) -> set[str]:
    """Every directory a configuration writes data to (journal, SOW files, log files)."""
    dirs = {os.path.normpath(cfg.transaction_log.journal_directory)} if cfg.transaction_log else set()
    dirs |= {os.path.normpath(os.path.dirname(t.resolved_file_name))
             for t in cfg.sow_topics if t.resolved_file_name}
    dirs |= {os.path.normpath(os.path.dirname(t.file_name)) for t in cfg.logging if t.file_name}
    return dirs


def _overlap(a: str, b: str) -> bool:
    return a == b or a.startswith(b + os.sep) or b.startswith(a + os.sep)


def test_the_example_keeps_its_data_apart_from_the_builtin_and_sample_configs():
    """Records published under the built-in config (./amps-data) never show up in the
    example's SOW or journal, nor the other way round."""
    mine = _data_dirs(load_config(ROOT / "examples" / "orders" / "amps.xml"))
    assert mine == {"orders-data/journal", "orders-data/sow"}
    others = _data_dirs(default_config()) | _data_dirs(loads_config(sample_config(), "sample.xml"))
    assert others and not any(_overlap(m, o) for m in mine for o in others)
