"""The Admin interface's one canonical form of a path (``admin_http.parse_target``) and which
requests need the ``admin`` write permission (``needs_write``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from amps_emulator.server.ops.admin_http import HttpError, needs_write, parse_target


@pytest.mark.parametrize("raw, path, fmt", [
    ("/", "/", ""),
    ("/index.html", "/", ""),
    ("/console.js", "/console.js", ""),
    ("/amps", "/amps", ""),
    ("/amps.json", "/amps", "json"),
    ("/amps/instance/clients.xml", "/amps/instance/clients", "xml"),
    ("/amps/instance/clients/", "/amps/instance/clients", ""),
    ("/amps//administrator///clients/x/disconnect", "/amps/administrator/clients/x/disconnect", ""),
    ("/amps/administrator/clients/x/disconnect.json", "/amps/administrator/clients/x/disconnect", "json"),
    ("/amps/administrator/clients/x/%64isconnect", "/amps/administrator/clients/x/disconnect", ""),
    ("/amps/administrator/clients/x/disconnect?a=1", "/amps/administrator/clients/x/disconnect", ""),
    ("/emulator//journal/", "/emulator/journal", ""),
    ("/emulator/sow/x.json", "/emulator/sow/x.json", ""),  # a topic's name, not a format
    ("/emulator/sow/a%252Fb", "/emulator/sow/a%2Fb", ""),  # decoded once
])
def test_the_canonical_form(raw, path, fmt):
    target = parse_target(raw.encode())
    assert (target.path, target.fmt) == (path, fmt)


@pytest.mark.parametrize("raw, status", [
    ("/amps.json/administrator/clients/x/disconnect", 404),
    ("/amps.xml/instance", 404),
    ("/ampsX/administrator/transports/t/disable", 404),
    ("/AMPS/instance", 404),
    ("/emulatorX/journal", 404),
    ("/emulator.json/journal", 404),
    ("/amps%2Fadministrator/clients/x/disconnect", 404),
    ("/amps/administrator/clients/x%2Fdisconnect", 404),
    ("/amps/./administrator", 404),
    ("/amps/x/../administrator", 404),
    ("/amps/x/%2e%2e/administrator", 404),
    ("/amps/administrator%00/clients", 404),
    ("/console.js/x", 404),
    ("/index.html/x", 404),
    ("/other", 404),
    ("http://host/amps", 400),
    ("*", 400),
    ("/amps/%ff", 400),
])
def test_what_has_no_canonical_form(raw, status):
    with pytest.raises(HttpError) as e:
        parse_target(raw.encode())
    assert e.value.status == status


_segment = st.sampled_from(["amps", "emulator", "administrator", "instance", "clients",
                            "x", ".", "..", "", "amps.json", "journal", "disconnect.json",
                            "%2F", "%2e%2e", "%252F", "a%20b", "%00", "sow", "q.xml"])


@given(st.lists(_segment, max_size=7), st.booleans())
def test_the_canonical_form_is_its_own_canonical_form(segs, trailing):
    """Any path that has a canonical form: that form parses to itself, its segments are never
    empty, a dot segment or hold a slash, and its first is one the interface serves."""
    raw = "/" + "/".join(segs) + ("/" if trailing else "")
    try:
        target = parse_target(raw.encode())
    except HttpError as exc:
        assert exc.status in (400, 404)
        return
    assert all(s and s not in (".", "..") and "/" not in s for s in target.segs)
    assert target.segs[:1] in ((), ("amps",), ("emulator",), ("console.js",))
    again = parse_target(target.path.replace("%", "%25").encode())
    assert again.segs == target.segs


@pytest.mark.parametrize("path, method, write", [
    ("/amps/administrator/clients/x/disconnect", "GET", True),
    ("/amps/administrator/transports/t/disable", "GET", True),
    ("/amps/administrator/transports/t/enable", "GET", True),
    ("/amps/administrator/replication/d/downgrade", "GET", True),
    ("/amps/administrator/replication/d/upgrade", "GET", True),
    ("/amps/administrator/queues/q/enable_proxied_transfer", "GET", True),
    ("/amps/administrator/actions/cleanup", "GET", True),
    ("/amps/administrator/clients/x/disconnect.json", "GET", True),
    ("/amps/administrator", "GET", False),
    ("/amps/administrator/clients", "GET", False),
    ("/amps/administrator/clients/x", "GET", False),
    ("/amps/administrator/actions", "GET", False),
    ("/amps/instance/clients", "GET", False),
    ("/emulator/journal", "GET", False),
    ("/emulator/snapshot", "GET", False),
    ("/emulator/snapshot", "POST", True),
    ("/emulator/reset", "POST", True),
    ("/emulator/faults", "DELETE", True),
    ("/amps/instance", "POST", True),
])
def test_what_needs_write_permission(path, method, write):
    assert needs_write(parse_target(path.encode()), method) is write
