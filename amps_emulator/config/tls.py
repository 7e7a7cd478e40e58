"""TLS for transports: the server-side ``ssl.SSLContext`` of a ``Transport``.

AMPS serves TLS on a transport of ``Type`` ``tcps``, and on a ``tcp`` one that has both a
``Certificate`` and a ``PrivateKey`` (for ``Protocol`` ``websocket`` that is ``wss://``). The
loader builds the context once to check the files while it still knows the element's line,
and the server builds it again when it binds.
"""

from __future__ import annotations

import os
import ssl


class TLSSetupError(ValueError):
    """The certificate, key or cipher list cannot be used; ``element`` names the culprit
    (``Certificate``, ``PrivateKey`` or ``Ciphers``) and the message says why."""

    def __init__(self, element: str, reason: str) -> None:
        super().__init__(reason)
        self.element = element


def _readable(element: str, path: str) -> None:
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError as exc:
        raise TLSSetupError(element, f"cannot read {element} {path}: {exc.strerror or exc}") from None


def server_context(certificate: str, private_key: str, ciphers: str | None = None, *,
                   verify_client: bool = False, ca_file: str | None = None,
                   ca_path: str | None = None) -> ssl.SSLContext:
    """A server context presenting ``certificate`` (PEM, may hold the chain) with
    ``private_key``, restricted to ``ciphers`` (an OpenSSL cipher list; TLS 1.3 suites are
    not affected by it, as in OpenSSL). ``verify_client``: the handshake fails unless the
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
    if ciphers:
        try:
            ctx.set_ciphers(ciphers)
        except ssl.SSLError as exc:
            raise TLSSetupError("Ciphers", f"Ciphers {ciphers!r}: {exc}") from None
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
