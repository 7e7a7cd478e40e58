""":class:`~amps_emulator.server.net.websocket.FrameSizes`: following a WebSocket client's byte
stream (request head, then frame headers) however the reads split it, without keeping it.
What it reports is what the websockets protocol holds: the unfinished head, the header of the
next frame so far, or the payload of the frame being received so far."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from amps_emulator.server.net.websocket import FrameSizes
from tests.support.ws import ws_frame_header

HEAD = (b"GET /amps/json HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")


def _stream(sizes: list[int]) -> tuple[bytes, list[tuple[int, int, int]]]:
    """The head then one frame per size; and each frame's (header start, payload start, end)."""
    out = bytearray(HEAD)
    spans = []
    for n in sizes:
        start = len(out)
        out += ws_frame_header(n)
        body = len(out)
        out += b"p" * n
        spans.append((start, body, len(out)))
    return bytes(out), spans


def _expected_partial(pos: int, spans: list[tuple[int, int, int]]) -> int:
    if pos < len(HEAD):
        return pos
    for start, body, end in spans:
        if start <= pos < body:
            return pos - start  # the header so far
        if body <= pos < end:
            return pos - body  # the payload so far (the header is read and gone)
    return 0


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([0, 1, 125, 126, 127, 300, 65535, 65536, 70000]), max_size=6),
       st.lists(st.integers(1, 70000), max_size=40))
def test_any_split_of_the_stream_is_followed(sizes, cuts):
    data, spans = _stream(sizes)
    fs = FrameSizes()
    pos = 0
    announced: list[int] = []
    points = sorted({c % (len(data) + 1) for c in cuts} | {len(data)})
    for cut in points:
        if cut <= pos:
            continue
        announced.append(fs.feed(data[pos:cut]))
        pos = cut
        assert fs.partial == _expected_partial(pos, spans), (pos, spans)
        assert fs.in_head == (pos < len(HEAD))
    assert max(announced, default=0) == max(sizes, default=0)
    assert fs.partial == 0 and fs.receiving == 0


def test_a_large_frame_is_known_from_its_header_alone():
    fs = FrameSizes()
    assert fs.feed(HEAD) == 0 and not fs.in_head
    assert fs.feed(ws_frame_header(60 << 20)[:3]) == 0  # (the 8-byte length is still coming)
    assert fs.feed(ws_frame_header(60 << 20)[3:] + b"x" * 100) == 60 << 20
    assert fs.receiving == 60 << 20 and fs.partial == 100


def test_the_head_end_may_span_reads():
    fs = FrameSizes()
    for i in range(len(HEAD)):
        fs.feed(HEAD[i:i + 1])
    assert not fs.in_head and fs.head == len(HEAD) and fs.partial == 0
