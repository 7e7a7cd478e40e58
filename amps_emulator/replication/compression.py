"""Compression of a replication link: ``Destination/Compression`` and ``CompressionType``.

AMPS compresses what a source sends to a Destination whose ``Compression`` is ``enabled``,
with ``zlib`` (the default) or ``zstd``; the receiving instance needs no configuration and
recognises a compressed link by itself. The emulator's link does the same, per direction:

* every hello lists the codecs its instance can decode (``z``, :data:`CODECS`);
* after the handshake, a side whose Destination compresses, and whose peer listed the codec,
  sends one ``repl_z`` frame naming it (:func:`compressing`); every byte it writes after that
  frame is one compressed stream, flushed at each write, so the dictionary built on earlier
  records shrinks the later ones. A peer that listed no such codec (an emulator from before
  compression) is sent plain frames, with one warning;
* the receiving side, on reading that frame, reads the rest of the connection through the
  codec's decompressor (:class:`InflatingReader`).

Decompression is bounded: the reader inflates only what the frame it is reading needs (its
4-byte length first, then a payload the length limit has already accepted) plus at most
:data:`READ_AHEAD` bytes, so a peer's compressed stream can never make it hold more than one
frame and 64 KiB, whatever its compression ratio (a "zip bomb" is refused by the frame length
check like an oversized plain frame). The frame being inflated counts where a plain frame
does: a byte source with a ``hold`` method (the accepted side's, which reports to the
server's memory budget) is told its size before any of it is inflated, and may refuse it
(:class:`InflatingReader`). A zstd stream may ask for a window of at most
:data:`ZSTD_WINDOW_LOG_MAX` (the decoder keeps that much history per link; this emulator's
compressor asks for 2 MiB): a larger one is refused as a corrupt stream.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import zlib
from collections.abc import Callable, Iterable
from typing import Protocol

from amps_emulator.config.model import Destination
from amps_emulator.protocol.codec import ProtocolError, frame, split_frame
from amps_emulator.replication.stream import FrameSource, LinkWriter, read_frame

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

log = logging.getLogger("amps_emulator.replication")

#: the CompressionType values, which this emulator also decodes (its hello lists them)
CODECS = ("zlib", "zstd")
#: the frame after which a side's bytes are compressed
SWITCH = "repl_z"
#: compressed bytes read from the socket at a time
READ_CHUNK = 64 * 1024
#: decompressed bytes the reader may hold beyond the frame it reads (inflating a frame at a
#: time would hand the rest of the input back and forth once per frame)
READ_AHEAD = 64 * 1024
#: the largest zstd window a peer's stream may ask for (2**23: 8 MiB; the decoder's own
#: default, 2**27, let a few kilobytes of input make it hold 128 MiB per link)
ZSTD_WINDOW_LOG_MAX = 23


class ByteSource(Protocol):
    """What :class:`InflatingReader` reads compressed bytes from (an ``asyncio.StreamReader``).

    It may also have ``hold(n)``: the reader holds ``n`` bytes of an inflated frame for the link
    from now on (0: none any more), told before it inflates them; raising there (an
    ``OSError``: the link was closed for it) refuses them."""

    async def read(self, n: int = -1) -> bytes: ...


class Deflater:
    """One direction's compressor: a single stream, flushed at every :meth:`compress` so the
    peer can decode everything written so far."""

    def __init__(self, codec: str) -> None:
        self.codec = codec
        if codec == "zstd":
            self._zstd = zstd.ZstdCompressor()
        elif codec == "zlib":
            self._zlib = zlib.compressobj()
        else:
            raise ValueError(f"unknown compression type {codec!r}")

    def compress(self, data: bytes | bytearray) -> bytes:
        if self.codec == "zstd":
            c = self._zstd
            return c.compress(data) + c.flush(zstd.ZstdCompressor.FLUSH_BLOCK)
        z = self._zlib
        return z.compress(data) + z.flush(zlib.Z_SYNC_FLUSH)


class Inflater:
    """One direction's decompressor, which never produces more than it is asked for."""

    def __init__(self, codec: str) -> None:
        self.codec = codec
        if codec == "zstd":
            self._zstd = zstd.ZstdDecompressor(
                options={zstd.DecompressionParameter.window_log_max: ZSTD_WINDOW_LOG_MAX})
        elif codec == "zlib":
            self._zlib = zlib.decompressobj()
        else:
            raise ProtocolError(f"replication peer compresses with unknown codec {codec!r}")
        self._input = b""  # compressed bytes given and not yet handed to the decompressor
        self.starved = True  # everything given has been decompressed: more input is needed

    def feed(self, data: bytes) -> None:
        self._input += data
        self.starved = False

    def take(self, most: int) -> bytes:
        """Up to ``most`` decompressed bytes of what was fed (b"" and :attr:`starved`: feed
        more)."""
        data, self._input = self._input, b""
        try:
            if self.codec == "zstd":
                d = self._zstd
                if d.eof:
                    raise ProtocolError("replication peer ended its compressed stream")
                out = d.decompress(data, most)
                self.starved = d.needs_input
                return out
            z = self._zlib
            out = z.decompress(data, most)
            self._input = z.unconsumed_tail
            self.starved = len(out) < most and not self._input
            if z.eof:
                raise ProtocolError("replication peer ended its compressed stream")
            return out
        except (zlib.error, zstd.ZstdError) as exc:
            raise ProtocolError(f"replication peer sent a corrupt {self.codec} stream: {exc}") from None


class InflatingReader:
    """The :class:`~amps_emulator.replication.stream.FrameSource` of a link whose peer
    compresses: reads compressed chunks from ``reader`` and returns decompressed bytes,
    inflating no more than each read asks for and :data:`READ_AHEAD`. A read that inflates
    (a frame's length, then the frame) is reported to the reader's ``hold`` first, if it has
    one (:class:`ByteSource`), as a plain frame being read is."""

    def __init__(self, reader: ByteSource, codec: str) -> None:
        self.reader = reader
        self.inflater = Inflater(codec)
        self._buf = bytearray()
        self.wire_bytes = 0  # compressed bytes read
        self.bytes = 0  # decompressed bytes returned
        self._hold: Callable[[int], None] | None = getattr(reader, "hold", None)

    async def readexactly(self, n: int) -> bytes:
        hold = self._hold
        if hold is None or len(self._buf) >= n:
            return await self._inflate(n)
        hold(n)  # before any of it is inflated: a memory budget may refuse it
        try:
            return await self._inflate(n)
        finally:
            hold(0)

    async def _inflate(self, n: int) -> bytes:
        buf, inflater = self._buf, self.inflater
        while len(buf) < n:
            if inflater.starved:
                data = await self.reader.read(READ_CHUNK)
                if not data:
                    raise asyncio.IncompleteReadError(bytes(buf), n)
                self.wire_bytes += len(data)
                inflater.feed(data)
            buf += inflater.take(max(n - len(buf), READ_AHEAD))
        out = bytes(buf[:n])
        del buf[:n]
        self.bytes += n
        return out


class DeflatingWriter:
    """The :class:`LinkWriter` of a direction that compresses: what is written goes out
    compressed (and flushed) on ``writer``."""

    def __init__(self, writer: LinkWriter, codec: str) -> None:
        self.writer = writer
        self.deflater = Deflater(codec)
        self.bytes = 0  # what was written, uncompressed
        self.wire_bytes = 0  # what went on the wire

    def is_closing(self) -> bool:
        return self.writer.is_closing()

    def write(self, data: bytes | bytearray) -> None:
        z = self.deflater.compress(data)
        self.bytes += len(data)
        self.wire_bytes += len(z)
        self.writer.write(z)

    def writelines(self, data: Iterable[bytes | bytearray]) -> None:
        self.write(b"".join(data))


def switch_frame(codec: str) -> bytes:
    """The frame after which the sender's bytes are compressed with ``codec``."""
    return frame({"c": SWITCH, "z": codec})


def compressing(writer: LinkWriter, codec: str | None, peer_codecs: tuple[str, ...], *,
                what: str) -> LinkWriter:
    """What one direction of a link writes on: ``writer`` itself (no ``codec``: the
    Destination does not compress, or the peer cannot decode it; ``what`` names the link in
    the warning), or, after the :func:`switch_frame` written now, a :class:`DeflatingWriter`."""
    if codec is None:
        return writer
    if codec not in peer_codecs:
        log.warning("%s: the peer cannot decode %s compression; the link sends uncompressed", what, codec)
        return writer
    writer.write(switch_frame(codec))
    log.info("%s: the link sends %s compressed", what, codec)
    return DeflatingWriter(writer, codec)


def outbound(writer: LinkWriter, dest: Destination | None, peer_codecs: tuple[str, ...]) -> LinkWriter:
    """What a link's side writes on: compressed as its Destination ``dest`` (the one this side
    sends to over the link; None: it only receives) asks, when the peer can decode it."""
    if dest is None or not dest.compression:
        return writer
    return compressing(writer, dest.compression_type, peer_codecs,
                       what=f"replication destination {dest.name!r}")


class LinkReader(FrameSource, ByteSource, Protocol):
    """A link's reader: whole frames (``readexactly``) until the peer compresses, compressed
    chunks (``read``) after (an ``asyncio.StreamReader``, or one wrapped to count what the
    server holds for it)."""


async def next_frame(reader: LinkReader, source: FrameSource) -> tuple[FrameSource, bytes]:
    """The next frame of a link read from ``reader`` through ``source`` (``reader`` itself
    until the peer compresses), and what to read the following ones through: a peer's
    :func:`switch_frame` is taken here, and the frames after it are read decompressed."""
    payload = await read_frame(source)
    while SWITCH.encode() in payload[:24]:
        header, _ = split_frame(payload)
        if header.get("c") != SWITCH:
            break
        source = inflating(reader, source, header)
        payload = await read_frame(source)
    return source, payload


def inflating(reader: ByteSource, source: FrameSource, header: dict[str, object]) -> InflatingReader:
    """The frame source of the rest of a link read from ``reader`` (so far through
    ``source``), whose peer sent the :func:`switch_frame` ``header``."""
    if source is not reader:
        raise ProtocolError("replication peer switched to compression twice")
    return InflatingReader(reader, str(header.get("z")))


__all__ = ["CODECS", "SWITCH", "ZSTD_WINDOW_LOG_MAX", "ByteSource", "Deflater", "DeflatingWriter", "Inflater",
           "InflatingReader", "LinkReader", "compressing", "inflating", "next_frame", "outbound",
           "switch_frame"]
