"""auth.config: reading Authentication/Entitlement blocks from the config tree, resolution, errors."""

from __future__ import annotations

import pytest

from amps_emulator.auth import (
    ModuleDecl,
    SecurityLayer,
    block_from_values,
    load_security,
    read_security,
    resolve,
)
from amps_emulator.auth.config import AUTHENTICATION, ENTITLEMENT, web_options
from amps_emulator.config.errors import ConfigError
from amps_emulator.config.xmlload import load_tree


class _Issues:
    def __init__(self) -> None:
        self.errors: list[str] = []

    def error(self, file: str, line: int, reason: str, seq: int = 0) -> None:
        self.errors.append(f"{file}:{line}: {reason}")


def tree(xml: str):
    issues = _Issues()
    root = load_tree(xml, "<test>", issues, {})
    assert root is not None and not issues.errors
    return root


CONFIG = """<AMPSConfig>
  <Modules>
    <Module><Name>web-entitlements</Name><Library>/opt/amps/lib/libamps_http_entitlement.so</Library>
      <Options><ResourceURI>http://127.0.0.1:1/{{USER_NAME}}.json</ResourceURI>
               <RetryCount>2</RetryCount></Options></Module>
    <Module><Name>simple-access</Name><Library>libamps_simple_access_entitlement.so</Library></Module>
  </Modules>
  <Authentication><Module>amps-default-no-authentication-module</Module></Authentication>
  <Transports>
    <Transport><Name>open</Name>
      <Authentication><Module>amps-default-authentication-module</Module>
        <Options><AllowSpoofing>true</AllowSpoofing></Options></Authentication>
      <Entitlement><Module>simple-access</Module>
        <Options><DeniedTopics>^secret</DeniedTopics></Options></Entitlement>
    </Transport>
    <Transport><Name>web</Name>
      <Authentication><Module>web-entitlements</Module>
        <Options><RetryCount>5</RetryCount></Options></Authentication>
      <Entitlement><Module>web-entitlements</Module></Entitlement>
    </Transport>
    <Transport><Name>plain</Name></Transport>
  </Transports>
  <Admin><InetAddr>8085</InetAddr>
    <Authentication><Module>amps-implicit-authentication-module</Module></Authentication></Admin>
</AMPSConfig>"""


def test_resolution_transport_then_instance_then_default():
    cfg = load_security(tree(CONFIG), "/cfg")
    auth, ent = cfg.for_transport("open")
    assert auth.module == "amps-default-authentication-module" and auth.option("AllowSpoofing") == "true"
    assert ent.library == "libamps_simple_access_entitlement.so" and ent.option("DeniedTopics") == "^secret"
    auth, ent = cfg.for_transport("plain")
    assert auth.module == "amps-default-no-authentication-module"  # the instance block
    assert ent.module == "amps-default-entitlement-module"  # the default
    assert cfg.for_transport("no-such") == cfg.for_transport("plain")
    admin_auth, admin_ent = cfg.for_admin()
    assert admin_auth.module == "amps-implicit-authentication-module"
    assert admin_ent.module == "amps-default-entitlement-module"


def test_declared_module_options_are_defaults_the_block_overrides():
    cfg = load_security(tree(CONFIG), "/cfg")
    auth, ent = cfg.for_transport("web")
    assert web_options(auth, "/cfg").retry_count == 5
    assert web_options(ent, "/cfg").retry_count == 2
    assert web_options(ent, "/cfg").resource_uri.endswith("{{USER_NAME}}.json")


def test_layer_shares_one_document_source_per_web_configuration():
    cfg = load_security(tree(CONFIG), "/cfg")
    layer = SecurityLayer(cfg)
    assert len(layer.sources) == 2  # RetryCount 5 (authentication) and 2 (entitlement) differ
    assert layer.transport("plain") is layer.transport(None)


@pytest.mark.parametrize("block, message", [
    ("<Authentication><Module>amps-default-authentcation-module</Module></Authentication>",
     "did you mean 'amps-default-authentication-module'"),
    ("<Authentication><Module>my-ldap</Module></Authentication>", "unknown authentication module 'my-ldap'"),
    ("<Entitlement><Module>amps-default-authentication-module</Module></Entitlement>",
     "is not an entitlement module"),
    ("<Authentication><Module>amps-default-authentication-module</Module>"
     "<Options><AllowSpoffing>true</AllowSpoffing></Options></Authentication>",
     "did you mean 'AllowSpoofing'"),
    ("<Authentication><Module>amps-default-authentication-module</Module>"
     "<Options><RequireLogon>maybe</RequireLogon></Options></Authentication>", "<RequireLogon>"),
    ("<Authentication></Authentication>", "missing required element <Module>"),
])
def test_bad_blocks_are_located_errors(block, message):
    xml = f"<AMPSConfig>\n\n{block}\n</AMPSConfig>"
    _, errors = read_security(tree(xml), ".")
    assert len(errors) == 1
    assert errors[0].line == 3 and message in errors[0].reason
    with pytest.raises(ConfigError, match=r"<test>:3: "):
        load_security(tree(xml), ".")


@pytest.mark.parametrize("library, options, message", [
    ("libamps_simple_access_entitlement.so", "<GrantedPermissions>all</GrantedPermissions>",
     "GrantedPermissions"),
    ("libamps_simple_access_entitlement.so", "<DeniedTopics>(</DeniedTopics>", "invalid regular expression"),
    ("libamps_http_entitlement.so", "", "requires <ResourceURI>"),
    ("libamps_http_entitlement.so", "<ResourceURI>file:x</ResourceURI><RetryCount>-1</RetryCount>",
     "RetryCount"),
    ("libamps_http_entitlement.so", "<ResourceURI>file:x</ResourceURI><HTTPHeader>nocolon</HTTPHeader>",
     "HTTPHeader"),
    ("libamps_multi_authentication.so", "", "not implemented by the emulator"),
    ("libfoo.so", "", "not a entitlement library"),
])
def test_bad_library_modules(library, options, message):
    xml = (f"<AMPSConfig><Modules><Module><Name>m</Name><Library>{library}</Library></Module></Modules>"
           f"<Entitlement><Module>m</Module><Options>{options}</Options></Entitlement></AMPSConfig>")
    _, errors = read_security(tree(xml), ".")
    assert [message in e.reason for e in errors] == [True], errors


def test_plain_values_and_resolve():
    b = block_from_values(AUTHENTICATION, "amps-default-authentication-module", [("RequireUsername", "true")])
    assert b.option("RequireUsername") == "true" and b.library is None
    assert resolve(None, None, ENTITLEMENT).module == "amps-default-entitlement-module"
    assert resolve(None, b, AUTHENTICATION) is b
    with pytest.raises(ValueError, match="unknown block kind"):
        block_from_values("Other", "x")


def test_web_timeouts_are_milliseconds_or_durations():
    b = block_from_values(ENTITLEMENT, "w", [("ResourceURI", "file:p"), ("ConnectionTimeout", "250"),
                                             ("RequestTimeout", "2s"), ("EntitlementTimeout", "1m")],
                          {"w": ModuleDecl(name="w", library="libamps_http_entitlement.so")})
    o = web_options(b, ".")
    assert (o.connection_timeout, o.request_timeout, o.entitlement_timeout) == (0.25, 2.0, 60.0)
