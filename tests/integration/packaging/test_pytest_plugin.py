"""The pytest plugin, as a user's project sees it: a throwaway project with its own
``config.py``, an ini ``amps_config``, a module choosing another config by marker, run by a
separate pytest process that finds the plugin through its ``pytest11`` entry point."""

from __future__ import annotations

import textwrap

from tests.support.paths import FIXTURES

pytest_plugins = ["pytester"]

ORDERS_XML = (FIXTURES / "users-app.xml").read_text()

PRICES_XML = ORDERS_XML.replace("orders", "prices").replace("/id", "/sym")

COMMON = '''
import json

def sow_keys(client, topic, field):
    return sorted(json.loads(m.get_data())[field] for m in client.sow(topic)
                  if m.get_command() == "sow")
'''

TEST_ORDERS = COMMON + '''
import pytest
import config  # the application's own module, not the emulator's

@pytest.fixture
def publisher(amps_client):
    return amps_client("publisher")

def test_the_application_keeps_its_config_module():
    assert config.GREETING == "the application's own config"

def test_clean_even_when_a_fixture_connects_first(publisher, amps_clean):
    publisher.publish("orders", '{"id": 1}')
    assert sow_keys(publisher, "orders", "id") == [1]

def test_clean_again(amps_clean, amps_client):
    c = amps_client()
    assert sow_keys(c, "orders", "id") == []
    c.publish("orders", '{"id": 2}')
    c.flush(5000)

def test_without_clean_sees_what_the_last_test_left(amps_client):
    assert sow_keys(amps_client(), "orders", "id") == [2]

def test_every_transport_is_rebound_to_a_free_local_port(amps_server):
    assert amps_server.uri.startswith("tcp://127.0.0.1:")
    assert ":9007/" not in amps_server.uri
'''

TEST_PRICES = COMMON + '''
import pytest

pytestmark = pytest.mark.amps_config("prices.xml")

def test_the_marker_chooses_the_config(amps_clean, amps_client, amps_servers, request):
    c = amps_client()
    c.publish("prices", '{"sym": "A"}')
    assert sow_keys(c, "prices", "sym") == ["A"]
    ini_server = amps_servers.get(request.config.rootpath / "amps" / "amps.xml")
    assert ini_server.uri != amps_clean.uri
'''


def test_plugin_in_a_users_project(pytester):
    pytester.makefile(".ini", pytest="[pytest]\namps_config = amps/amps.xml\n")
    pytester.makepyfile(config='GREETING = "the application\'s own config"\n')
    (pytester.path / "amps").mkdir()
    (pytester.path / "amps" / "amps.xml").write_text(ORDERS_XML)
    (pytester.path / "prices").mkdir()
    (pytester.path / "prices" / "prices.xml").write_text(PRICES_XML)
    (pytester.path / "test_orders.py").write_text(textwrap.dedent(TEST_ORDERS))
    (pytester.path / "prices" / "test_prices.py").write_text(textwrap.dedent(TEST_PRICES))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-v")
    result.assert_outcomes(passed=6)
    for made in ("journal", "sow", "amps-data", "prices/journal"):
        assert not (pytester.path / made).exists(), made  # memory mode: no files


def test_a_bad_config_fails_the_test_with_file_and_line(pytester):
    pytester.makefile(".ini", pytest="[pytest]\namps_config = amps.xml\n")
    (pytester.path / "amps.xml").write_text("<AMPSConfig>\n  <Transports><Bogus/></Transports>\n"
                                            "</AMPSConfig>\n")
    pytester.makepyfile(test_x="def test_x(amps_server):\n    pass\n")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:asyncio")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*amps.xml:2:*"])
