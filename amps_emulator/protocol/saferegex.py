"""Regular expressions whose cost per match is bounded, for filters (``LIKE``,
``REGEXP_REPLACE``) and regex topics.

AMPS runs PCRE with match limits; Python's backtracking ``re`` has none, and one pattern such
as ``^(a+)+$`` against a 34-character string holds the event loop (and every client) for
minutes. :func:`compile_pattern` picks, per pattern, the cheapest engine that is safe:

* Python ``re`` when the pattern has no repetition and no alternation (nothing to backtrack
  over: the cost is at most subject length times pattern length);
* otherwise RE2 (``google-re2``), whose matching time is linear in the subject;
* otherwise (back-references, look-around, atomic groups: what RE2 refuses) the ``regex``
  module, whose every match gives up after :data:`MATCH_TIMEOUT` seconds, and all of whose
  matches together get :data:`BOUNDED_SHARE` of each second; a match that gives up counts
  as "does not match" (AMPS: the PCRE match limit), logged once per pattern.

A pattern none of them compiles raises ``re.error``; callers report it as ``bad filter`` or
``bad regex topic``. The PCRE spellings Python lacks are rewritten first
(:func:`translate_regex`).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import Any

try:
    import re2 as _re2mod
    from re2 import _re2
except ImportError:  # pragma: no cover - the wheel exists for the platforms we ship on
    _re2mod = None
try:
    import regex as _bounded
except ImportError:  # pragma: no cover - a declared dependency
    _bounded = None

log = logging.getLogger("amps_emulator.regex")

__all__ = ["SafePattern", "compile_pattern", "translate_regex", "MATCH_TIMEOUT"]

#: seconds one backtracking match (the last-resort engine) may run before it gives up
MATCH_TIMEOUT = 0.005
#: seconds per second that all last-resort matches together may use: past it they give up at
#: once, so many subjects (a query over a deep queue) or many patterns cannot add up to a stall
BOUNDED_SHARE = 0.05
_CACHE_LIMIT = 1024

_GLOBAL_FLAGS_RE = re.compile(r"\(\?([imsx]+)\)")
_POSIX_CLASSES = {
    "[:alpha:]": "a-zA-Z", "[:digit:]": "0-9", "[:alnum:]": "a-zA-Z0-9", "[:upper:]": "A-Z",
    "[:lower:]": "a-z", "[:space:]": "\\s", "[:xdigit:]": "0-9A-Fa-f", "[:word:]": "\\w",
    "[:punct:]": re.escape("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"), "[:blank:]": " \\t",
    "[:cntrl:]": "\\x00-\\x1f\\x7f", "[:print:]": "\\x20-\\x7e", "[:graph:]": "\\x21-\\x7e",
}


def translate_regex(pattern: str) -> str:
    """Rewrite the PCRE constructs Python's ``re`` spells differently or lacks.

    ``\\z`` -> ``\\Z``; PCRE ``\\Z`` (end, or before a final newline) -> ``(?=\\n?\\Z)``;
    ``\\h`` -> ``[ \\t]``; ``\\Q...\\E`` -> escaped text; ``(?<name>`` / ``(?'name'`` ->
    ``(?P<name>``; ``\\k<name>`` -> ``(?P=name)``; POSIX ``[:alpha:]``-style classes inside
    brackets; ``(?i)``-style flag groups after the start move to the start.
    """
    out = []
    i = 0
    n = len(pattern)
    while i < n:
        ch = pattern[i]
        if ch == "\\" and i + 1 < n:
            nx = pattern[i + 1]
            if nx == "z":
                out.append(r"\Z")
            elif nx == "Z":
                out.append(r"(?=\n?\Z)")
            elif nx == "h":
                out.append(r"[ \t]")
            elif nx == "Q":
                end = pattern.find("\\E", i + 2)
                end = n if end < 0 else end
                out.append(re.escape(pattern[i + 2:end]))
                i = end + 2
                continue
            elif nx == "k" and i + 2 < n and pattern[i + 2] in "<{'":
                close = {"<": ">", "{": "}", "'": "'"}[pattern[i + 2]]
                end = pattern.find(close, i + 3)
                if end < 0:
                    out.append(pattern[i:i + 2])
                else:
                    out.append(f"(?P={pattern[i + 3:end]})")
                    i = end + 1
                    continue
            else:
                out.append(pattern[i:i + 2])
            i += 2
            continue
        if ch == "(" and pattern.startswith("(?<", i) and i + 3 < n and \
                pattern[i + 3] not in "=!":
            out.append("(?P<")
            i += 3
            continue
        if ch == "(" and pattern.startswith("(?'", i):
            end = pattern.find("'", i + 3)
            if end > 0:
                out.append(f"(?P<{pattern[i + 3:end]}>")
                i = end + 1
                continue
        if ch == "[" and pattern.startswith("[:", i):
            end = pattern.find(":]", i + 2)
            cls = _POSIX_CLASSES.get(pattern[i:end + 2]) if end > 0 else None
            if cls is not None:
                out.append(cls)
                i = end + 2
                continue
        out.append(ch)
        i += 1
    text = "".join(out)
    flags = ""
    m = _GLOBAL_FLAGS_RE.match(text)
    while m is not None:  # leading groups are fine as they are
        flags += m.group(1)
        text = text[m.end():]
        m = _GLOBAL_FLAGS_RE.match(text)
    late = _GLOBAL_FLAGS_RE.findall(text)
    if late:
        text = _GLOBAL_FLAGS_RE.sub("", text)
        flags += "".join(late)
    if flags:
        text = "(?" + "".join(sorted(set(flags))) + ")" + text
    return text


# ---- engines -----------------------------------------------------------------------------

def _is_simple(text: str) -> bool:
    """No repetition and no alternation outside ``(?...)`` group openers: the backtracking
    engine cannot blow up (conservative: a ``+`` inside a class also says no)."""
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch in "*+{|":
            return False
        if ch == "?" and not (i and text[i - 1] == "("):
            return False
        i += 1
    return True


_LEADING_FLAGS = re.compile(r"\(\?([a-zA-Z]+)\)")


def _for_re2(text: str) -> str:
    """The Python-syntax ``text`` in RE2's spelling: ``\\Z`` is ``\\z``; PCRE's ``$`` (end, or
    before a final newline) is ``\\n?\\z`` unless ``(?m)`` makes it end of line; what RE2
    lacks (look-around, back-references) is left for RE2 to refuse."""
    text = text.replace("(?=\\n?\\Z)", "(?:\\n?\\z)")
    flags = _LEADING_FLAGS.match(text)
    multiline = flags is not None and "m" in flags.group(1)
    out = []
    i, n = 0, len(text)
    in_class = False
    while i < n:
        ch = text[i]
        if ch == "\\" and i + 1 < n:
            out.append("\\z" if text[i + 1] == "Z" and not in_class else text[i:i + 2])
            i += 2
            continue
        if in_class:
            if ch == "]":
                in_class = False
        elif ch == "[":
            in_class = True
            if text.startswith("[^]", i) or text.startswith("[]", i):
                out.append(text[i:i + (3 if text[i + 1] == "^" else 2)])
                i += 3 if text[i + 1] == "^" else 2
                continue
        elif ch == "$" and not multiline:
            out.append("(?:\\n?\\z)")
            i += 1
            continue
        out.append(ch)
        i += 1
    return "".join(out)


if _re2mod is not None:
    _RE2_OPTIONS = _re2mod.Options()
    _RE2_OPTIONS.log_errors = False  # a refused pattern is reported to the client instead
    _RE2_OPTIONS.never_capture = True  # only "is there a match" is asked of RE2
    _UNANCHORED = _re2.RE2.Anchor.UNANCHORED


def _re2_search(text: str) -> Callable[[str], Any] | None:
    """A linear-time ``search(s) -> True | None`` or None if RE2 cannot run ``text``."""
    if _re2mod is None:
        return None
    try:
        rx = _re2.RE2(_for_re2(text).encode("utf-8", "surrogatepass"), _RE2_OPTIONS)
    except Exception:
        return None
    if not rx.ok():
        return None
    match = rx.Match

    def search(s: str) -> bool | None:
        b = s.encode("utf-8", "surrogatepass")
        return True if match(_UNANCHORED, b, 0, len(b))[0][0] >= 0 else None

    return search


class _Budget:
    """A token bucket of matching time for the last-resort engine, shared by all patterns."""

    __slots__ = ("left", "at")

    def __init__(self) -> None:
        self.left = BOUNDED_SHARE
        self.at = time.monotonic()

    def grant(self) -> float:
        """Seconds the next match may take (0: give up at once)."""
        now = time.monotonic()
        self.left = min(BOUNDED_SHARE, self.left + (now - self.at) * BOUNDED_SHARE)
        self.at = now
        return min(MATCH_TIMEOUT, self.left) if self.left > 0.0002 else 0.0

    def spend(self, started: float) -> None:
        self.left -= time.monotonic() - started


_budget = _Budget()


class SafePattern:
    """A compiled pattern: ``search(s)`` (truthy or None) and ``sub(new, s)`` (literal
    replacement; None when the match gave up)."""

    __slots__ = ("pattern", "engine", "search", "_py", "_bounded", "_gave_up")

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        text = translate_regex(pattern)
        self._py: re.Pattern | None = None
        self._bounded: Any = None
        self._gave_up = False
        self.search: Callable[[str], Any]
        if _is_simple(text):
            self._py = re.compile(text, re.ASCII)
            self.engine = "re"
            self.search = self._py.search
            return
        search = _re2_search(text)
        if _bounded is not None:
            try:
                self._bounded = _bounded.compile(text, _bounded.ASCII)
            except _bounded.error as exc:
                if search is None:
                    raise re.error(str(exc)) from None
        if search is not None:
            self.engine = "re2"
            self.search = search
        elif self._bounded is not None:
            self.engine = "bounded"
            self.search = self._bounded_search
        else:  # pragma: no cover - neither optional engine installed
            self._py = re.compile(text, re.ASCII)
            self.engine = "re"
            self.search = self._py.search

    def __repr__(self) -> str:
        return f"SafePattern({self.pattern!r}, engine={self.engine})"

    def _give_up(self, s: str) -> None:
        if not self._gave_up:
            self._gave_up = True
            log.warning("regular expression %r gave up on a %d-character subject (limits: "
                        "%g ms a match, %g%% of the time for all such patterns): counted as "
                        "no match (logged once per pattern)", self.pattern, len(s),
                        MATCH_TIMEOUT * 1000, BOUNDED_SHARE * 100)

    def _bounded_call(self, method: Any, s: str, *args: Any) -> Any:
        allowed = _budget.grant()
        if not allowed:
            self._give_up(s)
            return None
        started = time.monotonic()
        try:
            return method(*args, s, timeout=allowed)
        except TimeoutError:
            self._give_up(s)
            return None
        finally:
            _budget.spend(started)

    def _bounded_search(self, s: str) -> Any:
        return self._bounded_call(self._bounded.search, s)

    def sub(self, new: str, s: str) -> str | None:
        """``s`` with every match replaced by the literal ``new`` (None: gave up)."""
        if self._py is not None:
            return self._py.sub(lambda m: new, s)
        return self._bounded_call(self._bounded.sub, s, lambda m: new)


_cache: dict[str, SafePattern] = {}


def compile_pattern(pattern: str) -> SafePattern:
    """The :class:`SafePattern` for a PCRE-style ``pattern`` (cached); ``re.error`` if no
    engine can run it."""
    rx = _cache.get(pattern)
    if rx is None:
        rx = SafePattern(pattern)
        if len(_cache) > _CACHE_LIMIT:
            _cache.clear()
        _cache[pattern] = rx
    return rx
