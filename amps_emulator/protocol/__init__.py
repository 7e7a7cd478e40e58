"""AMPS protocol: sans-IO framing and header codec, commands, failure reasons, filters.

``protocol`` imports none of the other packages; everything else may import it.
"""

from amps_emulator.protocol.codec import FrameDecoder, ProtocolError, parse_command, split_frame
from amps_emulator.protocol.command import Command, parse_options
from amps_emulator.protocol.reasons import CommandError

__all__ = [
    "Command", "CommandError", "FrameDecoder", "ProtocolError", "parse_command",
    "parse_options", "split_frame",
]
