"""Unit and value parsers of the config package: durations, sizes, counts, switches, InetAddr."""

from __future__ import annotations

import pytest

from amps_emulator.config.units import parse_bool, parse_count, parse_duration, parse_size
from amps_emulator.config.values import enum, parse_inet_addr, parse_recovery_point, parse_regex, parse_xpath

MiB = 1024 * 1024


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30.0),
        ("500ms", 0.5),
        ("1h", 3600.0),
        ("2m", 120.0),
        ("1d", 86400.0),
        ("1w", 604800.0),
        ("250us", 250e-6),
        ("10ns", 10e-9),
        ("45", 45.0),  # bare number = seconds
        ("1.5h", 5400.0),
        (" 15m ", 900.0),
        ("100MS", 0.1),  # units are case-insensitive for intervals
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "s", "30 sec", "10y", "-5s", "1h30m", "abc"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("10MB", 10 * MiB),
        ("2G", 2 * 1024 * MiB),
        ("10k", 10 * 1024),
        ("512KB", 512 * 1024),
        ("1GB", 1024 * MiB),
        ("1gib", 1024 * MiB),
        ("4096", 4096),
        ("100b", 100),
        ("0.5T", 512 * 1024 * MiB),
    ],
)
def test_sizes_are_binary(text: str, size: int) -> None:
    assert parse_size(text) == size


def test_decimal_sizes_for_log_rotation() -> None:
    assert parse_size("2G", binary=False) == 2_000_000_000
    assert parse_size("50k", binary=False) == 50_000


@pytest.mark.parametrize("text", ["10XB", "MB", "ten", "1.2.3MB", "-1MB"])
def test_bad_sizes(text: str) -> None:
    with pytest.raises(ValueError, match="size"):
        parse_size(text)


@pytest.mark.parametrize(("text", "n"), [("10", 10), ("10k", 10_000), ("2M", 2_000_000), ("1.5k", 1500)])
def test_counts(text: str, n: int) -> None:
    assert parse_count(text) == n


@pytest.mark.parametrize("text", ["1.5", "3x", "k", "0.0001k"])
def test_bad_counts(text: str) -> None:
    with pytest.raises(ValueError):
        parse_count(text)


@pytest.mark.parametrize(("text", "value"), [("enabled", True), ("TRUE", True), ("disabled", False), ("no", False)])
def test_switches(text: str, value: bool) -> None:
    assert parse_bool(text) is value


def test_bad_switch() -> None:
    with pytest.raises(ValueError, match="enabled/disabled"):
        parse_bool("maybe")


@pytest.mark.parametrize(
    ("text", "host", "port"),
    [
        ("9007", None, 9007),
        ("localhost:9007", "localhost", 9007),
        ("127.0.0.1:9007", "127.0.0.1", 9007),
        ("0.0.0.0:19007", "0.0.0.0", 19007),
        ("[::1]:9007", "::1", 9007),
        ("[::]:9008", "::", 9008),
        ("amps-1.example.com:10004", "amps-1.example.com", 10004),
        ("0", None, 0),
    ],
)
def test_inet_addr(text: str, host: str | None, port: int) -> None:
    assert parse_inet_addr(text) == (host, port)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("99999", "out of range"),
        ("host:", "invalid port"),
        (":9007", "empty host"),
        ("::1:9007", "brackets"),
        ("[::1]9007", "expected \\[ipv6-address\\]:port"),
        ("[zz::1]:9007", "invalid IPv6"),
        ("300.1.1.1:9007", "invalid IPv4"),
        ("bad host:9007", "invalid host name"),
        ("tcp", "expected port"),
    ],
)
def test_bad_inet_addr(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_inet_addr(text)


def test_enum_suggests_close_value() -> None:
    parse = enum(["at-least-once", "at-most-once"])
    assert parse("AT-MOST-ONCE") == "at-most-once"
    with pytest.raises(ValueError, match="did you mean 'at-least-once'"):
        parse("at-lest-once")


def test_other_values() -> None:
    assert parse_xpath("/55") == "/55"
    with pytest.raises(ValueError):
        parse_xpath("orderId")
    assert parse_regex("^ORDERS_.*$") == "^ORDERS_.*$"
    with pytest.raises(ValueError, match="regular expression"):
        parse_regex("ORDERS_(")
    assert parse_recovery_point("NOW") == "now"
    assert parse_recovery_point("20240102T123500Z") == "20240102T123500Z"
    assert parse_recovery_point("123|456|") == "123|456|"
    with pytest.raises(ValueError, match="recovery point"):
        parse_recovery_point("yesterday")
