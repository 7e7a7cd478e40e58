"""amps-emulator: an AMPS-compatible message server for development and CI.

The code lives here, one subpackage per part: ``server/``, ``protocol/``, ``journal/``, ``sow/``,
``queues/``, ``config/``, ``auth/``, ``replication/``, ``pipeline/``; ``pyproject.toml``'s
``[tool.importlinter]`` says which may import which, and docs/contributing/architecture.md draws
the layers. The folders of the same names at the top of the repository are symlinks into this
package, for browsing; every tool sees one module name per file, ``amps_emulator.<part>...``.
"""
