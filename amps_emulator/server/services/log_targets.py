"""``Logging/Target``: the AMPS event log targets, built on Python's :mod:`logging`.

Each configured target becomes one handler on the ``amps_emulator`` logger:

``stdout`` / ``stderr``
    a stream handler;
``file`` / ``gzip``
    a file (``gzip``: compressed) named by ``FileName`` with AMPS's tokens: every
    ``strftime`` token (``%Y%m%d%H%M%S``...) is the time the file is opened, and ``%n`` the
    rotation number (``00000``, ``00001``...). With a ``RotationThreshold`` a new file is
    started once the current one holds that many bytes of (uncompressed) log text; when the
    name has neither ``%n`` nor a time token, the full file is renamed ``NAME.1``, ``NAME.2``...
    A name without rotation is appended to, as AMPS does. Missing directories are created;
``syslog``
    :class:`logging.handlers.SysLogHandler` on ``/dev/log`` with ``Ident``, ``Facility`` and the
    ``LOG_PID`` option (others are accepted and have no effect).

Levels: AMPS's ``developer < trace < stats < info < warning < error < critical < emergency``.
A record passes a target when its level is at or above ``Level``, or is one of ``Levels``
(``none``: nothing); a target with neither takes only its ``IncludeErrors`` (AMPS's logging is
opt-in). Python's ``DEBUG`` is ``trace``. ``IncludeErrors`` / ``ExcludeErrors``
match a record's AMPS message id (the ``amps_id`` attribute, e.g. ``00-0015``): an included id
passes whatever its level, an excluded one never does. The emulator gives its lines the id
AMPS logs the same event under where 60East documents one (:mod:`server.core.amps_names`:
``00-0015`` start-up completed, ``07-0013`` a client disconnected, ...); a target writes a
record's id before its text.

:func:`amps_line` writes a line in AMPS's own event log format (the ``00-0015`` start-up line
the command line prints).
"""

from __future__ import annotations

import gzip
import io
import logging
import logging.handlers
import os
import re
import sys
import time
from collections.abc import Iterable
from typing import Any

AMPS_LEVELS = ("developer", "trace", "stats", "info", "warning", "error", "critical", "emergency")
_RANK = {name: i for i, name in enumerate(AMPS_LEVELS)}
#: the Python level each AMPS level is logged at (developer/trace/stats below INFO)
PY_LEVEL = {"developer": 1, "trace": logging.DEBUG, "stats": 15, "info": logging.INFO,
            "warning": logging.WARNING, "error": logging.ERROR, "critical": logging.CRITICAL,
            "emergency": logging.CRITICAL + 10}
_FORMAT = "%(asctime)s [%(threadName)s] %(levelname)s %(name)s: %(amps_tag)s%(message)s"
_FACILITIES = {"LOG_USER": logging.handlers.SysLogHandler.LOG_USER,
               **{f"LOG_LOCAL{i}": getattr(logging.handlers.SysLogHandler, f"LOG_LOCAL{i}")
                  for i in range(8)}}
_TIME_TOKEN = re.compile(r"%[a-zA-Z]")

for _name, _lvl in PY_LEVEL.items():
    if logging.getLevelName(_lvl).startswith("Level "):
        logging.addLevelName(_lvl, _name.upper())


def amps_level(levelno: int) -> str:
    """The AMPS level of a Python level number."""
    best = "developer"
    for name in AMPS_LEVELS:
        if levelno >= PY_LEVEL[name]:
            best = name
    return best


class TargetFormatter(logging.Formatter):
    """A target's line: the record's AMPS message id, when it has one, before its text."""

    def format(self, record: logging.LogRecord) -> str:
        ident = getattr(record, "amps_id", None)
        record.amps_tag = f"{ident} " if ident else ""
        return super().format(record)


class TargetFilter(logging.Filter):
    """``Level``, ``Levels``, ``IncludeErrors`` and ``ExcludeErrors`` of one target."""

    def __init__(self, level: str | None, levels: Iterable[str] = (),
                 include: Iterable[str] = (), exclude: Iterable[str] = ()) -> None:
        super().__init__()
        self.threshold = None if level in (None, "none") else _RANK[level]
        self.levels = {x for x in levels if x != "none"}
        self.include = [re.compile(p) for p in include]
        self.exclude = [re.compile(p) for p in exclude]

    def filter(self, record: logging.LogRecord) -> bool:
        amps_id = getattr(record, "amps_id", None)
        if amps_id is not None:
            if any(p.fullmatch(amps_id) for p in self.exclude):
                return False
            if any(p.fullmatch(amps_id) for p in self.include):
                return True
        name = amps_level(record.levelno)
        if name in self.levels:
            return True
        return self.threshold is not None and _RANK[name] >= self.threshold

    @property
    def lowest(self) -> int:
        """The lowest Python level this target can let through."""
        ranks = [self.threshold] if self.threshold is not None else []
        ranks += [_RANK[x] for x in self.levels]
        if self.include:
            return 1
        return PY_LEVEL[AMPS_LEVELS[min(ranks)]] if ranks else logging.CRITICAL + 100


def amps_timestamp(now: float) -> str:
    """``now`` (epoch seconds) as AMPS stamps its log lines: local time, ISO 8601, seven
    fractional digits and the UTC offset (``2024-05-02T10:11:12.3456780+02:00``)."""
    local = time.localtime(now)
    ticks = int(round((now - int(now)) * 10_000_000))
    if ticks >= 10_000_000:  # rounded up to the next second
        return amps_timestamp(float(int(now) + 1))
    offset = local.tm_gmtoff // 60
    sign = "-" if offset < 0 else "+"
    hours, minutes = divmod(abs(offset), 60)
    return f"{time.strftime('%Y-%m-%dT%H:%M:%S', local)}.{ticks:07d}{sign}{hours:02d}:{minutes:02d}"


def amps_line(now: float, thread: int, level: str, amps_id: str, text: str) -> str:
    """One event log line in AMPS's format: timestamp, ``[thread]``, level, message id and
    text (``... [1] info: 00-0015 AMPS initialization completed (0 seconds).``)."""
    return f"{amps_timestamp(now)} [{thread}] {level}: {amps_id} {text}"


def expand_file_name(template: str, number: int, now: float | None = None) -> str:
    """AMPS log file name: ``%n`` -> rotation number (5 digits), other ``%`` tokens -> strftime."""
    parts = template.split("%n")
    stamp = time.localtime(now)
    out = [time.strftime(p, stamp) if "%" in p else p for p in parts]
    return f"{number:05d}".join(out)


class RotatingFileTarget(logging.Handler):
    """A ``file`` or ``gzip`` target with AMPS's file name tokens and ``RotationThreshold``."""

    def __init__(self, template: str, *, threshold: int | None = None, compress: bool = False,
                 clock: Any = time.time) -> None:
        super().__init__()
        self.template = template
        self.threshold = threshold
        self.compress = compress
        self.clock = clock
        self.number = 0
        self.stream: io.TextIOBase | None = None
        self.path = ""
        self.size = 0
        self._open()

    def _open(self) -> None:
        self.path = expand_file_name(self.template, self.number, self.clock())
        directory = os.path.dirname(self.path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        if self.compress:
            self.stream = io.TextIOWrapper(gzip.open(self.path, "ab"), encoding="utf-8")
            self.size = 0
        else:
            self.stream = open(self.path, "a", encoding="utf-8")
            self.size = self.stream.tell()

    def _rotate(self) -> None:
        assert self.stream is not None
        self.stream.close()
        old = self.path
        self.number += 1
        static = "%n" not in self.template and not _TIME_TOKEN.search(self.template)
        if static:
            os.replace(old, f"{old}.{self.number}")
        elif expand_file_name(self.template, self.number, self.clock()) == old:
            os.replace(old, f"{old}.{self.number}")  # same second and no %n: keep it aside
        self._open()

    def rotate(self) -> str:
        """Start the next file now (``amps-action-do-rotate-logs``); the one just closed."""
        self.acquire()  # (emit runs under the same lock)
        try:
            old = self.path
            if self.stream is not None and self.size > 0:
                self._rotate()
            return old
        finally:
            self.release()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record) + "\n"
            if self.threshold is not None and self.size > 0 and self.size + len(line) > self.threshold:
                self._rotate()
            assert self.stream is not None
            self.stream.write(line)
            self.stream.flush()
            self.size += len(line.encode("utf-8"))
        except Exception:  # noqa: BLE001 - logging must never take the server down
            self.handleError(record)

    def close(self) -> None:
        with self.lock:  # type: ignore[union-attr]
            if self.stream is not None:
                self.stream.close()
                self.stream = None
        super().close()


def handler_for(target: Any) -> logging.Handler | None:
    """The handler of one ``LogTarget`` (``None``: syslog without a local syslog socket)."""
    p = target.protocol
    if p == "stdout":
        h: logging.Handler = logging.StreamHandler(sys.stdout)
        # a line the command line already printed there (the 00-0015 line) is not repeated
        h.addFilter(lambda record: not getattr(record, "on_stdout", False))
    elif p == "stderr":
        h = logging.StreamHandler(sys.stderr)
    elif p in ("file", "gzip"):
        h = RotatingFileTarget(target.file_name, threshold=target.rotation_threshold,
                               compress=p == "gzip")
    else:  # syslog
        if not os.path.exists("/dev/log"):
            return None
        facility = _FACILITIES.get(target.facility or "LOG_USER", logging.handlers.SysLogHandler.LOG_USER)
        h = logging.handlers.SysLogHandler(address="/dev/log", facility=facility)
        ident = target.ident or "amps-emulator"
        if "LOG_PID" in target.options:
            ident = f"{ident}[{os.getpid()}]"
        h.ident = ident + ": "
    h.setFormatter(TargetFormatter(_FORMAT))
    # logging is opt-in: without Level or Levels a target takes its IncludeErrors alone
    h.addFilter(TargetFilter(target.level, target.levels, target.include_errors,
                             target.exclude_errors))
    return h


def install(targets: Iterable[Any], logger: logging.Logger | None = None, *,
            console_level: int | None = None) -> list[logging.Handler]:
    """Attach a handler per target to ``logger`` (default ``amps_emulator``) and set the
    logger's level to the lowest any target logs. Records then reach only the targets, unless
    ``console_level`` is given: they also go on to the root logger's handlers (the command
    line's ``--log-level`` console). Returns the handlers (for :func:`remove`)."""
    logger = logger or logging.getLogger("amps_emulator")
    handlers = []
    lowest = logging.CRITICAL + 100
    for t in targets:
        h = handler_for(t)
        if h is None:
            logger.warning("%s:%d: syslog target skipped: no local syslog socket (/dev/log)",
                           t.file, t.line)
            continue
        handlers.append(h)
        logger.addHandler(h)
        lowest = min(lowest, next(f.lowest for f in h.filters if isinstance(f, TargetFilter)))
    if handlers:
        if console_level is not None:
            lowest = min(lowest, console_level)
        logger.setLevel(lowest)
        logger.propagate = console_level is not None  # otherwise the targets are the event log
    return handlers


def remove(handlers: Iterable[logging.Handler], logger: logging.Logger | None = None) -> None:
    """Detach and close ``handlers``; with no target left, the logger logs as before."""
    logger = logger or logging.getLogger("amps_emulator")
    for h in handlers:
        logger.removeHandler(h)
        h.close()
    if not any(isinstance(f, TargetFilter) for h in logger.handlers for f in h.filters):
        logger.propagate = True
        logger.setLevel(logging.NOTSET)
