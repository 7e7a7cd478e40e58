"""The decoder's large frames (``FrameDecoder(split=True)``): a frame of more than
``LARGE_FRAME`` bytes comes out as a ``SplitPayload`` (its header apart, its body filled in
place as reads arrive), byte for byte the frame that was sent, whatever the reads' sizes,
with the compiled ``Filler`` and its pure twin alike."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amps_emulator import accel
from amps_emulator.protocol import codec
from amps_emulator.protocol.codec import (
    HEADER_LIMIT,
    LARGE_FRAME,
    FillerPy,
    FrameDecoder,
    SplitPayload,
    parse_command,
    split_frame,
)


def wire(header: dict, body: bytes = b"") -> bytes:
    h = json.dumps(header, separators=(",", ":")).encode()
    return (len(h) + len(body)).to_bytes(4, "big") + h + body


# a body whose every byte says where it is: a misplaced piece cannot go unnoticed
BIG = b"".join(b"%07d," % i for i in range(LARGE_FRAME // 8 + 4000))
SMALL = b'{"id":1}'
LARGE_HEADER = {"c": "p", "t": "orders", "cid": "big", "a": "processed"}
STREAM = (wire({"c": "p", "t": "orders"}, SMALL) + wire(LARGE_HEADER, BIG)
          + wire({"c": "p", "t": "orders", "a": "processed", "cid": "x"}, BIG[:100])
          + wire(LARGE_HEADER, BIG[::-1]) + wire({"c": "flush", "cid": "f"}))

FILLERS = ["py"] + (["compiled"] if accel.COMPILED else [])


@pytest.fixture(params=FILLERS)
def filler(request, monkeypatch):
    if request.param == "py":
        monkeypatch.setattr(codec, "Filler", FillerPy)
    return request.param


def feed_in(chunks, split: bool = True) -> list:
    dec = FrameDecoder(split=split)
    out = []
    for chunk in chunks:
        out.extend(dec.feed_payloads(chunk))
    assert dec.buffered == 0 and dec.pending == -1
    return out


def cut(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(data), *cuts})
    return [data[a:b] for a, b in zip(points, points[1:], strict=False)]


def check(payloads: list, apart: bool | None = True) -> None:
    """``apart``: the large frames came in several reads (a read that holds a whole frame
    has it cut out as a small one is); None: either."""
    assert [type(p) for p in payloads[::2]] == [bytes, bytes, bytes]
    large = (SplitPayload, bytes) if apart is None else (SplitPayload if apart else bytes,)
    assert type(payloads[1]) in large and type(payloads[3]) in large
    cmds = [parse_command(p) for p in payloads]
    assert [c.body for c in cmds] == [SMALL, BIG, BIG[:100], BIG[::-1], b""]
    assert [c.cid for c in cmds] == [None, "big", "x", "big", "f"]
    assert cmds[1].command == "publish" and cmds[1].topic == "orders"
    assert cmds[1].acks == {"processed"}
    assert split_frame(payloads[1]) == (LARGE_HEADER, BIG)
    assert bytes(payloads[3]) == wire(LARGE_HEADER, BIG[::-1])[4:]  # (either form)
    assert len(payloads[3]) == len(bytes(payloads[3]))


def test_large_frames_fed_whole(filler):
    check(feed_in([STREAM]), apart=False)


def test_large_frames_fed_in_reads_of_64_kib(filler):
    check(feed_in([STREAM[i:i + 65536] for i in range(0, len(STREAM), 65536)]))


@given(st.lists(st.integers(min_value=1, max_value=len(STREAM) - 1), max_size=40))
@settings(max_examples=60, deadline=None)
def test_large_frames_fed_in_arbitrary_chunks(cuts):
    for name in FILLERS:
        with pytest.MonkeyPatch.context() as mp:
            if name == "py":
                mp.setattr(codec, "Filler", FillerPy)
            check(feed_in(cut(STREAM, cuts)), apart=None)


def test_the_header_cut_anywhere(filler):
    """Reads that end inside the large frame's length prefix or its header."""
    start = len(wire({"c": "p", "t": "orders"}, SMALL))
    for k in range(start, start + 4 + 60):
        rest = STREAM[k + 3:]
        payloads = feed_in([STREAM[:k], STREAM[k:k + 3],
                            *(rest[i:i + 65536] for i in range(0, len(rest), 65536))])
        check(payloads, apart=None)
        assert type(payloads[1]) is SplitPayload


def test_while_a_large_body_arrives_the_decoder_counts_what_it_holds(filler):
    """From its header on, a large frame counts whole: its body is allocated then (the memory
    budget must see what a peer made the server hold, not only what it sent)."""
    data = wire(LARGE_HEADER, BIG)
    dec = FrameDecoder(split=True)
    assert dec.feed_payloads(data[:300_000]) == []
    assert dec.pending == len(data) - 4 and dec.buffered == len(data) - 4
    assert dec.feed_payloads(data[300_000:-1]) == []
    assert dec.buffered == len(data) - 4
    (p,) = dec.feed_payloads(data[-1:])
    assert isinstance(p, SplitPayload) and p.body == BIG and dec.buffered == 0


def test_a_decoder_not_split_yet_buffers_a_large_frame_as_it_arrives(filler):
    """(A connection before its logon.) Then split: what is buffered goes on apart."""
    data = wire(LARGE_HEADER, BIG)
    dec = FrameDecoder()
    assert dec.feed_payloads(data[:300_000]) == []
    assert dec.buffered == 300_000 - 4
    dec.split = True
    assert dec.feed_payloads(data[300_000:-1]) == [] and dec.buffered == len(data) - 4
    (p,) = dec.feed_payloads(data[-1:])
    assert isinstance(p, SplitPayload) and p.body == BIG and dec.buffered == 0


def test_a_header_that_does_not_end_early_leaves_the_frame_whole(filler):
    header = {"c": "p", "t": "orders", "cid": "long", "x": "h" * HEADER_LIMIT}
    data = wire(header, BIG)
    (p,) = feed_in([data[i:i + 10_000] for i in range(0, len(data), 10_000)])
    assert type(p) is bytes and split_frame(p) == (header, BIG)


def test_a_header_trickled_a_byte_a_read_is_not_scanned_once_a_byte(filler, monkeypatch):
    """A peer that announces a large frame, then sends its header a byte a read: the header
    is sought a few times as the buffer doubles, not each read (else up to 64 KiB scanned per
    byte: seconds of the event loop for one header), and the frame still comes out right."""
    scans = []
    seek = codec.header_end

    def counted(payload):
        scans.append(len(payload))
        return seek(payload)

    monkeypatch.setattr(codec, "header_end", counted)
    for header in ({"c": "p", "t": "orders", "cid": "slow", "x": "h" * 3000},
                   {"c": "p", "t": "orders", "cid": "long", "x": "h\\}" * (HEADER_LIMIT // 3)}):
        scans.clear()
        data = wire(header, BIG)
        h = len(json.dumps(header, separators=(",", ":"))) + 4
        dec = FrameDecoder(split=True)
        out = []
        for i in range(min(h, HEADER_LIMIT + 4) + 10):
            out.extend(dec.feed_payloads(data[i:i + 1]))
        out.extend(dec.feed_payloads(data[min(h, HEADER_LIMIT + 4) + 10:]))
        assert len(scans) <= 20 and sum(scans) <= 4 * HEADER_LIMIT
        (p,) = out
        assert split_frame(p) == (header, BIG)


def test_without_split_every_payload_is_bytes():
    payloads = feed_in([STREAM[i:i + 65536] for i in range(0, len(STREAM), 65536)], split=False)
    assert all(type(p) is bytes for p in payloads)
    assert [parse_command(p).body for p in payloads] == [SMALL, BIG, BIG[:100], BIG[::-1], b""]


@pytest.mark.skipif(not accel.COMPILED, reason="the compiled extension is not built")
def test_the_compiled_filler_and_its_twin_agree():
    from amps_emulator._speedups import Filler

    for f in (Filler(10), FillerPy(10)):
        assert f.write(b"abcdef", 2) == 4 and f.remaining == 6 and f.filled == 4
        assert f.write(bytearray(b"0123456789"), 0) == 6 and f.remaining == 0
        assert f.write(b"zz", 0) == 0
        assert f.take() == b"cdef012345"
    f = Filler(3)
    with pytest.raises(ValueError):
        f.take()  # not filled
    with pytest.raises(ValueError):
        f.write(b"ab", 5)
