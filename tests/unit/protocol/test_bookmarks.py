"""Parsing and formatting of every client bookmark form (protocol/bookmarks.py)."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amps_emulator.protocol.bookmarks import (
    EPOCH,
    NOW,
    RECENT,
    Bookmark,
    BookmarkError,
    BookmarkList,
    BookmarkRange,
    BookmarkTimestamp,
    format_bookmark,
    format_timestamp,
    parse_bookmark,
    parse_timestamp,
    publisher_id_for,
)

U64 = (1 << 64) - 1


def micros(*args) -> int:
    when = dt.datetime(*args, tzinfo=dt.UTC)
    return int(when.timestamp()) * 1_000_000 + when.microsecond


# ---------------------------------------------------------------- single forms
@pytest.mark.parametrize(
    "text, expected",
    [
        ("13426321568218706041|1604514133234000002|", Bookmark(13426321568218706041, 1604514133234000002)),
        ("1|2|", Bookmark(1, 2)),
        (f"{U64}|{U64}|", Bookmark(U64, U64)),
        ("0|0|", Bookmark(0, 0)),
        ("  5|6|  ", Bookmark(5, 6)),
    ],
)
def test_parse_publisher_sequence(text, expected):
    assert parse_bookmark(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("0", EPOCH),
        ("epoch", EPOCH),
        ("EPOCH", EPOCH),
        ("0|1|", NOW),
        ("now", NOW),
        ("Now", NOW),
        ("recent", RECENT),
        ("RECENT", RECENT),
    ],
)
def test_parse_keywords(text, expected):
    assert parse_bookmark(text) is expected


def test_keyword_wire_forms():
    assert format_bookmark(EPOCH) == "0"
    assert format_bookmark(NOW) == "0|1|"
    assert format_bookmark(RECENT) == "recent"


@pytest.mark.parametrize(
    "text, expected",
    [
        ("20261121T120000", micros(2026, 11, 21, 12, 0, 0)),
        ("20261121T120000Z", micros(2026, 11, 21, 12, 0, 0)),
        ("20261121T120000.5", micros(2026, 11, 21, 12, 0, 0, 500000)),
        ("20261121T120000.000001Z", micros(2026, 11, 21, 12, 0, 0, 1)),
        ("19700101T000000", 0),
        ("20240229T235959.999999", micros(2024, 2, 29, 23, 59, 59, 999999)),
    ],
)
def test_parse_timestamps(text, expected):
    assert parse_bookmark(text) == BookmarkTimestamp(expected)
    assert parse_timestamp(text) == expected


def test_format_timestamp_canonical():
    assert format_timestamp(micros(2026, 11, 21, 12, 0, 0)) == "20261121T120000Z"
    assert format_timestamp(micros(2026, 11, 21, 12, 0, 0, 1500)) == "20261121T120000.001500Z"
    assert format_bookmark(BookmarkTimestamp(0)) == "19700101T000000Z"


def test_parse_list():
    value = parse_bookmark("2222|1|,1111|2|")
    assert value == BookmarkList((Bookmark(2222, 1), Bookmark(1111, 2)))
    assert format_bookmark(value) == "2222|1|,1111|2|"
    mixed = parse_bookmark("1|2|, 20261121T120000 ,0")
    assert mixed == BookmarkList((Bookmark(1, 2), BookmarkTimestamp(micros(2026, 11, 21, 12)), EPOCH))


@pytest.mark.parametrize(
    "text, start_inc, end_inc",
    [("[1|2|:3|4|]", True, True), ("[1|2|:3|4|)", True, False), ("(1|2|:3|4|]", False, True), ("(1|2|:3|4|)", False, False)],
)
def test_parse_range_inclusivity(text, start_inc, end_inc):
    value = parse_bookmark(text)
    assert value == BookmarkRange(Bookmark(1, 2), Bookmark(3, 4), start_inc, end_inc)
    assert format_bookmark(value) == text


def test_parse_range_with_timestamps_lists_and_keywords():
    value = parse_bookmark("[20260101T000000:20260102T000000Z)")
    assert value == BookmarkRange(
        BookmarkTimestamp(micros(2026, 1, 1)), BookmarkTimestamp(micros(2026, 1, 2)), True, False
    )
    value = parse_bookmark("(1|2|,3|4|:now]")
    assert value == BookmarkRange(BookmarkList((Bookmark(1, 2), Bookmark(3, 4))), NOW, False, True)
    assert parse_bookmark("[0:5|6|]").start is EPOCH
    assert parse_bookmark("[recent:5|6|]").start is RECENT


# ---------------------------------------------------------------- invalid forms
@pytest.mark.parametrize(
    "text, fragment",
    [
        ("", "empty"),
        ("   ", "empty"),
        ("abc", "'abc'"),
        ("1|2", "'1|2'"),
        ("1|2|3", "'1|2|3'"),
        ("|1|", "'|1|'"),
        ("-1|2|", "'-1|2|'"),
        ("1.5|2|", "'1.5|2|'"),
        (f"{U64 + 1}|1|", "uint64"),
        ("1|18446744073709551616|", "uint64"),
        ("2026-11-21T12:00:00", "'2026-11-21T12:00:00'"),
        ("20261321T120000", "month must be in 1..12"),
        ("20261121T250000", "hour must be in 0..23"),
        ("20261121T120000.1234567", "YYYYmmddTHHMMSS"),
        ("20261121T1200", "YYYYmmddTHHMMSS"),
        ("1|2|,,3|4|", "empty item"),
        ("1|2|,recent", "'recent' cannot appear in a list"),
        ("[1|2|:3|4|", "must end with"),
        ("1|2|:3|4|]", "must start with"),
        ("[1|2|]", "exactly one ':'"),
        ("[1|2|:3|4|:5|6|]", "exactly one ':'"),
        ("[:3|4|]", "both required"),
        ("[1|2|:recent]", "the end must be"),
        ("[1|2|:0]", "the end must be"),
        ("[1|2|:3|4|,5|6|]", "'3|4|,5|6|'"),
        ("[[1|2|:3|4|]:5|6|]", "exactly one ':'"),
    ],
)
def test_invalid_bookmarks_raise_clear_error(text, fragment):
    with pytest.raises(BookmarkError) as info:
        parse_bookmark(text)
    assert fragment in str(info.value)
    assert isinstance(info.value, ValueError)


def test_non_string_is_rejected():
    with pytest.raises(BookmarkError):
        parse_bookmark(12)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        format_bookmark("1|2|")  # type: ignore[arg-type]


def test_bookmark_fields_must_be_uint64():
    with pytest.raises(BookmarkError):
        Bookmark(-1, 1)
    with pytest.raises(BookmarkError):
        Bookmark(1, U64 + 1)


# ---------------------------------------------------------------- publisher ids
def test_publisher_id_is_stable_and_documented():
    # Pinned values: changing the hash would orphan every bookmark clients have stored.
    import hashlib

    assert publisher_id_for("publisher-1") == 2909501505345156158
    assert publisher_id_for("") == 8241702156723169591
    digest = hashlib.blake2b("é-client".encode(), digest_size=8, person=b"amps-emu-pubid").digest()
    assert publisher_id_for("é-client") == int.from_bytes(digest, "big")
    assert publisher_id_for("publisher-1") != publisher_id_for("publisher-2")


# ---------------------------------------------------------------- round trip property
u64 = st.integers(min_value=0, max_value=U64)
bookmarks = st.builds(Bookmark, u64, u64).filter(lambda b: (b.publisher_id, b.sequence) != (0, 1))
timestamps = st.builds(BookmarkTimestamp, st.integers(min_value=0, max_value=micros(9999, 12, 31, 23, 59, 59)))
items = st.one_of(bookmarks, timestamps, st.sampled_from([EPOCH, NOW]))
lists = st.builds(lambda xs: BookmarkList(tuple(xs)), st.lists(items, min_size=2, max_size=4))
starts = st.one_of(items, lists, st.just(RECENT))
ends = st.one_of(bookmarks, timestamps, st.just(NOW))
ranges = st.builds(BookmarkRange, starts, ends, st.booleans(), st.booleans())
specs = st.one_of(items, st.just(RECENT), lists, ranges)


@settings(max_examples=300, deadline=None)
@given(specs)
def test_format_then_parse_round_trips(spec):
    text = format_bookmark(spec)
    assert parse_bookmark(text) == spec
    assert format_bookmark(parse_bookmark(text)) == text


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=30))
def test_parser_never_crashes_on_arbitrary_text(text):
    try:
        value = parse_bookmark(text)
    except BookmarkError:
        return
    assert parse_bookmark(format_bookmark(value)) == value
