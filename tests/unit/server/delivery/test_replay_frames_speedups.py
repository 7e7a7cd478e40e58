"""A replay's frames from the journal's stored frames: the compiled ``_speedups.replay_frames``
against its pure-Python twin (``server.delivery.replay_frames.replay_frames_py``), on logs
written by the journal's own encoder, damaged ones included, and the twin against what the
general path frames of the same records (``replay._deliver_chunk``'s rule)."""

from __future__ import annotations

import zlib

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amps_emulator.journal.record import PREFIX, FrameDecoder, append_record_py
from amps_emulator.protocol.codec import frame_raw, json_str, payloads_of
from amps_emulator.server.delivery.fanout import delivery_tail
from amps_emulator.server.delivery.replay_frames import (
    BUDGET,
    END,
    GENERAL,
    LIMIT,
    replay_frames_py,
)
from tests.support.compiled import compiled
from tests.support.compiled import speedups as _speedups

HEAD = b'{"c":"p","t":"t","sids":"s1"'
U64 = (1 << 64) - 1
_TEXT = st.text(max_size=12) | st.sampled_from(["corr", "k\"1\\\n", "é", "\x00\x1f", "a" * 40])
_RECORD = st.tuples(
    st.sampled_from([1, 1, 1, 2, 3, 16, 64, 99]),  # kind
    st.sampled_from(["t", "t", "u", "tt", "é"]),  # topic
    st.sampled_from(["", "json", "json", "xml"]),  # message type
    st.none() | _TEXT,  # correlation id
    st.none() | _TEXT,  # SowKey
    st.none() | st.integers(-(1 << 63), U64) | st.sampled_from([0, 127, 128, -1, -33]),
    st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=3),  # headers
    st.binary(max_size=300),  # body
    st.integers(0, U64),  # publisher id
    st.integers(0, U64),  # sequence
    st.integers(1, 3),  # the position after the previous record's (a gap now and then)
)


def _log(records: list[tuple]) -> tuple[bytes, list[int]]:
    """The frames of ``records`` as the journal writes them, and each frame's offset."""
    buf = bytearray()
    offsets = []
    pos = 0
    for kind, topic, mt, corr, key, exp, headers, body, pub, seq, step in records:
        pos += step
        offsets.append(len(buf))
        append_record_py(buf, kind, pos, pub, seq, 1_700_000_000_000_000 + pos, None, topic,
                         mt, "client", corr, key, exp, headers, body)
    return bytes(buf), offsets


def _args(data: bytes, next_pos: int, limit: int, name: bytes, mt: bytes, max_records: int,
          max_bytes: int) -> tuple:
    return (data, 0, next_pos, limit, name, mt, HEAD, max_records, max_bytes)


@compiled
@settings(max_examples=400, deadline=None)
@given(records=st.lists(_RECORD, max_size=12), next_pos=st.integers(0, 40),
       limit=st.integers(-1, 40), which=st.sampled_from([(b"t", b"json"), (b"t", b"xml"),
                                                         (b"\xc3\xa9", b"json")]),
       max_records=st.integers(1, 15), max_bytes=st.integers(1, 5000),
       damage=st.none() | st.tuples(st.integers(0, 10_000), st.integers(1, 255)),
       cut=st.none() | st.integers(0, 10_000))
def test_the_compiled_replay_frames_are_the_twins(records, next_pos, limit, which, max_records,
                                                  max_bytes, damage, cut) -> None:
    assert _speedups is not None
    data, _ = _log(records)
    if damage is not None and data:
        at, flip = damage
        b = bytearray(data)
        b[at % len(b)] ^= flip
        data = bytes(b)
    if cut is not None:
        data = data[:cut]
    args = _args(data, next_pos, limit, *which, max_records, max_bytes)
    assert _speedups.replay_frames(*args) == replay_frames_py(*args)


def _general(data: bytes, offsets: list[int], next_pos: int, limit: int, name: str,
             mt: str) -> tuple[list[bytes], int, int, int]:
    """What the general path delivers of these frames (a literal topic's plain replay), the
    position it goes on from, and the records it read and their bodies' bytes."""
    dec = FrameDecoder()
    out = []
    read = read_bytes = 0
    for off in offsets:
        prefix = PREFIX.unpack_from(data, off)
        rec = dec.decode(prefix, data[off + PREFIX.size:off + PREFIX.size + prefix[5]])
        if rec.position < next_pos or rec.kind >= 64:
            continue
        if rec.position > limit:
            break
        next_pos = rec.position + 1
        read += 1
        read_bytes += len(rec.body)
        if rec.kind not in (1, 2) or rec.key != (name if mt == "json" else f"{name}\x1f{mt}"):
            continue
        tail = delivery_tail(rec.bookmark_str, rec.correlation_id, rec.sow_key, rec.expiration,
                             None)
        out.append(frame_raw(b'{"c":"p","t":' + json_str(rec.topic) + b',"sids":"s1"' + tail,
                             rec.body))
    return out, next_pos, read, read_bytes


@settings(max_examples=300, deadline=None)
@given(records=st.lists(_RECORD, max_size=12), next_pos=st.integers(0, 40),
       limit=st.integers(0, 40), which=st.sampled_from([("t", "json"), ("t", "xml"),
                                                        ("é", "json")]))
def test_the_twin_delivers_what_the_general_path_does(records, next_pos, limit, which) -> None:
    data, offsets = _log(records)
    name, mt = which
    got = replay_frames_py(data, 0, next_pos, limit, name.encode(), mt.encode(),
                           b'{"c":"p","t":' + json_str(name) + b',"sids":"s1"', 1 << 40, 1 << 40)
    off, new_pos, _last, _pub, _seq, n, frames, why, read, read_bytes = got
    want, want_pos, want_read, want_bytes = _general(data, offsets, next_pos, limit, name, mt)
    if why == GENERAL:  # (a non-ASCII correlation id or SowKey: the general path's from here)
        stop = offsets.index(off)
        assert any(not (s is None or s.isascii()) for s in records[stop][3:5])
        want, want_pos, want_read, want_bytes = _general(data, offsets[:stop], next_pos, limit,
                                                         name, mt)
    else:
        assert why in (END, LIMIT)
    assert payloads_of(frames) == [f[4:] for f in want] and n == len(want)
    assert (new_pos, read, read_bytes) == (want_pos, want_read, want_bytes)


def test_budgets_stop_right_after_the_delivery_that_reaches_them() -> None:
    data, offsets = _log([(1, "t", "json", None, None, None, {}, b"{}", 1, i, 1)
                          for i in range(10)])
    got = replay_frames_py(data, 0, 1, 100, b"t", b"json", HEAD, 3, 1 << 20)
    assert got[0] == offsets[3] and got[1:3] == (4, 3) and got[5] == 3 and got[7] == BUDGET
    one = len(payloads_of(got[6])[0]) + 4
    got = replay_frames_py(data, 0, 1, 100, b"t", b"json", HEAD, 100, 2 * one)
    assert got[5] == 2 and got[7] == BUDGET
    got = replay_frames_py(data, 0, 1, 4, b"t", b"json", HEAD, 100, 1 << 20)
    assert got[5] == 4 and got[7] == LIMIT and got[0] == offsets[4]


@pytest.mark.parametrize("replay", [replay_frames_py, pytest.param(
    _speedups and _speedups.replay_frames, marks=compiled, id="compiled")])
def test_a_frame_it_cannot_read_is_left_to_the_general_path(replay) -> None:
    good, offsets = _log([(1, "t", "json", None, None, None, {}, b"{}", 1, i, 1)
                          for i in range(3)])
    bad = bytearray(good)
    bad[offsets[1] + 60] ^= 1  # the second frame's payload: its CRC no longer matches
    got = replay(bytes(bad), 0, 1, 100, b"t", b"json", HEAD, 100, 1 << 20)
    assert got[0] == offsets[1] and got[5] == 1 and got[7] == GENERAL
    for odd in (["t", "json", "c", None, None, None, {}, "a str body"],  # not bin
                ["t", "json", "c", None, None, None],  # short (msgspec takes it)
                ["t", "json", "c", 5, None, None, {}, b""]):  # a correlation id not a str
        payload = msgspec.msgpack.encode(odd)
        rest = PREFIX.pack(0, 0xA7, 1, 1, 0, len(payload), 1, 1, 1, 0, 0)[4:]
        frame = zlib.crc32(rest + payload).to_bytes(4, "little") + rest + payload
        assert replay(frame, 0, 1, 100, b"t", b"json", HEAD, 100, 1 << 20)[7] == GENERAL
