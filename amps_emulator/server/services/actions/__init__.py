"""Configured ``Actions``: AMPS's automation, on the server clock.

:mod:`.engine` decides which action runs when (the triggers) and runs its steps in order;
:mod:`.steps` is what each ``If`` and ``Do`` module does; :mod:`.timers` arms
``on-schedule`` and the record watches of ``on-message-condition-timeout`` / ``on-alert`` on
the server clock (so ``--test-clock`` drives them); :mod:`.variables` expands
``{{VARIABLES}}``; :mod:`.subscription` applies the subscribe ``Options`` of an
``on-publish-message``; :mod:`.host` is what the engine needs of the server that runs it.
"""

from amps_emulator.server.services.actions.engine import MAX_DEPTH, Actions
from amps_emulator.server.services.actions.host import ActionHost
from amps_emulator.server.services.actions.variables import Vars, expand

__all__ = ["MAX_DEPTH", "ActionHost", "Actions", "Vars", "expand"]
