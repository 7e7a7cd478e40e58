"""amps-emulator: an AMPS-compatible message server for development and CI.

The repository keeps one folder per part at its top (``server/``, ``protocol/``, ``journal/``,
``sow/``, ``queues/``, ``config/``, ``pipeline/``); installed, they are subpackages of this one
import package (``amps_emulator.server``, ...), so nothing else lands at the top level of a
user's environment. ``pyproject.toml`` holds the mapping.
"""
