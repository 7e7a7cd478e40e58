"""Codec: framing, header decoding (long and short keys), options, outbound encoding."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amps_emulator.protocol import reasons
from amps_emulator.protocol.codec import (
    FrameDecoder,
    ProtocolError,
    ack,
    frame,
    parse_command,
    sow_batch,
    split_frame,
    unknown_keys,
)
from amps_emulator.protocol.command import parse_options
from amps_emulator.protocol.headers import CLIENT_KNOWN_KEYS
from amps_emulator.protocol.reasons import CommandError


def wire(header: dict | bytes, body: bytes = b"") -> bytes:
    h = header if isinstance(header, bytes) else json.dumps(header, separators=(",", ":")).encode()
    return (len(h) + len(body)).to_bytes(4, "big") + h + body


STREAM = (
    wire({"c": "logon", "cid": "auto0", "client_name": "basic", "mt": "json", "a": "processed",
          "version": "5.3.5.14.c6e65cc.784022:python"})
    + wire({"c": "p", "t": "orders"}, b'{"id":1,"x":2}')
    + wire({"c": "subscribe", "t": "orders", "cid": "auto1", "filter": "/id > 0",
            "a": "processed", "sub_id": "auto1"})
    + wire({"c": "p", "t": "orders", "a": "persisted", "s": 1795292497868000001}, b'{"id":0}')
    + wire({"c": "sow", "t": "o", "cid": "auto2", "a": "processed,completed", "query_id": "auto2",
            "batch_size": 10, "top_n": 3, "orderby": "/x DESC"})
    + wire({"c": "p", "t": "orders", "e": "30"}, b"HELLO")
)


def decode_all(chunks) -> list:
    dec = FrameDecoder()
    out = []
    for chunk in chunks:
        out.extend(parse_command(p) for p in dec.feed(chunk))
    assert dec.buffered == 0
    return out


def check_stream(cmds) -> None:
    assert [c.command for c in cmds] == ["logon", "publish", "subscribe", "publish", "sow", "publish"]
    logon, pub, sub, spub, sow, epub = cmds
    assert logon.client_name == "basic" and logon.message_type == "json"
    assert logon.acks == {"processed"} and logon.cid == "auto0"
    assert pub.topic == "orders" and pub.body == b'{"id":1,"x":2}'
    assert sub.filter == "/id > 0" and sub.sub_id == "auto1"
    assert spub.seq == 1795292497868000001 and spub.acks == {"persisted"}
    assert sow.batch_size == 10 and sow.top_n == 3 and sow.orderby == "/x DESC"
    assert sow.acks == {"processed", "completed"} and sow.query_id == "auto2"
    assert epub.expiration == 30 and epub.body == b"HELLO"


def test_stream_fed_whole():
    check_stream(decode_all([STREAM]))


def test_stream_fed_one_byte_at_a_time():
    check_stream(decode_all([STREAM[i:i + 1] for i in range(len(STREAM))]))


@given(st.lists(st.integers(min_value=1, max_value=len(STREAM) - 1), max_size=12))
@settings(max_examples=60, deadline=None)
def test_stream_fed_in_arbitrary_chunks(cuts):
    bounds = [0, *sorted(set(cuts)), len(STREAM)]
    check_stream(decode_all([STREAM[a:b] for a, b in zip(bounds, bounds[1:])]))


def test_long_and_short_keys_mean_the_same():
    short = parse_command(wire({"c": "p", "t": "a", "s": "7", "x": "corr", "k": "key", "o": "oof",
                                "bm": "1|2|", "cid": "9"})[4:])
    long = parse_command(wire({"cmd": "publish", "topic": "a", "seq": 7, "correlation_id": "corr",
                               "sow_key": "key", "opts": "oof", "bookmark": "1|2|", "cmd_id": "9"})[4:])
    for name in ("command", "topic", "seq", "correlation_id", "sow_key", "options", "bookmark", "cid"):
        assert getattr(short, name) == getattr(long, name), name
    assert short.seq == 7


def test_body_starts_right_after_header_even_with_braces_in_strings():
    payload = b'{"c":"p","t":"x","x":"a}\\"{b"}{"v":"}"}'
    header, body = split_frame(payload)
    assert header["x"] == 'a}"{b'
    assert body == b'{"v":"}"}'


def test_oversized_length_prefix_is_rejected_before_buffering():
    dec = FrameDecoder(max_frame=1024)
    with pytest.raises(ProtocolError, match="exceeds"):
        dec.feed((2 * 1024 ** 3).to_bytes(4, "big") + b"{")
    assert dec.buffered == 0


def test_frame_at_the_limit_is_accepted():
    dec = FrameDecoder(max_frame=20)
    payload = b'{"c":"p","t":"x"}abc'
    assert len(payload) == 20
    assert dec.feed(wire(payload)) == [payload]
    with pytest.raises(ProtocolError):
        dec.feed(wire(payload + b"!"))


def test_not_a_header_is_a_protocol_error():
    with pytest.raises(ProtocolError):
        parse_command(b"garbage")
    with pytest.raises(ProtocolError):
        parse_command(b'{"c":"p",')


def test_unknown_command_keeps_cid():
    with pytest.raises(CommandError) as ei:
        parse_command(wire({"c": "frobnicate", "cid": "c1", "a": "processed"})[4:])
    assert ei.value.reason == reasons.UNKNOWN_COMMAND
    assert ei.value.cid == "c1"


def test_malformed_header_with_cid_is_a_command_error():
    with pytest.raises(CommandError) as ei:
        parse_command(b'{"c":"p","cid":"c9","a":processed}')
    assert ei.value.reason == reasons.HEADER_MALFORMED and ei.value.cid == "c9"


@pytest.mark.parametrize("header", [
    {"c": "p", "t": "x", "batch_size": True},
    {"c": "p", "t": ["x"]},
    {"t": "x"},
    {"c": "p", "a": "processed,bogus"},
])
def test_bad_field_values_are_header_malformed(header):
    with pytest.raises(CommandError) as ei:
        parse_command(wire(header)[4:])
    assert ei.value.reason == reasons.HEADER_MALFORMED


@pytest.mark.parametrize("field,value,reason", [
    ("s", 2 ** 64, reasons.INVALID_SEQUENCE),
    ("s", -1, reasons.INVALID_SEQUENCE),
    ("s", "abc", reasons.INVALID_SEQUENCE),
    ("s", "1e400", reasons.INVALID_SEQUENCE),
    ("s", 1.5, reasons.INVALID_SEQUENCE),
    ("seq", "99999999999999999999999", reasons.INVALID_SEQUENCE),
    ("e", 2 ** 64 + 1, reasons.INVALID_EXPIRATION),
    ("e", -3, reasons.INVALID_EXPIRATION),
    ("batch_size", "many", reasons.INVALID_BATCH_SIZE),
    ("top_n", -1, reasons.INVALID_TOPN),
])
def test_numbers_out_of_range_are_refused_with_their_reason(field, value, reason):
    with pytest.raises(CommandError) as ei:
        parse_command(wire({"c": "p", "cid": "n1", "t": "x", "a": "processed", field: value})[4:])
    assert ei.value.reason == reason and ei.value.cid == "n1"


@pytest.mark.parametrize("value,expected", [
    (0, 0), (2 ** 64 - 1, 2 ** 64 - 1), ("42", 42), (" 7 ", 7), (3.0, 3)])
def test_numbers_in_range_are_read(value, expected):
    assert parse_command(wire({"c": "p", "t": "x", "s": value})[4:]).seq == expected


@given(st.binary(max_size=300))
@settings(max_examples=400, deadline=None)
def test_arbitrary_bytes_only_raise_codec_errors(data):
    dec = FrameDecoder(max_frame=256)
    try:
        for payload in dec.feed(data):
            try:
                parse_command(payload)
            except (ProtocolError, CommandError):
                pass
    except ProtocolError:
        pass


@given(st.dictionaries(st.sampled_from(["c", "t", "cid", "a", "s", "o", "filter", "bs", "e", "zz"]),
                       st.one_of(st.text(max_size=8), st.integers(), st.floats(), st.booleans(),
                                 st.none()), max_size=6),
       st.binary(max_size=20))
@settings(max_examples=300, deadline=None)
def test_arbitrary_headers_only_raise_codec_errors(header, body):
    try:
        parse_command(msgspec.json.encode(header) + body)
    except (ProtocolError, CommandError):
        pass


@pytest.mark.parametrize("text,expected", [
    ("replace,oof", {"replace": True, "oof": True}),
    ("max_backlog=5, live", {"max_backlog": "5", "live": True}),
    ("select=[-/,+/subId,+/bookmark]", {"select": "[-/,+/subId,+/bookmark]"}),
    ("top_n=3,projection=[/a,SUM(/b) AS /c],grouping=[/a]",
     {"top_n": "3", "projection": "[/a,SUM(/b) AS /c]", "grouping": "[/a]"}),
    ("", {}),
    ("bookmark_not_found=epoch", {"bookmark_not_found": "epoch"}),
])
def test_parse_options(text, expected):
    assert parse_options(text) == expected


def test_unbalanced_options_are_invalid():
    with pytest.raises(CommandError) as ei:
        parse_options("select=[-/,+/a")
    assert ei.value.reason == reasons.INVALID_OPTIONS


def test_outbound_headers_are_compact_utf8_and_known():
    data = ack("auto1", "completed", query_id="q", records_returned=2, topic_matches=2, matches=2,
               reason=None)
    header, body = split_frame(data[4:])
    assert body == b""
    assert b" " not in data[4:]
    assert not unknown_keys(header)
    topic_frame = frame({"c": "p", "t": "café", "sids": "a"}, b"{}")
    assert "café".encode() in topic_frame and b"\\u" not in topic_frame


def test_sow_batch_layout_is_exact():
    data = sow_batch("orders", "q1", [({"k": "k1"}, b'{"id":1}'), ({"k": "k2"}, b'{"id":22}')])
    assert int.from_bytes(data[:4], "big") == len(data) - 4
    assert data[4:] == (b'{"c":"sow","t":"orders","query_id":"q1"}{"k":"k1","l":8}{"id":1}'
                        b'{"k":"k2","l":9}{"id":22}')


def test_client_known_keys_match_the_protocol_notes():
    assert len(CLIENT_KNOWN_KEYS) == 48
    assert "sow_key" not in CLIENT_KNOWN_KEYS and "msg_len" not in CLIENT_KNOWN_KEYS
