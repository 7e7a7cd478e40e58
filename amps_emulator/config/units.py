"""Unit-bearing values in AMPS configuration files: durations, byte sizes, counts, switches.

Every parser takes the element text and returns a plain Python value, or raises
``ValueError`` with a reason that the loader attaches to the element's file and line.

* Durations -> ``float`` seconds. Units ``ns us ms s m h d w`` (case-insensitive; AMPS uses
  ``m`` for minutes in intervals). A bare number means seconds. ``0.5s`` and ``1.5h`` work.
* Sizes -> ``int`` bytes. Suffixes ``k kb kib m mb mib g gb gib t tb tib`` (case-insensitive)
  are *binary* multiples (``10MB`` = 10 * 2**20), as AMPS sizes memory and files; a bare number
  (or ``b``) means bytes. ``parse_size(text, binary=False)`` gives the decimal multiples that
  AMPS documents for log ``RotationThreshold`` (``2G`` = 2 * 10**9).
* Counts -> ``int``. AMPS exponent units ``k`` (10**3) and ``M`` (10**6), e.g. ``10k``; the
  result must be a whole number.
* Switches -> ``bool``: ``true/false enabled/disabled yes/no on/off 1/0``.
* Percentages -> ``float`` fraction: ``50%`` (or ``50``) is 0.5; above 0, at most 100%.
"""

from __future__ import annotations

import math
import re

_NUMBER = r"(\d+(?:\.\d*)?|\.\d+)"
_VALUE = re.compile(rf"\s*{_NUMBER}\s*([A-Za-z]*)\s*")

_DURATION_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 604800.0,
}

_SIZE_EXPONENT = {"": 0, "b": 0, "k": 1, "m": 2, "g": 3, "t": 4}

_COUNT_UNITS = {"": 1, "k": 1_000, "m": 1_000_000}

_TRUE = frozenset({"true", "enabled", "enable", "yes", "on", "1"})
_FALSE = frozenset({"false", "disabled", "disable", "no", "off", "0"})


def _split(text: str, what: str, example: str) -> tuple[float, str]:
    m = _VALUE.fullmatch(text)
    if m is None:
        raise ValueError(f"invalid {what} {text.strip()!r} (expected e.g. {example})")
    return float(m.group(1)), m.group(2).lower()


def parse_duration(text: str) -> float:
    """Parse an AMPS interval (``30s``, ``500ms``, ``1h``, ``2m``, ``1d``, bare = seconds)."""
    number, unit = _split(text, "duration", "500ms, 30s, 2m, 1h or 1d")
    if unit == "":
        unit = "s"
    factor = _DURATION_UNITS.get(unit)
    if factor is None:
        raise ValueError(
            f"invalid duration {text.strip()!r}: unknown unit {unit!r} "
            f"(use one of {', '.join(_DURATION_UNITS)})"
        )
    return number * factor


#: the seconds of ``conflation=auto`` (AMPS tunes it to the client; the emulator does not)
AUTO_CONFLATION = 0.1


def parse_conflation(text: str) -> float | None:
    """The seconds of a ``conflation`` option (None: ``none``; ``auto``:
    :data:`AUTO_CONFLATION`); ValueError unless a positive interval, ``auto`` or ``none``."""
    word = text.strip().lower()
    if word == "none":
        return None
    if word == "auto":
        return AUTO_CONFLATION
    try:
        seconds = parse_duration(word)
    except ValueError as exc:
        raise ValueError(f"must be an interval, auto or none: {exc}") from None
    if seconds <= 0:
        raise ValueError("must be a positive interval")
    return seconds


def parse_size(text: str, *, binary: bool = True) -> int:
    """Parse a byte size (``10MB``, ``2G``, ``512KB``, ``1GB``, ``10k``; bare = bytes)."""
    number, unit = _split(text, "size", "512KB, 10MB or 2GB")
    key = unit
    if key.endswith("ib") and len(key) == 3:
        key = key[0]
    elif key.endswith("b") and len(key) == 2:
        key = key[0]
    exponent = _SIZE_EXPONENT.get(key)
    if exponent is None:
        raise ValueError(
            f"invalid size {text.strip()!r}: unknown unit {unit!r} (use B, KB, MB, GB or TB)"
        )
    base = 1024 if binary else 1000
    value = number * base**exponent
    if not math.isfinite(value):
        raise ValueError(f"invalid size {text.strip()!r}: too large")
    return int(round(value))


def parse_count(text: str) -> int:
    """Parse a whole-number count, allowing ``k`` (thousand) and ``M`` (million)."""
    number, unit = _split(text, "number", "10, 500 or 10k")
    factor = _COUNT_UNITS.get(unit)
    if factor is None:
        raise ValueError(f"invalid number {text.strip()!r}: unknown unit {unit!r} (use k or M)")
    value = number * factor
    if value != int(value):
        raise ValueError(f"invalid number {text.strip()!r}: must be a whole number")
    return int(value)


def parse_bool(text: str) -> bool:
    """Parse an AMPS switch: ``enabled``/``disabled``, ``true``/``false`` and friends."""
    word = text.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise ValueError(f"invalid switch {text.strip()!r} (expected enabled/disabled or true/false)")


def parse_percent(text: str) -> float:
    """Parse a percentage (``50%`` or ``50``) as a fraction above 0 and at most 1."""
    word = text.strip()
    try:
        value = float(word[:-1] if word.endswith("%") else word)
    except ValueError:
        raise ValueError(f"invalid percentage {word!r} (e.g. 50%)") from None
    if not 0 < value <= 100:
        raise ValueError(f"invalid percentage {word!r}: above 0%, at most 100%")
    return value / 100


def parse_file_mask(text: str) -> int:
    """Parse a permissions mask as ``chmod`` takes it (octal: ``0640``, ``644``)."""
    value = text.strip()
    if not value or len(value) > 4 or any(c not in "01234567" for c in value):
        raise ValueError(f"{value!r} is not an octal permissions mask such as 0640")
    return int(value, 8)
