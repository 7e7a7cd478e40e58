"""The config the README's command-line session and spark table start the server with
(``examples/orders/amps.xml``) is valid and has the SOW topics those lines query."""

from __future__ import annotations

from amps_emulator.config import load_config
from tests.support.paths import ROOT


def test_the_readme_example_config_has_the_sow_topics_the_readme_queries():
    readme = (ROOT / "README.md").read_text()
    assert "amps-emulator examples/orders/amps.xml" in readme
    cfg = load_config(ROOT / "examples" / "orders" / "amps.xml")
    keys = {t.name: list(t.keys) for t in cfg.sow_topics}
    assert keys == {"orders": ["/id"], "order": ["/id"]}
    assert cfg.transports[0].port == 9007
