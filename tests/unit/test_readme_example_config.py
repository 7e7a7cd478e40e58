"""The config the docs' command-line session and spark table start the server with
(``examples/orders/amps.xml``) is valid and has the SOW topics those lines query."""

from __future__ import annotations

from pathlib import Path

from amps_emulator.config import load_config

ROOT = Path(__file__).resolve().parents[2]


def test_the_example_config_has_the_sow_topics_the_docs_query():
    for page in ("getting-started/cli-client.md", "guides/coming-from-amps.md"):
        assert "amps-emulator examples/orders/amps.xml" in (ROOT / "docs" / page).read_text()
    cfg = load_config(ROOT / "examples" / "orders" / "amps.xml")
    keys = {t.name: list(t.keys) for t in cfg.sow_topics}
    assert keys == {"orders": ["/id"], "order": ["/id"]}
    assert cfg.transports[0].port == 9007
