"""Command line: ``amps-emulator [CONFIG.xml]``, like AMPS's ``ampServer CONFIG.xml``.

Runs in the foreground. Prints one readiness line once every transport accepts
connections::

    ready: tcp://127.0.0.1:9007/amps/json

(several transports: their URIs separated by spaces), so scripts can wait for it; then
(with an admin interface) ``admin: http://...``, and last, in AMPS's log line format, the
line harnesses written for AMPS wait for::

    2024-05-02T10:11:12.3456780+02:00 [4711] info: 00-0015 AMPS initialization completed (0 seconds).

SIGTERM and SIGINT shut the server down cleanly.

ampServer's habits: ``-DNAME=VALUE`` defines ``${NAME}`` for the config (over the
environment), ``--version`` and ``--dump-config`` print and exit, ``--server-version``
chooses the AMPS version the server announces. ``--seed FILE`` and ``--init-dir DIR``
publish seed data before the ready line (:mod:`server.ops.seed`).

Every common setting can also come from an environment variable (:data:`ENVIRONMENT`), which
is how containers and CI jobs set them; an option on the command line wins over the variable,
and both win over the config file.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from amps_emulator.server.core.amps_names import INITIALIZED, STARTUP_BANNER, amps_id
from amps_emulator.server.core.version import SERVER_VERSION as DEFAULT_SERVER_VERSION
from amps_emulator.server.ops import heap

if TYPE_CHECKING:
    from amps_emulator.server.ops.seed import SeedMessage

log = logging.getLogger("amps_emulator")

#: environment variable -> the option it stands for (docs/reference/environment.md)
ENVIRONMENT = {
    "AMPS_EMULATOR_CONFIG": "config",
    "AMPS_EMULATOR_LISTEN": "listen",
    "AMPS_EMULATOR_DATA_DIR": "data_dir",
    "AMPS_EMULATOR_LOG_LEVEL": "log_level",
    "AMPS_EMULATOR_DURABILITY": "durability",
    "AMPS_EMULATOR_MEMORY": "memory",
    "AMPS_EMULATOR_SERVER_VERSION": "server_version",
    "AMPS_EMULATOR_INIT_DIR": "init_dir",
}
DEFAULT_DATA_DIR = "./amps-data"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
DURABILITIES = ("group", "strict", "memory")
#: seconds a thread that wants the interpreter lock waits for a busy one (``main``)
SWITCH_INTERVAL = 0.001
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")
_VERSION_RE = re.compile(r"\d+(\.\d+){3}")
_DEFINE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")


def _positive(kind: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be more than 0, not {text}")
        return value
    return parse


def _admin_limits(args: argparse.Namespace) -> Any:
    """The Admin interface's limits, the defaults but for what the command line set."""
    from amps_emulator.server.ops.admin_http import AdminLimits

    limits = AdminLimits()
    if args.admin_max_connections is not None:
        limits.max_connections = args.admin_max_connections
    if args.admin_request_timeout is not None:
        limits.request_deadline = args.admin_request_timeout
    return limits


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="amps-emulator",
        description="AMPS-compatible message server emulator. Reads an AMPS XML config file.",
    )
    p.add_argument("config", nargs="?", help="AMPS configuration file (default: built-in)")
    p.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME=VALUE",
                   help="define ${NAME} for the configuration file, as ampServer does (wins "
                        "over an environment variable of that name; repeatable)")
    p.add_argument("--version", action="store_true",
                   help="print the emulator's version and the AMPS version it announces, and exit")
    p.add_argument("--dump-config", action="store_true",
                   help="print the effective configuration (includes spliced, ${VARIABLES} and "
                        "-D defines substituted) as XML, and exit")
    p.add_argument("--server-version", metavar="X.Y.Z.W",
                   help="the AMPS version to announce in logon acks, the Admin tree and "
                        "${AMPS_VERSION} (default " + DEFAULT_SERVER_VERSION + ")")
    p.add_argument("--seed", action="append", default=[], metavar="FILE",
                   help="publish the JSON lines of FILE ({\"topic\": ..., \"data\": ...}) "
                        "before the ready line (repeatable)")
    p.add_argument("--init-dir", metavar="DIR",
                   help="a container init directory: its *.jsonl seed files (name order) are "
                        "published before the ready line, its one *.xml is the configuration "
                        "when none is given")
    p.add_argument("--sample-config", action="store_true",
                   help="print a commented sample AMPS configuration and exit")
    p.add_argument("--verify-config", metavar="FILE",
                   help="check a configuration file, list every error, exit non-zero if any")
    p.add_argument("--data-dir",
                   help=f"data directory of the built-in default config (default {DEFAULT_DATA_DIR})")
    p.add_argument("--listen", metavar="HOST:PORT",
                   help="override the first transport's address (port 0 picks a free port; "
                        "the ready line shows it)")
    p.add_argument("--durability", choices=DURABILITIES,
                   help="override TransactionLog/Durability: what a persisted ack promises")
    p.add_argument("--memory", action="store_true", default=None,
                   help="write no files at all: transaction log, SOW and queue state in memory "
                        "(nothing survives the process; for throwaway test runs)")
    p.add_argument("--keep-readable-journal", action="store_true",
                   help="start even if the transaction log is damaged in the middle, keeping "
                        "every readable record (the damaged file is kept as *.corrupt)")
    p.add_argument("--admin", metavar="HOST:PORT",
                   help="serve the Admin HTTP interface (monitoring, /emulator/..., the web "
                        "console) here, whatever the config's <Admin> says (port 0: a free "
                        "port, printed as 'admin: http://...' after the ready line)")
    p.add_argument("--admin-max-connections", type=_positive(int), default=None, metavar="N",
                   help="Admin connections served at once; one more is answered 503 and "
                        "closed (default 64)")
    p.add_argument("--admin-request-timeout", type=_positive(float), default=None, metavar="SECONDS",
                   help="time an Admin request's head and body have to arrive, and a kept-alive "
                        "Admin connection may sit idle (default 30)")
    p.add_argument("--test-clock", action="store_true",
                   help="run on a clock that stands still until advanced through "
                        "POST /emulator/clock/advance?seconds=N (leases, expiration, "
                        "heartbeats and History follow it); needs an admin interface")
    p.add_argument("--strict-recovery", action="store_true",
                   help="refuse to start when stored data is found missing (the oldest journal "
                        "segment, or the SOW file of a topic the transaction log cannot "
                        "rebuild) instead of warning and starting without it")
    p.add_argument("--logon-timeout", type=float, default=None, metavar="SECONDS",
                   help="disconnect a connection that has not logged on after this long "
                        "(default 30; 0: never)")
    p.add_argument("--memory-budget", default=None, metavar="SIZE",
                   help="bytes all connections together may hold in buffered frames before "
                        "the largest holders are disconnected as slow consumers "
                        "(default 256MB)")
    p.add_argument("--log-level", choices=LOG_LEVELS,
                   help="also log to stderr at this level (default: INFO when the config has no "
                        "<Logging> targets; the built-in config's stderr target is replaced)")
    return p


def apply_environment(args: argparse.Namespace, environ: Mapping[str, str]) -> argparse.Namespace:
    """Fill every option not given on the command line from its :data:`ENVIRONMENT` variable,
    then the defaults. A bad value is a usage error naming the variable."""
    for var, dest in ENVIRONMENT.items():
        value = environ.get(var)
        if value is None or getattr(args, dest) is not None:
            continue
        if dest == "server_version" and not _VERSION_RE.fullmatch(value):
            raise SystemExit(f"amps-emulator: {var}={value!r}: want a version X.Y.Z.W")
        if dest == "memory":
            if value.strip().lower() not in _TRUE + _FALSE:
                raise SystemExit(f"amps-emulator: {var}={value!r}: want 1 or 0")
            args.memory = value.strip().lower() in _TRUE
            continue
        if dest == "log_level":
            value = value.upper()
        choices = {"log_level": LOG_LEVELS, "durability": DURABILITIES}.get(dest)
        if choices is not None and value not in choices:
            raise SystemExit(f"amps-emulator: {var}={value!r}: want one of {', '.join(choices)}")
        setattr(args, dest, value or None)
    args.data_dir = args.data_dir or DEFAULT_DATA_DIR
    args.server_version = args.server_version or DEFAULT_SERVER_VERSION
    args.log_level = args.log_level or "INFO"
    args.memory = bool(args.memory)
    return args


def parse_defines(defines: Sequence[str]) -> dict[str, str]:
    """``-DNAME=VALUE`` words as a mapping (a later NAME wins); a malformed one is a usage
    error."""
    out: dict[str, str] = {}
    for word in defines:
        name, eq, value = word.partition("=")
        if not eq or not _DEFINE_NAME.fullmatch(name):
            raise SystemExit(f"amps-emulator: -D{word}: want -DNAME=VALUE "
                             "(NAME: letters, digits, '_' and '.')")
        out[name] = value
    return out


def config_environment(defines: Mapping[str, str],
                       environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """What ``${NAME}`` in the configuration reads: the environment with the defines on top."""
    return {**(os.environ if environ is None else environ), **defines}


def load(path: str | None, data_dir: str = DEFAULT_DATA_DIR, listen: str | None = None,
         durability: str | None = None, *, env: Mapping[str, str] | None = None,
         server_version: str = DEFAULT_SERVER_VERSION) -> Any:
    from amps_emulator.config import default_config, load_config

    cfg = default_config(data_dir=data_dir) if path is None else load_config(
        path, env=env, amps_version=server_version)
    if listen:
        cfg = with_listen_address(cfg, listen)
    if durability:
        cfg = with_durability(cfg, durability)
    return cfg


def _replace(obj: Any, **changes: Any) -> Any:
    import dataclasses

    import msgspec

    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.replace(obj, **changes)
    return msgspec.structs.replace(obj, **changes)


def with_listen_address(cfg: Any, listen: str) -> Any:
    """``cfg`` with its first transport bound to ``listen`` (``HOST:PORT`` or ``PORT``)."""
    from amps_emulator.config.values import parse_inet_addr

    try:
        host, port = parse_inet_addr(listen)
    except ValueError as exc:
        raise SystemExit(f"amps-emulator: --listen wants HOST:PORT: {exc}") from None
    if not cfg.transports:
        raise SystemExit("amps-emulator: --listen given but the config has no transport")
    first = cfg.transports[0]
    changes: dict[str, Any] = {"port": port}
    if host is not None:
        changes["host"] = host
    return _replace(cfg, transports=(_replace(first, **changes), *cfg.transports[1:]))


def with_durability(cfg: Any, durability: str) -> Any:
    """``cfg`` with ``TransactionLog/Durability`` set (no effect without a transaction log)."""
    if cfg.transaction_log is None:
        log.warning("durability %s has no effect: the config has no TransactionLog", durability)
        return cfg
    return _replace(cfg, transaction_log=_replace(cfg.transaction_log, durability=durability))


async def run(config: Any, *, ready: Any = None, shutdown: asyncio.Event | None = None,
              sockets: Any = None, keep_readable_journal: bool = False,
              admin: str | None = None, test_clock: bool = False,
              memory: bool = False, strict_recovery: bool = False,
              seed: Sequence[SeedMessage] = (), server_version: str = DEFAULT_SERVER_VERSION,
              initialized: Callable[[], None] | None = None, admin_limits: Any = None,
              **limits: Any) -> None:
    """Start a server on ``config`` and serve until ``shutdown`` is set (``limits``:
    ``logon_timeout``, ``memory_budget`` for :class:`server.app.Server`; ``admin_limits``:
    the Admin interface's :class:`~server.ops.admin_http.AdminLimits`). ``server_version``
    is the AMPS version logon acks and the Admin tree report. ``seed`` is
    published once the server has started, before ``ready`` is told the URIs;
    ``initialized`` is called last, once the admin interface (if any) serves too."""
    from amps_emulator import accel
    from amps_emulator.server.app import Server
    from amps_emulator.server.core.clock import TestClock
    from amps_emulator.server.ops.admin import start_admin
    from amps_emulator.server.ops.seed import apply_seed

    server = Server(config, keep_readable_journal=keep_readable_journal, admin=admin,
                    timebase=TestClock() if test_clock else None, memory=memory,
                    strict_recovery=strict_recovery, server_version=server_version,
                    **{k: v for k, v in limits.items() if v is not None})
    shutdown = shutdown or asyncio.Event()
    server.on_shutdown_request = shutdown.set  # an amps-action-do-shutdown
    uris = await server.start(sockets=sockets)
    log.info("publish hot path: %s", accel.DESCRIPTION)
    try:
        apply_seed(server.broker, seed)
        admin_server = await start_admin(server, admin_limits)
    except BaseException:
        await server.stop()
        raise
    switches = _signal_handlers(server)
    if ready is not None:
        ready(uris)
        if admin_server is not None:
            print(f"admin: {admin_server.uri}", flush=True)
    if initialized is not None:
        initialized()
    try:
        await shutdown.wait()
    finally:
        for sig in switches:
            asyncio.get_running_loop().remove_signal_handler(sig)
        await server.stop()


def _signal_handlers(server: Any) -> list[int]:
    """AMPS's default signal actions: SIGUSR1 disables authentication and entitlement, SIGUSR2
    enables them (when the config has security blocks), and the ``amps-action-on-signal``
    actions naming either run; SIGQUIT writes a minidump (only in the main thread)."""
    loop = asyncio.get_running_loop()
    installed: list[int] = []
    secured = server.broker.security is not None
    for name, enabled in (("SIGUSR1", False), ("SIGUSR2", True)):
        sig = getattr(signal, name, None)
        if sig is None or not (secured or server.actions.wants_signal(name)):
            continue

        def on_signal(name: str = name, enabled: bool = enabled) -> None:
            if secured:
                server.switch_security(enabled)
            server.actions.signal(name)

        try:
            loop.add_signal_handler(sig, on_signal)
        except (NotImplementedError, RuntimeError, ValueError):
            continue
        installed.append(sig)
    quit_sig = getattr(signal, "SIGQUIT", None)  # AMPS reserves it: a minidump
    if quit_sig is not None:
        try:
            loop.add_signal_handler(quit_sig, _minidump, server, "SIGQUIT")
        except (NotImplementedError, RuntimeError, ValueError):
            return installed
        installed.append(quit_sig)
    return installed


def _minidump(server: Any, reason: str) -> None:
    try:
        server.write_minidump(reason)
    except (LookupError, OSError) as exc:
        log.warning("no minidump on %s: %s", reason, exc)


def _install_event_loop_policy() -> None:
    try:
        import uvloop
    except ImportError:  # uvloop is optional where the platform lacks it
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def emulator_version() -> str:
    """The installed emulator's version (its distribution's metadata)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("amps-emulator")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "(not installed)"


def version_text(server_version: str) -> str:
    """What ``--version`` prints."""
    return (f"amps-emulator {emulator_version()}\n"
            f"AMPS version announced: {server_version}\n")


def initialization_line(started: float, now: float | None = None) -> str:
    """AMPS's ``00-0015`` line, in its log line format, for a start that began at
    ``started`` (``time.monotonic()``)."""
    from amps_emulator.server.services.log_targets import amps_line

    elapsed = int(time.monotonic() - started)
    return amps_line(time.time() if now is None else now, threading.get_native_id(), "info",
                     "00-0015", f"AMPS initialization completed ({elapsed} seconds).")


def override_notes(args: argparse.Namespace) -> list[str]:
    """The command-line (or environment) overrides a dumped config does not show itself."""
    # written into XML comments, where "--" may not appear: options are named without it
    notes = []
    if args.listen:
        notes.append(f"override listen (AMPS_EMULATOR_LISTEN): the first transport listens on "
                     f"{args.listen}")
    if args.durability:
        notes.append(f"override durability (AMPS_EMULATOR_DURABILITY): TransactionLog/Durability "
                     f"is {args.durability}")
    if args.memory:
        notes.append("override memory (AMPS_EMULATOR_MEMORY): no files are written")
    return notes


def dump_config(args: argparse.Namespace, env: Mapping[str, str]) -> str:
    """``--dump-config``: the effective configuration as XML."""
    from amps_emulator.config import default_config
    from amps_emulator.config.dump import dump_config_file, dump_config_object

    if args.config is None:
        return dump_config_object(default_config(data_dir=args.data_dir), override_notes(args))
    return dump_config_file(args.config, env=env, amps_version=args.server_version,
                            notes=override_notes(args))


def main(argv: Sequence[str] | None = None) -> int:
    begun = time.monotonic()
    # the group-commit worker, back from fdatasync, waits for the interpreter lock while the
    # loop is busy: at most this long (the default is 5 ms, added to every persisted ack
    # under load)
    sys.setswitchinterval(SWITCH_INTERVAL)
    args = apply_environment(_parser().parse_args(argv), os.environ)
    if not _VERSION_RE.fullmatch(args.server_version):
        print(f"amps-emulator: --server-version {args.server_version!r}: want a version X.Y.Z.W",
              file=sys.stderr)
        return 2
    if args.version:
        sys.stdout.write(version_text(args.server_version))
        return 0
    logging.basicConfig(
        level=getattr(logging, args.log_level or "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    from amps_emulator.server.ops.verify import run_sample_config, run_verify_config

    if args.sample_config:
        return run_sample_config()
    if args.verify_config:
        return run_verify_config(args.verify_config)
    startup = _prepare(args)
    if isinstance(startup, int):
        return startup
    return _serve(startup, args, begun)


@dataclasses.dataclass
class _Startup:
    """What ``main`` checked before serving: the config, the seed messages, the memory budget."""

    config: Any
    seed: Any
    budget: int | None


def _prepare(args: argparse.Namespace) -> _Startup | int:
    """The config loaded and checked, the log targets installed, the seeds read; or the exit
    status after one line on stderr saying what is wrong."""
    from amps_emulator.config import ConfigError
    from amps_emulator.server.ops.seed import SeedError, read_seeds

    env = config_environment(parse_defines(args.defines))
    seed_files = _init_dir(args)
    if isinstance(seed_files, int):
        return seed_files
    if args.dump_config:
        try:
            sys.stdout.write(dump_config(args, env))
        except ConfigError as exc:
            print(str(exc), file=sys.stderr)
            return 1
        return 0
    try:
        config = load(args.config, args.data_dir, args.listen, args.durability, env=env,
                      server_version=args.server_version)
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"{args.config}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    if _install_log_targets(args, config) != 0:
        return 1
    if args.test_clock and args.admin is None and getattr(config, "admin", None) is None:
        print("amps-emulator: --test-clock needs an admin interface to advance it "
              "(--admin HOST:PORT or <Admin> in the config)", file=sys.stderr)
        return 1
    for w in getattr(config, "warnings", ()):
        log.warning("config: %s", w)
    try:
        seed = read_seeds(seed_files, config)
    except SeedError as exc:
        print(f"amps-emulator: seed: {exc}", file=sys.stderr)
        return 1
    budget = None
    if args.memory_budget is not None:
        from amps_emulator.config.units import parse_size

        try:
            budget = parse_size(args.memory_budget)
        except ValueError as exc:
            print(f"amps-emulator: --memory-budget: {exc}", file=sys.stderr)
            return 1
    return _Startup(config, seed, budget)


def _init_dir(args: argparse.Namespace) -> list[str] | int:
    """The seed files to publish at start-up: ``--init-dir``'s (which may also name the
    config, unless one was given), then ``--seed``'s; or 1 when the directory is unusable."""
    from amps_emulator.server.ops.seed import SeedError, scan_init_dir

    seed_files = list(args.seed)
    if not args.init_dir:
        return seed_files
    try:
        init = scan_init_dir(args.init_dir)
    except SeedError as exc:
        print(f"amps-emulator: {exc}", file=sys.stderr)
        return 1
    for name in init.ignored:
        log.warning("init directory %s: %s is neither *.jsonl nor *.xml; ignored",
                    init.path, name)
    if init.config is not None:
        if args.config is None:
            args.config = init.config
        else:
            log.warning("init directory %s: %s ignored: the configuration %s was given",
                        init.path, os.path.basename(init.config), args.config)
    return init.seeds + seed_files


def _install_log_targets(args: argparse.Namespace, config: Any) -> int:
    """The config's ``Logging`` targets are the event log, as in AMPS (``--log-level`` adds
    stderr, and replaces the built-in config's stderr target); 1 when one cannot open."""
    targets = getattr(config, "logging", ())
    if args.log_level and args.config is None:
        targets = ()
    if not targets:
        return 0
    from amps_emulator.server.services import log_targets

    try:
        log_targets.install(targets, console_level=getattr(logging, args.log_level)
                            if args.log_level else None)
    except OSError as exc:
        print(f"amps-emulator: cannot open a <Logging> target: {exc}", file=sys.stderr)
        return 1
    return 0


def _serve(startup: _Startup, args: argparse.Namespace, begun: float) -> int:
    """Run the server until SIGTERM or SIGINT; the exit status."""
    _install_event_loop_policy()
    log.info("amps-emulator %s, announcing AMPS %s: instance %s starting", emulator_version(),
             args.server_version, startup.config.name, extra=amps_id(STARTUP_BANNER))
    started: list[bool] = []
    policies: list[heap.HeapPolicy] = []

    async def _amain() -> None:
        shutdown = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, shutdown.set)
            except (NotImplementedError, RuntimeError):
                pass

        def ready(uris: list[str]) -> None:
            started.append(True)
            # what start-up built (config, grammars, compiled filters, modules) lives as long
            # as the process, and so does what survives a full collection: out of the
            # collector's sight, so a full collection under load walks only what the traffic
            # made since the last one (a full walk of 20,000 topics' objects held the loop
            # for 0.13 s); the frozen set is collected whole when it has doubled (ops.heap)
            policies.append(heap.install(loop.call_soon_threadsafe))
            print("ready: " + " ".join(uris), flush=True)

        def initialized() -> None:
            print(initialization_line(begun), flush=True)
            # and to the log targets that take 00-0015 (a stdout one leaves it out: printed)
            log.info("AMPS initialization completed (%d seconds).", int(time.monotonic() - begun),
                     extra={**amps_id(INITIALIZED), "on_stdout": True})

        await run(startup.config, ready=ready, shutdown=shutdown,
                  keep_readable_journal=args.keep_readable_journal, admin=args.admin,
                  test_clock=args.test_clock, memory=args.memory,
                  strict_recovery=args.strict_recovery, seed=startup.seed, initialized=initialized,
                  server_version=args.server_version,
                  logon_timeout=args.logon_timeout, memory_budget=startup.budget,
                  admin_limits=_admin_limits(args))

    try:
        asyncio.run(_amain())
    except Exception as exc:
        return _exit_code(exc, startup.config, serving=bool(started))
    finally:
        for policy in policies:
            policy.stop()
    log.info("shut down cleanly")
    return 0


def _exit_code(exc: Exception, config: Any, serving: bool) -> int:
    """What went wrong, as one located line on stderr (never a traceback for a start-up
    problem); the exit status."""
    from amps_emulator.config import ConfigError
    from amps_emulator.journal import JournalCorruptError, JournalError
    from amps_emulator.server.ops.seed import SeedError
    from amps_emulator.sow import SowDamagedError

    if isinstance(exc, ConfigError):  # a config rule only the engines check (e.g. queue limits)
        print(str(exc), file=sys.stderr)
    elif isinstance(exc, JournalError):
        print(f"amps-emulator: cannot open the transaction log: {exc}", file=sys.stderr)
        if isinstance(exc, JournalCorruptError):
            print("amps-emulator: to start anyway with every readable record, pass "
                  "--keep-readable-journal", file=sys.stderr)
    elif isinstance(exc, SowDamagedError):
        print(f"amps-emulator: cannot open the SOW: {exc}", file=sys.stderr)
    elif isinstance(exc, SeedError):  # a message the publish path refused
        print(f"amps-emulator: seed: {exc}", file=sys.stderr)
    elif isinstance(exc, OSError):
        print(f"amps-emulator: cannot start: {exc}", file=sys.stderr)
    elif serving:  # not a start-up problem: a bug while serving, logged in full
        log.error("the server stopped on an internal error", exc_info=exc)
    else:
        from amps_emulator.server.ops.preflight import startup_failure

        log.debug("start-up failed", exc_info=exc)
        for issue in startup_failure(exc, config):
            print(str(issue), file=sys.stderr)
    return 1

if __name__ == "__main__":
    sys.exit(main())
