"""amps-emulator: an AMPS-compatible message server for development and CI.

The code lives here, one subpackage per part: ``server/``, ``protocol/``, ``journal/``, ``sow/``,
``queues/``, ``config/``, ``pipeline/`` and more. The folders of the same names at the top of the
repository are symlinks into this package, for browsing; every tool sees one module name per
file, ``amps_emulator.<part>...``. docs/contributing/architecture.md draws the layers.
"""
