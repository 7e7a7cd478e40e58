"""AMPS protocol: sans-IO framing and header codec, commands, failure reasons, filters.

``protocol`` imports none of the other packages; everything else may import it.
"""

from protocol.codec import FrameDecoder, ProtocolError, parse_command, split_frame
from protocol.command import Command, parse_options
from protocol.reasons import CommandError

__all__ = [
    "Command", "CommandError", "FrameDecoder", "ProtocolError", "parse_command",
    "parse_options", "split_frame",
]
