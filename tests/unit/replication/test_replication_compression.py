"""The replication link's compression (``replication.compression``): frames written through
the compressing writer come back whole through the decompressing reader, however the bytes
are cut on the way, for both CompressionType values; a peer's compressed stream cannot make
the reader inflate more than the frame it reads (a "zip bomb" is refused by the frame length
limit after four bytes); the hello says which codecs a side decodes, and a peer that lists
none is sent plain frames."""

from __future__ import annotations

import asyncio
import logging
import sys
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amps_emulator.protocol.codec import ProtocolError, frame, split_frame
from amps_emulator.replication.compression import (
    CODECS,
    READ_AHEAD,
    SWITCH,
    DeflatingWriter,
    InflatingReader,
    compressing,
    inflating,
)
from amps_emulator.replication.stream import read_frame, send
from amps_emulator.replication.wire import Hello

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd


class Sink:
    """A link writer that keeps what is written."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.writes: list[bytes] = []

    def is_closing(self) -> bool:
        return False

    def write(self, data: bytes | bytearray) -> None:
        self.data += data
        self.writes.append(bytes(data))

    def writelines(self, data: list[bytes | bytearray]) -> None:
        for d in data:
            self.write(d)


def _reader(chunks: list[bytes]) -> asyncio.StreamReader:
    r = asyncio.StreamReader()
    for c in chunks:
        r.feed_data(c)
    r.feed_eof()
    return r


def _cut(data: bytes, sizes: list[int]) -> list[bytes]:
    out, pos = [], 0
    for n in sizes:
        if pos >= len(data):
            break
        out.append(data[pos:pos + n])
        pos += n
    out.append(data[pos:])
    return out


frames = st.lists(st.tuples(st.text(max_size=30), st.binary(max_size=3000)), min_size=1, max_size=20)


@pytest.mark.parametrize("codec", CODECS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frames=frames, writes=st.integers(1, 5), cuts=st.lists(st.integers(1, 700), max_size=30))
def test_frames_survive_the_round_trip(codec, frames, writes, cuts) -> None:
    sent = [frame({"c": "repl_rec", "t": topic}, body) for topic, body in frames]
    sink = Sink()
    out = DeflatingWriter(sink, codec)
    step = max(1, len(sent) // writes)
    for i in range(0, len(sent), step):  # several frames per write, as a sender's poll
        send(out, sent[i:i + step])
    assert out.bytes == sum(map(len, sent)) and out.wire_bytes == len(sink.data)

    async def read_all() -> list[bytes]:
        source = InflatingReader(_reader(_cut(bytes(sink.data), cuts)), codec)
        got = [await read_frame(source) for _ in sent]
        with pytest.raises(asyncio.IncompleteReadError):
            await read_frame(source)
        return got

    got = asyncio.run(read_all())
    assert got == [f[4:] for f in sent]


def test_frames_sent_together_go_to_the_transport_as_they_are() -> None:
    """Several frames are handed over together (``writelines``: not joined into one copy
    first); a compressing writer compresses them as one write."""
    frames = [frame({"c": "repl_batch"}, b"x" * 10), bytearray(frame({"c": "repl_ack"}))]
    sink = Sink()
    send(sink, frames)
    send(sink, [frames[0]])
    send(sink, frames[1])
    assert sink.writes == [frames[0], frames[1], frames[0], frames[1]]
    plain = Sink()
    out = DeflatingWriter(plain, "zlib")
    send(out, frames)
    assert len(plain.writes) == 1 and out.bytes == len(frames[0]) + len(frames[1])
    assert zlib.decompressobj().decompress(plain.writes[0]) == b"".join(frames)


@pytest.mark.parametrize("codec", CODECS)
def test_similar_records_shrink_across_writes(codec) -> None:
    """One stream for the whole link: a record like the earlier ones costs little."""
    sink = Sink()
    out = DeflatingWriter(sink, codec)
    for i in range(200):
        out.write(frame({"c": "repl_rec", "t": "orders", "pos": i},
                        b'{"id":%d,"symbol":"MSFT","side":"buy","qty":100,"price":412.5}' % i))
    assert out.wire_bytes * 4 < out.bytes, (out.wire_bytes, out.bytes)


def _bomb(codec: str, announced: int, zeros: int) -> bytes:
    """A compressed stream of one frame announcing ``announced`` bytes, then ``zeros`` zeros."""
    chunk = bytes(1 << 20)
    if codec == "zlib":
        z = zlib.compressobj(9)
        parts = [z.compress(announced.to_bytes(4, "big"))]
        parts += [z.compress(chunk) for _ in range(zeros >> 20)]
        parts.append(z.flush(zlib.Z_SYNC_FLUSH))
    else:
        c = zstd.ZstdCompressor()
        parts = [c.compress(announced.to_bytes(4, "big"))]
        parts += [c.compress(chunk) for _ in range(zeros >> 20)]
        parts.append(c.flush(zstd.ZstdCompressor.FLUSH_BLOCK))
    return b"".join(parts)


@pytest.mark.parametrize("codec", CODECS)
def test_a_compression_bomb_is_refused_after_its_length(codec) -> None:
    """A frame announcing 256 MiB, its zeros a few kilobytes on the wire: the reader refuses it
    having read only its four length bytes, and inflated no more than its read-ahead."""
    bomb = _bomb(codec, 256 << 20, 32 << 20)
    assert len(bomb) < 1 << 20

    async def read() -> InflatingReader:
        source = InflatingReader(_reader([bomb]), codec)
        with pytest.raises(ProtocolError, match="limit"):
            await read_frame(source, limit=1 << 20)
        return source

    source = asyncio.run(read())
    assert source.bytes == 4 and len(source._buf) <= READ_AHEAD


@pytest.mark.parametrize("codec", CODECS)
def test_reading_a_frame_inflates_that_frame_only(codec) -> None:
    """A frame within the limit is read whole; what follows it stays compressed but for the
    read-ahead."""
    bomb = _bomb(codec, 1000, 64 << 20)

    async def read() -> InflatingReader:
        source = InflatingReader(_reader([bomb]), codec)
        assert await read_frame(source, limit=1 << 20) == bytes(1000)
        return source

    source = asyncio.run(read())
    assert source.bytes == 1004 and len(source._buf) <= READ_AHEAD


class _Metered:
    """A byte source that is told what the reader holds (the accepted side's, which counts it
    in the memory budget), and refuses a frame over ``most`` as a budget closing the link."""

    def __init__(self, chunks: list[bytes], most: int) -> None:
        self.reader = _reader(chunks)
        self.most = most
        self.told: list[tuple[int, int]] = []  # (held, what was inflated already when told)
        self.source: InflatingReader | None = None

    async def read(self, n: int = -1) -> bytes:
        return await self.reader.read(n)

    def hold(self, n: int) -> None:
        assert self.source is not None
        self.told.append((n, len(self.source._buf)))
        if n > self.most:
            raise ConnectionAbortedError("memory budget exceeded")


@pytest.mark.parametrize("codec", CODECS)
def test_the_frame_being_inflated_is_held_at_its_size_before_it_is_inflated(codec) -> None:
    bomb = _bomb(codec, 1 << 20, 64 << 20)

    async def read() -> _Metered:
        metered = _Metered([bomb], most=1 << 20)
        metered.source = InflatingReader(metered, codec)
        assert await read_frame(metered.source) == bytes(1 << 20)
        return metered

    told = asyncio.run(read()).told
    assert [n for n, _ in told] == [4, 0, 1 << 20, 0]  # the length, then the frame; then none
    assert told[0][1] == 0 and told[2][1] <= READ_AHEAD  # told before inflating it


@pytest.mark.parametrize("codec", CODECS)
def test_a_frame_the_budget_refuses_is_not_inflated(codec) -> None:
    """A frame within the length limit that the memory budget refuses when told of it: the
    reader stops there, holding no more than its read-ahead."""
    bomb = _bomb(codec, 8 << 20, 16 << 20)

    async def read() -> InflatingReader:
        metered = _Metered([bomb], most=1 << 20)
        source = metered.source = InflatingReader(metered, codec)
        with pytest.raises(ConnectionAbortedError):
            await read_frame(source)
        return source

    source = asyncio.run(read())
    assert source.bytes == 4 and len(source._buf) <= READ_AHEAD


def test_a_zstd_stream_asking_for_a_larger_window_is_refused() -> None:
    """A zstd frame header may ask for a window the decoder then keeps per link (up to 128 MiB
    by default, from a few kilobytes of input): past 8 MiB the stream is refused."""
    wide = zstd.ZstdCompressor(options={zstd.CompressionParameter.window_log: 27})
    data = wide.compress(frame({"c": "repl_ack", "pos": 1})) + wide.flush(zstd.ZstdCompressor.FLUSH_BLOCK)

    async def first_frame(chunks: list[bytes]) -> bytes:
        return await read_frame(InflatingReader(_reader(chunks), "zstd"))

    with pytest.raises(ProtocolError, match="corrupt zstd stream"):
        asyncio.run(first_frame([data]))
    sink = Sink()  # this emulator's compressor asks for less, whatever it sends
    DeflatingWriter(sink, "zstd").write(frame({"c": "repl_ack", "pos": 1}) + bytes(16 << 20))
    assert asyncio.run(first_frame([bytes(sink.data)])) == b'{"c":"repl_ack","pos":1}'


@pytest.mark.parametrize("codec", CODECS)
def test_a_corrupt_stream_is_a_protocol_error(codec) -> None:
    async def read() -> None:
        await read_frame(InflatingReader(_reader([b"\xff" * 64]), codec))

    with pytest.raises(ProtocolError, match=f"corrupt {codec}"):
        asyncio.run(read())


class _Raw:
    async def read(self, n: int = -1) -> bytes:
        return b""

    async def readexactly(self, n: int) -> bytes:
        raise asyncio.IncompleteReadError(b"", n)


def test_an_unknown_codec_or_a_second_switch_is_a_protocol_error() -> None:
    raw = _Raw()
    with pytest.raises(ProtocolError, match="unknown codec 'lz4'"):
        inflating(raw, raw, {"c": SWITCH, "z": "lz4"})
    once = inflating(raw, raw, {"c": SWITCH, "z": "zlib"})
    with pytest.raises(ProtocolError, match="twice"):
        inflating(raw, once, {"c": SWITCH, "z": "zlib"})


def test_the_hello_lists_the_codecs_and_a_peer_without_them_gets_plain_frames(caplog) -> None:
    header, _ = split_frame(Hello(name="A", group="g", hw={}).encode()[4:])
    assert header["z"] == "zlib,zstd" and Hello.from_header(header).codecs == CODECS
    del header["z"]  # an emulator from before compression
    old = Hello.from_header(header)
    assert old.codecs == ()
    sink = Sink()
    with caplog.at_level(logging.WARNING, "amps_emulator.replication"):
        assert compressing(sink, "zstd", old.codecs, what="replication destination 'B'") is sink
    assert sink.data == b"" and "cannot decode zstd" in caplog.text
    out = compressing(sink, "zstd", CODECS, what="replication destination 'B'")
    assert isinstance(out, DeflatingWriter)
    assert split_frame(bytes(sink.data)[4:])[0] == {"c": SWITCH, "z": "zstd"}
    assert compressing(sink, None, CODECS, what="-") is sink
