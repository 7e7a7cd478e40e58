"""The compiled hot path (``amps_emulator/_speedups.c``) against its pure-Python twins.

Every accelerated function runs under both implementations (parametrised; the compiled one is
skipped where the extension is not built) on the same inputs, malformed ones included, and the
two must agree byte for byte, or raise the same error. The reference for the journal frame is
independent of both: ``journal.record.FrameDecoder`` reading it back, zlib's CRC and msgspec's
MessagePack encoding of the payload tuple.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import zlib
from collections.abc import Callable

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amps_emulator import accel
from amps_emulator.journal.record import (
    PREFIX,
    PREFIX_SIZE,
    FrameDecoder,
    append_record_py,
    frame_size_py,
)
from amps_emulator.protocol import codec
from amps_emulator.protocol.codec import FrameDecoder as WireDecoder
from amps_emulator.protocol.codec import ProtocolError, scan_frames_py
from amps_emulator.protocol.reasons import CommandError
from tests.support.compiled import compiled
from tests.support.compiled import speedups as _speedups
from tests.support.paths import ROOT

APPENDERS = [pytest.param(append_record_py, id="pure"),
             pytest.param(_speedups and _speedups.append_record, id="compiled", marks=compiled)]
SCANNERS = [pytest.param(scan_frames_py, id="pure"),
            pytest.param(_speedups and _speedups.scan_frames, id="compiled", marks=compiled)]

Appender = Callable[..., int]

U64 = st.integers(0, (1 << 64) - 1)
TEXT = st.text(max_size=300)
OPT_TEXT = st.none() | TEXT
RECORD_ARGS = st.tuples(
    st.integers(0, 255),  # kind
    U64, U64, U64,  # position, publisher_id, sequence
    st.integers(-(1 << 63), (1 << 63) - 1),  # timestamp
    st.none() | U64,  # client_seq
    TEXT, st.sampled_from(["", "json", "fix", "nvfix"]) | TEXT, TEXT,  # topic, type, client
    OPT_TEXT, OPT_TEXT,  # correlation_id, sow_key
    st.none() | st.integers(0, (1 << 64) - 1),  # expiration
    st.dictionaries(TEXT, TEXT, max_size=20),  # headers (more than the C fast path takes, too)
    st.binary(max_size=70_000) | st.binary(max_size=300),  # body
)


@pytest.fixture(autouse=True)
def _fallback_registered() -> None:
    if _speedups is not None:  # (journal.record registers it when the extension runs)
        _speedups.set_fallbacks(append_record_py, frame_size_py)


def _frame(appender: Appender, args: tuple) -> tuple[bytes, int]:
    buf = bytearray(b"before")
    size = appender(buf, *args)
    assert buf[:6] == b"before"
    return bytes(buf[6:]), size


def _read_back(frame: bytes) -> tuple:
    prefix = PREFIX.unpack_from(frame)
    assert prefix[0] == zlib.crc32(frame[4:])
    payload = frame[PREFIX_SIZE:]
    assert prefix[5] == len(payload)
    rec = FrameDecoder().decode(prefix, payload)
    return (rec.kind, rec.position, rec.publisher_id, rec.sequence, rec.timestamp, rec.client_seq,
            rec.topic, rec.message_type, rec.client_name, rec.correlation_id, rec.sow_key,
            rec.expiration, rec.headers, rec.body)


@pytest.mark.parametrize("appender", APPENDERS)
def test_a_publish_record_reads_back(appender: Appender) -> None:
    args = (1, 7, 99, 7, 1_700_000_000_000_000, None, "orders", "json", "pub-1", None, "k1", None,
            {"o": "replace"}, b'{"id":1}')
    frame, size = _frame(appender, args)
    assert size == len(frame)
    assert _read_back(frame) == args
    payload = msgspec.msgpack.encode((*args[6:13], args[13]))
    assert frame[PREFIX_SIZE:] == payload


@settings(max_examples=300, deadline=None)
@given(RECORD_ARGS)
def test_both_encoders_write_the_same_frame(args: tuple) -> None:
    """The journal's format, whichever encoder wrote it: same bytes, and it reads back."""
    frame, size = _frame(append_record_py, args)
    assert size == len(frame) == frame_size_py(*args[6:])
    assert _read_back(frame) == args
    if _speedups is not None:
        assert _frame(_speedups.append_record, args) == (frame, size)
        assert _speedups.frame_size(*args[6:]) == size


@pytest.mark.parametrize("appender", APPENDERS)
@pytest.mark.parametrize("size", [0, 31, 32, 255, 256, 65535, 65536])
def test_every_msgpack_length_form_is_msgspecs(appender: Appender, size: int) -> None:
    """The boundaries of fixstr/str8/str16/str32, bin8/16/32, the map forms and the integers."""
    headers = {f"h{i}": "v" * (size % 40) for i in range(size % 18)}  # 0..17 entries
    expiration = [0, 127, 128, 255, 256, 65535, 65536][[0, 31, 32, 255, 256, 65535, 65536].index(size)]
    args = (1, size, 1, size + 1, 0, size, "t" * size, "json", "c" * size, "x" * size, None,
            expiration, headers, b"b" * size)
    frame, size_written = _frame(appender, args)
    assert size_written == len(frame)
    assert frame[PREFIX_SIZE:] == msgspec.msgpack.encode((*args[6:13], args[13]))
    assert _read_back(frame) == args


class _Str(str):
    pass


class _Int(int):
    pass


MALFORMED = [
    pytest.param((256, 1, 1, 1, 0, None, "t", "", "c", None, None, None, {}, b""), id="kind>255"),
    pytest.param((-1, 1, 1, 1, 0, None, "t", "", "c", None, None, None, {}, b""), id="kind<0"),
    pytest.param((1, 1 << 64, 1, 1, 0, None, "t", "", "c", None, None, None, {}, b""), id="pos>u64"),
    pytest.param((1, 1, 1, 1, 1 << 63, None, "t", "", "c", None, None, None, {}, b""), id="ts>i64"),
    pytest.param((1, 1, 1, 1, 0, -5, "t", "", "c", None, None, None, {}, b""), id="negative-s"),
    pytest.param((1, 1, 1, 1, 0, None, "t\ud800", "", "c", None, None, None, {}, b""),
                 id="surrogate"),
    pytest.param((1, 1, 1, 1, 0, None, None, "", "c", None, None, None, {}, b""), id="topic-None"),
    pytest.param((1, 1, 1, 1, 0, None, b"t", "", "c", None, None, None, {}, b""), id="topic-bytes"),
    pytest.param((1, 1, 1, 1, 0, None, "t", "", "c", None, None, -3, {}, b""), id="negative-e"),
    pytest.param((1, 1, 1, 1, 0, None, "t", "", "c", None, None, 2.5, {}, b""), id="float-e"),
    pytest.param((1, 1, 1, 1, 0, None, "t", "", "c", None, None, None, {"a": 1}, b""),
                 id="int-header"),
    pytest.param((1, 1, 1, 1, 0, None, "t", "", "c", None, None, None, None, b""), id="no-headers"),
    pytest.param((1, 1, 1, 1, 0, None, "t", "", "c", None, None, None, {}, "body"), id="str-body"),
    pytest.param((1, 1, 1, 1, 0, None, "t", "", "c", None, None, None, {}, bytearray(b"b")),
                 id="bytearray-body"),
    pytest.param((True, 1, 1, 1, 0, None, _Str("t"), "", "c", _Str("x"), None, _Int(3),
                  {_Str("k"): _Str("v")}, memoryview(b"b")), id="subclasses"),
]


@pytest.mark.parametrize("args", MALFORMED)
def test_unusual_arguments_behave_as_the_pure_encoder(args: tuple) -> None:
    """Outside the plain shapes the journal passes, the compiled encoder hands over to the pure
    one: the same frame, or the same exception."""
    outcomes = []
    for appender in (append_record_py, _speedups.append_record if _speedups else append_record_py):
        buf = bytearray()
        try:
            size = appender(buf, *args)
        except Exception as exc:  # the outcome being compared
            outcomes.append((type(exc), bytes(buf)))
        else:
            outcomes.append((size, bytes(buf)))
    assert outcomes[0] == outcomes[1]
    sizes = []
    for sizer in (frame_size_py, _speedups.frame_size if _speedups else frame_size_py):
        try:
            sizes.append(sizer(*args[6:]))
        except Exception as exc:  # the outcome being compared
            sizes.append(type(exc))
    assert sizes[0] == sizes[1]


@pytest.mark.parametrize("appender", APPENDERS)
def test_appending_to_an_exported_buffer_fails_like_bytearray(appender: Appender) -> None:
    buf = bytearray(b"x")
    view = memoryview(buf)
    with pytest.raises(BufferError):
        appender(buf, 1, 1, 1, 1, 0, None, "t", "", "c", None, None, None, {}, b"")
    view.release()
    assert buf == b"x"


@compiled
@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=5000), st.integers(0, (1 << 32) - 1))
def test_the_extension_crc_is_zlibs(data: bytes, start: int) -> None:
    assert _speedups is not None
    assert _speedups.crc32(data, start) == zlib.crc32(data, start)
    assert _speedups.crc32(data) == zlib.crc32(data)


#: lengths around the carry-less fold's edges (64 bytes and up, 16-byte steps, four lanes)
CRC_LENGTHS = [0, 1, 15, 16, 63, 64, 65, 79, 80, 81, 127, 128, 129, 191, 255, 256, 257, 1000,
               4096, 70001]

#: the CRC of every length given and 8 alignments of it, against zlib: prints the path taken
#: (1: the fold) and the (length, alignment, start value) of each mismatch
_CRC_CHECK = """
import random, sys, zlib
from amps_emulator import _speedups
rnd = random.Random(19)
bad = []
for n in map(int, sys.argv[1:]):
    for skew in range(8):
        data = memoryview(rnd.randbytes(n + skew))[skew:]
        for start in (0, 1, 0xFFFFFFFF, rnd.getrandbits(32)):
            if _speedups.crc32(data, start) != zlib.crc32(data, start):
                bad.append((n, skew, start))
print(_speedups.crc_clmul, bad)
"""


def _crc_check(env: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, "-c", _CRC_CHECK, *map(str, CRC_LENGTHS)],
                          capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env}, check=True)
    return done.stdout.strip()


def _has_pclmul() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and " pclmulqdq" in line for line in f)
    except OSError:
        return False


@compiled
def test_the_crc_folds_with_pclmul_where_the_cpu_has_it_and_matches_zlib() -> None:
    """Every length and alignment around the fold's edges, on the path this CPU takes: the
    carry-less multiplication fold on an x86-64 CPU with PCLMULQDQ (Linux says so)."""
    fold = 1 if _has_pclmul() and os.uname().machine == "x86_64" else 0
    assert _crc_check({}) == f"{fold} []"


@compiled
def test_the_crc_tables_alone_match_zlib() -> None:
    """The same with the fold switched off (as on a CPU without it): the tables alone."""
    assert _crc_check({"AMPS_EMULATOR_CRC_TABLE": "1"}) == "0 []"


# -- framing ------------------------------------------------------------------------------


def _frames(payloads: list[bytes]) -> bytes:
    return b"".join(struct.pack(">I", len(p)) + p for p in payloads)


@pytest.mark.parametrize("scan", SCANNERS)
def test_scan_cuts_complete_frames_and_keeps_the_rest(scan: Callable) -> None:
    data = _frames([b'{"c":"p"}ab', b"", b"x" * 300]) + b"\x00\x00\x00\x09{\"c\""
    out, pos, need = scan(data, -1, 1 << 20)
    assert out == [b'{"c":"p"}ab', b"", b"x" * 300]
    assert (pos, need) == (len(data) - 4, 9)
    # the rest of that frame: need carried over, no prefix in front
    assert scan(b'{"c":"p"}', 9, 1 << 20) == ([b'{"c":"p"}'], 9, -1)


@pytest.mark.parametrize("scan", SCANNERS)
def test_scan_stops_at_an_oversized_length(scan: Callable) -> None:
    data = _frames([b"ok"]) + struct.pack(">I", 1001) + b"zz"
    out, pos, need = scan(data, -1, 1000)
    assert out == [b"ok"] and pos == 6 and need == 1001


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=3000), st.integers(-1, 70), st.integers(0, 100))
def test_both_scanners_agree_on_any_bytes(data: bytes, need: int, limit: int) -> None:
    expected = scan_frames_py(data, need, limit)
    if _speedups is not None:
        assert _speedups.scan_frames(data, need, limit) == expected


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=200), max_size=20), st.lists(st.integers(1, 50), max_size=30))
def test_the_wire_decoder_reassembles_frames_split_anywhere(payloads: list[bytes],
                                                            cuts: list[int]) -> None:
    data = _frames(payloads)
    dec = WireDecoder(1000)
    got: list[bytes] = []
    pos = 0
    for cut in cuts:
        got += dec.feed(data[pos:pos + cut])
        pos += cut
    got += dec.feed(data[pos:])
    assert got == payloads and dec.buffered == 0


def test_the_wire_decoder_refuses_an_oversized_frame_before_buffering_it() -> None:
    dec = WireDecoder(100)
    with pytest.raises(ProtocolError, match="exceeds the maximum of 100"):
        dec.feed(_frames([b"fine"]) + struct.pack(">I", 101) + b"x" * 50)
    assert dec.buffered == 0


# -- which one runs -----------------------------------------------------------------------


def _describe(env: dict[str, str]) -> str:
    code = "from amps_emulator import accel; print(accel.COMPILED, accel.DESCRIPTION)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env}, check=True)
    return done.stdout.strip()


def test_the_environment_forces_the_pure_path() -> None:
    out = _describe({accel.PURE_ENV: "1"})
    assert out.startswith("False pure Python (AMPS_EMULATOR_PURE is set)")


@compiled
def test_the_built_extension_runs_by_default() -> None:
    assert _describe({accel.PURE_ENV: "0"}) == "True compiled (amps_emulator._speedups)"


# -- the plain publish header -------------------------------------------------------------

KEYS = st.sampled_from(["c", "t", "a", "cid", "s", "k", "x", "o", "sub_id", "cmd", "topic", "é"])
VALUES = (st.sampled_from(["p", "publish", "sow", "processed", "persisted", "processed,persisted",
                           "", "stats", "orders", "a}b", 'q"uote'])
          | st.text(max_size=12)
          | st.integers(-5, (1 << 64) + 5) | st.sampled_from([0, 7, 1 << 63, (1 << 64) - 1])
          | st.floats(allow_nan=False, allow_infinity=False) | st.booleans() | st.none())


PLAIN_TEXT = st.sampled_from(["orders", "processed", "persisted", "processed,persisted", "",
                              "a}b", "\u00e9t\u00e9", "\x7f", "x" * 40]) | st.text(max_size=8)
PLAIN_NUMBER = (st.integers(0, (1 << 64) - 1) | st.sampled_from([0, 1, (1 << 64) - 1, -1, 1 << 64])
                | st.from_regex(r"[0-9]{1,22}", fullmatch=True)  # as the JavaScript client sends s
                | st.sampled_from(["", "007", "18446744073709551615", "18446744073709551616", " 5",
                                   "5 ", "+5", "-1", "1.0"]))


@st.composite
def headers(draw: st.DrawFn) -> bytes:
    if draw(st.booleans()):  # what the fast path takes (values of the right types): mostly accepted
        keys = draw(st.lists(st.sampled_from(["t", "a", "cid", "s"]), unique=True))
        pairs = [("c", draw(st.sampled_from(["p", "publish"])))]
        pairs += [(k, draw(PLAIN_NUMBER if k == "s" else PLAIN_TEXT)) for k in keys]
        pairs = draw(st.permutations(pairs))
        sep = ","
    else:
        pairs = draw(st.lists(st.tuples(KEYS, VALUES), max_size=6))
        if draw(st.booleans()):
            pairs.insert(0, ("c", draw(st.sampled_from(["p", "publish"]))))
        sep = draw(st.sampled_from([",", ",", ", "]))
    text = "{" + sep.join(f"{json.dumps(k)}:{json.dumps(v, ensure_ascii=draw(st.booleans()))}"
                          for k, v in pairs) + "}"
    raw = text.encode()
    if draw(st.integers(0, 9)) == 0:  # damage: a byte changed, or cut short
        i = draw(st.integers(0, len(raw) - 1))
        raw = raw[:i] + draw(st.binary(min_size=0, max_size=2)) + raw[i + 1:]
    return raw + draw(st.sampled_from([b"", b'{"id":1}', b"}x", b"\xff\xfe"]))


def _parsed(payload: bytes) -> tuple:
    try:
        cmd = codec.parse_command(payload)
    except CommandError as exc:
        return ("CommandError", exc.reason, exc.cid)
    except ProtocolError:
        return ("ProtocolError",)
    fields = msgspec.structs.asdict(cmd)
    # ``s`` as it was spelled (123 or "123", which the JavaScript client sends): only
    # finish_command reads it, into ``seq``, which is compared
    fields.pop("wire_seq")
    return ("ok", fields)


@compiled
@settings(max_examples=1500, deadline=None)
@given(headers())
def test_the_publish_header_fast_path_parses_as_the_general_path(payload: bytes) -> None:
    fast = _parsed(payload)
    general = codec._parse_publish_header
    codec._parse_publish_header = None
    try:
        assert _parsed(payload) == fast
    finally:
        codec._parse_publish_header = general


@compiled
def test_the_fast_path_takes_the_official_clients_publishes() -> None:
    assert _speedups is not None
    parse = _speedups.parse_publish_header
    assert parse(b'{"c":"p","t":"orders"}{"id":1}') == (22, "orders", None, None, None)
    assert parse(b'{"c":"p","t":"t","s":18446744073709551615,"a":"persisted","cid":"9"}') == (
        68, "t", "persisted", "9", (1 << 64) - 1)
    assert parse(b'{"c":"publish","t":"t","a":"persisted","s":"1795627113278000001"}{}') == (
        65, "t", "persisted", None, 1795627113278000001)  # the JavaScript client's s
    for declined in (b'{"c":"p","t":"a\\"b"}', b'{"c":"sow","t":"x"}', b'{"t":"x"}',
                     b'{"c":"p", "t":"x"}', b'{"c":"p","t":"x","s":18446744073709551616}',
                     b'{"c":"p","t":"x","s":01}', b'{"c":"p","t":"x","s":1.0}',
                     b'{"c":"p","t":"x","t":"y"}', b'{"c":"p","t":"\xff"}', b'{"c":"p","k":"1"}',
                     b'{"c":"p","s":""}', b'{"c":"p","s":" 1"}', b'{"c":"p","s":"1x"}',
                     b'{"c":"p","s":"18446744073709551616"}', b'{"c":"p","s":"1","s":2}',
                     b'{"c":"p","t":"x"', b"{", b""):
        assert parse(declined) is None, declined


@settings(max_examples=1500, deadline=None)
@given(headers())
def test_the_pure_plain_publish_reader_reads_as_the_general_path(payload: bytes) -> None:
    """What the pure twin takes parses as the general path parses it (a plain publish with
    exactly those values); with the extension built, both readers take the same headers."""
    parts = codec.parse_publish_header_py(payload)
    if _speedups is not None:
        assert _speedups.parse_publish_header(payload) == parts
    if parts is None:
        return
    end, topic, ack_type, cid, seq = parts
    if ack_type not in (None, "persisted"):
        return  # the runs take no other ack type (server.publish_run): the general path does
    general = codec._parse_publish_header
    codec._parse_publish_header = None
    try:
        cmd = codec.parse_command(payload)
    finally:
        codec._parse_publish_header = general
    assert (cmd.command, cmd.topic, cmd.ack_type, cmd.cid, cmd.seq, cmd.body) == (
        "publish", topic, ack_type, cid, seq, payload[end:])
    assert cmd.options is None and cmd.sow_key is None and cmd.correlation_id is None \
        and cmd.expiration is None
