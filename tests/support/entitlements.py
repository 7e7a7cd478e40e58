"""Configs for the authentication and entitlement tests: an instance with one json transport
(``config``, ``transport``), permission documents served from ``file:`` ResourceURIs by the
web entitlement module (``web_config``), the simple-access module (``simple_access``), and
user names in URIs (``with_user``). ``FILTERED`` and ``ALL`` are permission documents."""

from __future__ import annotations

import json
from pathlib import Path

from amps_emulator.config import load_config
from tests.support.servers import ServerThread


def transport(name: str, extra: str = "") -> str:
    return (f"<Transport><Name>{name}</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>"
            f"<MessageType>json</MessageType>{extra}</Transport>")


def config(body: str, transports: str | None = None) -> str:
    return (f"<AMPSConfig><Name>ent</Name>{body}"
            f"<Transports>{transports if transports is not None else transport('json-tcp')}"
            "</Transports></AMPSConfig>")


def serve(tmp_path: Path, xml: str) -> ServerThread:
    path = tmp_path / "config.xml"
    path.write_text(xml)
    return ServerThread(load_config(path)).start()


def with_user(uri: str, user: str, password: str | None = None) -> str:
    scheme, rest = uri.split("://", 1)
    cred = user if password is None else f"{user}:{password}"
    return f"{scheme}://{cred}@{rest}"


NO_AUTH = "<Authentication><Module>amps-default-no-authentication-module</Module></Authentication>"


def web_config(tmp_path: Path, docs: dict[str, dict], sow: bool = True) -> str:
    perms = tmp_path / "perms"
    perms.mkdir(exist_ok=True)
    for user, doc in docs.items():
        (perms / f"{user}.json").write_text(json.dumps({"logon": True, **doc}))
    opts = "<Options><ResourceURI>file:perms/{{USER_NAME}}.json</ResourceURI></Options>"
    sow_xml = ("<SOW><Topic><Name>test</Name><MessageType>json</MessageType><Key>/id</Key>"
               "<Durability>transient</Durability></Topic></SOW>") if sow else ""
    return config(
        "<Modules><Module><Name>web</Name><Library>libamps_http_entitlement.so</Library></Module>"
        f"</Modules><Authentication><Module>web</Module>{opts}</Authentication>"
        f"<Entitlement><Module>web</Module>{opts}</Entitlement>{sow_xml}")


FILTERED = {"logon": True, "password": "pw", "topic": [
    {"topic": "test", "read": "/priority = 1", "write": False},
    {"topic": "secret", "read": False, "write": False},
    {"topic": ".*", "read": True, "write": True}]}


ALL = {"topic": ".*", "read": True, "write": True}


def simple_access(options: str) -> str:
    return config(
        "<Modules><Module><Name>simple</Name><Library>libamps_simple_access_entitlement.so</Library>"
        f"</Module></Modules><Entitlement><Module>simple</Module><Options>{options}</Options>"
        "</Entitlement>")
