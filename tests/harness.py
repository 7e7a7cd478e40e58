"""A real emulator server on port 0 in a background thread, for tests and benches.

``ServerThread`` is :class:`amps_emulator.embedded.EmbeddedServer` (what the pytest plugin
runs too): ``ServerThread(config, clock=None).start()`` returns once the server accepts
connections; ``call(fn)`` runs ``fn`` on the server's loop; ``stop()``.
"""

from __future__ import annotations

from amps_emulator.embedded import EmbeddedServer as ServerThread

__all__ = ["ServerThread"]
