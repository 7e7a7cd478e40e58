"""A real emulator server on port 0 in a background thread, for tests and benches.

``ServerThread`` is :class:`amps_emulator.embedded.EmbeddedServer` (what the pytest plugin
runs too): ``ServerThread(config, clock=None).start()`` returns once the server accepts
connections; ``call(fn)`` runs ``fn`` on the server's loop; ``stop()``.
"""

from __future__ import annotations

from typing import Any

from amps_emulator.embedded import EmbeddedServer


class ServerThread(EmbeddedServer):
    """The embedded server, owning its ports (so a disabled transport stops listening), plus
    requests to its admin interface."""

    def __init__(self, config: Any, **kwargs: Any) -> None:
        kwargs.setdefault("hold_ports", False)
        super().__init__(config, **kwargs)

    @property
    def admin_uri(self) -> str:
        return self.server.admin.uri  # type: ignore[union-attr]

    def http(self, path: str, method: str = "GET", expect: int = 200) -> Any:
        """One request to the admin interface: the decoded JSON body (text for other types)."""
        import json
        import urllib.error
        import urllib.request

        req = urllib.request.Request(self.admin_uri + path, method=method,
                                     data=b"" if method == "POST" else None)
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                status, ctype, body = r.status, r.headers.get("content-type", ""), r.read()
        except urllib.error.HTTPError as exc:
            status, ctype, body = exc.code, exc.headers.get("content-type", ""), exc.read()
        assert status == expect, (path, status, body[:500])
        return json.loads(body) if ctype.startswith("application/json") else body.decode()


__all__ = ["ServerThread"]
