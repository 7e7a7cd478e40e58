"""TLS for transports: the server-side ``ssl.SSLContext`` of a ``Transport``.

AMPS serves TLS on a transport of ``Type`` ``tcps``, and on a ``tcp`` one that has both a
``Certificate`` and a ``PrivateKey`` (for ``Protocol`` ``websocket`` that is ``wss://``). The
loader builds the context once to check the files while it still knows the element's line,
and the server builds it again when it binds.

``SecureSocketProtocols`` (a space-separated list of ``SSLv2``, ``SSLv3``, ``TLSv1``,
``TLSv1.1``, ``TLSv1.2``, ``TLSv1.3``; AMPS's default ``TLSv1.1 TLSv1.2 TLSv1.3``) sets the
versions a handshake may use: the context's minimum and maximum version, and OpenSSL's
``no_*`` options for a version left out between them. ``Ciphers`` is handed to OpenSSL as it
is, as AMPS does, so OpenSSL's own rules hold: it selects the TLS 1.2 and older suites (TLS 1.3
suites are not affected), and its security level (``@SECLEVEL=``) decides whether TLS 1.0 and
1.1 can be negotiated at all (OpenSSL 3 allows them only at level 0).
"""

from __future__ import annotations

import os
import ssl
import warnings


class TLSSetupError(ValueError):
    """The certificate, key, cipher list or protocol list cannot be used; ``element`` names the
    culprit (``Certificate``, ``PrivateKey``, ``Ciphers``, ``SecureSocketProtocols``, ...) and
    the message says why."""

    def __init__(self, element: str, reason: str) -> None:
        super().__init__(reason)
        self.element = element


#: the names SecureSocketProtocols takes, oldest first
PROTOCOL_NAMES = ("SSLv2", "SSLv3", "TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3")
#: AMPS's default when a transport names none
DEFAULT_PROTOCOLS = ("TLSv1.1", "TLSv1.2", "TLSv1.3")
#: the version of each name the ssl module can set (SSLv2 has none); its ``no_*`` option
_VERSIONS = {
    "SSLv3": (ssl.TLSVersion.SSLv3, ssl.OP_NO_SSLv3),
    "TLSv1": (ssl.TLSVersion.TLSv1, ssl.OP_NO_TLSv1),
    "TLSv1.1": (ssl.TLSVersion.TLSv1_1, ssl.OP_NO_TLSv1_1),
    "TLSv1.2": (ssl.TLSVersion.TLSv1_2, ssl.OP_NO_TLSv1_2),
    "TLSv1.3": (ssl.TLSVersion.TLSv1_3, ssl.OP_NO_TLSv1_3),
}
_AVAILABLE = {"SSLv2": ssl.HAS_SSLv2, "SSLv3": ssl.HAS_SSLv3, "TLSv1": ssl.HAS_TLSv1,
              "TLSv1.1": ssl.HAS_TLSv1_1, "TLSv1.2": ssl.HAS_TLSv1_2, "TLSv1.3": ssl.HAS_TLSv1_3}


def parse_protocols(value: str) -> tuple[str, ...]:
    """``SecureSocketProtocols``: the names it lists, oldest first (any letter case, each
    once); ``ValueError`` for an empty list or an unknown name."""
    canonical = {name.lower(): name for name in PROTOCOL_NAMES}
    found: set[str] = set()
    for word in value.split():
        name = canonical.get(word.lower())
        if name is None:
            raise ValueError(f"unknown protocol {word!r} in <SecureSocketProtocols> (a space-separated "
                             f"list of {', '.join(PROTOCOL_NAMES)})")
        found.add(name)
    if not found:
        raise ValueError(f"<SecureSocketProtocols> is empty (a space-separated list of "
                         f"{', '.join(PROTOCOL_NAMES)})")
    return tuple(name for name in PROTOCOL_NAMES if name in found)


def unavailable_protocols(protocols: tuple[str, ...]) -> tuple[str, ...]:
    """The listed protocols the OpenSSL the emulator runs on cannot negotiate at all."""
    return tuple(p for p in protocols if not _AVAILABLE[p])


def restrict_protocols(ctx: ssl.SSLContext, protocols: tuple[str, ...] | None) -> None:
    """Let ``ctx`` negotiate only ``protocols`` (None: AMPS's default list)."""
    usable = [p for p in protocols or DEFAULT_PROTOCOLS if _AVAILABLE[p]]
    if not usable:
        raise TLSSetupError("SecureSocketProtocols", f"none of {' '.join(protocols or ())} can be "
                                                     f"negotiated with {ssl.OPENSSL_VERSION}")
    names = [p for p in PROTOCOL_NAMES if p in _VERSIONS]
    low, high = names.index(usable[0]), names.index(usable[-1])
    with warnings.catch_warnings():  # the ssl module deprecates the old versions and no_* options
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx.minimum_version = _VERSIONS[usable[0]][0]
        ctx.maximum_version = _VERSIONS[usable[-1]][0]
        for gap in names[low + 1:high]:
            if gap not in usable:
                ctx.options |= _VERSIONS[gap][1]


def _readable(element: str, path: str) -> None:
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError as exc:
        raise TLSSetupError(element, f"cannot read {element} {path}: {exc.strerror or exc}") from None


def set_ciphers(ctx: ssl.SSLContext, ciphers: str | None) -> None:
    """Restrict ``ctx`` to the OpenSSL cipher list ``ciphers`` (None or empty: OpenSSL's)."""
    if ciphers:
        try:
            ctx.set_ciphers(ciphers)
        except ssl.SSLError as exc:
            raise TLSSetupError("Ciphers", f"Ciphers {ciphers!r}: {exc}") from None


def server_context(certificate: str, private_key: str, ciphers: str | None = None, *,
                   verify_client: bool = False, ca_file: str | None = None,
                   ca_path: str | None = None,
                   protocols: tuple[str, ...] | None = None) -> ssl.SSLContext:
    """A server context presenting ``certificate`` (PEM, may hold the chain) with
    ``private_key``, restricted to ``ciphers`` (an OpenSSL cipher list; TLS 1.3 suites are
    not affected by it, as in OpenSSL) and to ``protocols`` (SecureSocketProtocols; None:
    AMPS's default, TLS 1.1 to 1.3). ``verify_client``: the handshake fails unless the
    client presents a certificate signed by a CA of ``ca_file`` / ``ca_path`` (the system's
    default CAs when neither is given)."""
    _readable("Certificate", certificate)
    _readable("PrivateKey", private_key)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.load_cert_chain(certificate, private_key)
    except (ssl.SSLError, OSError) as exc:
        raise TLSSetupError("Certificate", f"cannot load certificate {certificate} with private "
                                           f"key {private_key}: {exc}") from None
    set_ciphers(ctx, ciphers)
    restrict_protocols(ctx, protocols)
    if verify_client:  # the CAs matter only then (a config may name them with it off)
        if ca_file is not None:
            _readable("CAFile", ca_file)
        if ca_path is not None and not os.path.isdir(ca_path):
            raise TLSSetupError("CAPath", f"CAPath {ca_path} is not a readable directory")
        ctx.verify_mode = ssl.CERT_REQUIRED
        try:
            if ca_file is None and ca_path is None:
                ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
            else:
                ctx.load_verify_locations(cafile=ca_file, capath=ca_path)
        except (ssl.SSLError, OSError) as exc:
            raise TLSSetupError("CAFile" if ca_file is not None else "CAPath",
                                f"cannot load the CA certificates: {exc}") from None
    return ctx
