"""Command line: ``amps-emulator [CONFIG.xml]``, like AMPS's ``ampServer CONFIG.xml``.

Runs in the foreground. Prints one readiness line once every transport accepts
connections::

    ready: tcp://127.0.0.1:9007/amps/json

(several transports: their URIs separated by spaces), so scripts can wait for it.
SIGTERM and SIGINT shut the server down cleanly.

Every common setting can also come from an environment variable (:data:`ENVIRONMENT`), which
is how containers and CI jobs set them; an option on the command line wins over the variable,
and both win over the config file.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from typing import Any

log = logging.getLogger("amps_emulator")

#: environment variable -> the option it stands for (README: "Environment variables")
ENVIRONMENT = {
    "AMPS_EMULATOR_CONFIG": "config",
    "AMPS_EMULATOR_LISTEN": "listen",
    "AMPS_EMULATOR_DATA_DIR": "data_dir",
    "AMPS_EMULATOR_LOG_LEVEL": "log_level",
    "AMPS_EMULATOR_DURABILITY": "durability",
    "AMPS_EMULATOR_MEMORY": "memory",
}
DEFAULT_DATA_DIR = "./amps-data"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
DURABILITIES = ("group", "strict", "memory")
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="amps-emulator",
        description="AMPS-compatible message server emulator. Reads an AMPS XML config file.",
    )
    p.add_argument("config", nargs="?", help="AMPS configuration file (default: built-in)")
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
        if dest == "memory":
            if value.strip().lower() not in _TRUE + _FALSE:
                raise SystemExit(f"amps-emulator: {var}={value!r}: want 1 or 0")
            value = value.strip().lower() in _TRUE
        elif dest == "log_level":
            value = value.upper()
        choices = {"log_level": LOG_LEVELS, "durability": DURABILITIES}.get(dest)
        if choices is not None and value not in choices:
            raise SystemExit(f"amps-emulator: {var}={value!r}: want one of {', '.join(choices)}")
        setattr(args, dest, value or None)
    args.data_dir = args.data_dir or DEFAULT_DATA_DIR
    args.log_level = args.log_level or "INFO"
    args.memory = bool(args.memory)
    return args


def load(path: str | None, data_dir: str = DEFAULT_DATA_DIR, listen: str | None = None,
         durability: str | None = None) -> Any:
    from amps_emulator.config import default_config, load_config

    cfg = default_config(data_dir=data_dir) if path is None else load_config(path)
    if listen:
        cfg = with_listen_address(cfg, listen)
    if durability:
        cfg = with_durability(cfg, durability)
    return cfg


def _replace(obj: Any, **changes: Any) -> Any:
    import dataclasses

    import msgspec

    if dataclasses.is_dataclass(obj):
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
              memory: bool = False, strict_recovery: bool = False, **limits: Any) -> None:
    """Start a server on ``config`` and serve until ``shutdown`` is set (``limits``:
    ``logon_timeout``, ``memory_budget`` for :class:`server.app.Server`)."""
    from amps_emulator.server.admin import start_admin
    from amps_emulator.server.app import Server
    from amps_emulator.server.clock import TestClock

    server = Server(config, keep_readable_journal=keep_readable_journal, admin=admin,
                    timebase=TestClock() if test_clock else None, memory=memory,
                    strict_recovery=strict_recovery,
                    **{k: v for k, v in limits.items() if v is not None})
    uris = await server.start(sockets=sockets)
    try:
        admin_server = await start_admin(server)
    except BaseException:
        await server.stop()
        raise
    shutdown = shutdown or asyncio.Event()
    switches = _security_signals(server) if server.broker.security is not None else []
    if ready is not None:
        ready(uris)
        if admin_server is not None:
            print(f"admin: {admin_server.uri}", flush=True)
    try:
        await shutdown.wait()
    finally:
        for sig in switches:
            asyncio.get_running_loop().remove_signal_handler(sig)
        await server.stop()


def _security_signals(server: Any) -> list[int]:
    """AMPS's default signal actions: SIGUSR1 disables authentication and entitlement, SIGUSR2
    enables them (when the config has security blocks; only in the main thread)."""
    loop = asyncio.get_running_loop()
    installed: list[int] = []
    for name, enabled in (("SIGUSR1", False), ("SIGUSR2", True)):
        sig = getattr(signal, name, None)
        if sig is None:
            continue
        try:
            loop.add_signal_handler(sig, server.switch_security, enabled)
        except (NotImplementedError, RuntimeError, ValueError):
            continue
        installed.append(sig)
    return installed


def _install_event_loop_policy() -> None:
    try:
        import uvloop
    except ImportError:  # uvloop is optional where the platform lacks it
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def main(argv: Sequence[str] | None = None) -> int:
    args = apply_environment(_parser().parse_args(argv), os.environ)
    logging.basicConfig(
        level=getattr(logging, args.log_level or "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    from amps_emulator.config import ConfigError
    from amps_emulator.server.verify import run_sample_config, run_verify_config

    if args.sample_config:
        return run_sample_config()
    if args.verify_config:
        return run_verify_config(args.verify_config)
    try:
        config = load(args.config, args.data_dir, args.listen, args.durability)
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"{args.config}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    targets = getattr(config, "logging", ())
    if args.log_level and args.config is None:
        targets = ()  # --log-level replaces the built-in config's stderr target
    if targets:
        from amps_emulator.server import logtargets

        try:  # the configured targets are the event log, as in AMPS; --log-level adds stderr
            logtargets.install(targets, console_level=getattr(logging, args.log_level)
                               if args.log_level else None)
        except OSError as exc:
            print(f"amps-emulator: cannot open a <Logging> target: {exc}", file=sys.stderr)
            return 1
    if args.test_clock and args.admin is None and getattr(config, "admin", None) is None:
        print("amps-emulator: --test-clock needs an admin interface to advance it "
              "(--admin HOST:PORT or <Admin> in the config)", file=sys.stderr)
        return 1
    for w in getattr(config, "warnings", ()):
        log.warning("config: %s", w)

    budget = None
    if args.memory_budget is not None:
        from amps_emulator.config.units import parse_size

        try:
            budget = parse_size(args.memory_budget)
        except ValueError as exc:
            print(f"amps-emulator: --memory-budget: {exc}", file=sys.stderr)
            return 1
    _install_event_loop_policy()

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
            print("ready: " + " ".join(uris), flush=True)

        await run(config, ready=ready, shutdown=shutdown,
                  keep_readable_journal=args.keep_readable_journal, admin=args.admin,
                  test_clock=args.test_clock, memory=args.memory,
                  strict_recovery=args.strict_recovery,
                  logon_timeout=args.logon_timeout, memory_budget=budget)

    from amps_emulator.journal import JournalCorruptError, JournalError
    from amps_emulator.sow import SowDamagedError

    started: list[bool] = []

    try:
        asyncio.run(_amain())
    except ConfigError as exc:  # a config rule only the engines check (e.g. queue limits)
        print(str(exc), file=sys.stderr)
        return 1
    except JournalError as exc:
        print(f"amps-emulator: cannot open the transaction log: {exc}", file=sys.stderr)
        if isinstance(exc, JournalCorruptError):
            print("amps-emulator: to start anyway with every readable record, pass "
                  "--keep-readable-journal", file=sys.stderr)
        return 1
    except SowDamagedError as exc:
        print(f"amps-emulator: cannot open the SOW: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"amps-emulator: cannot start: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # never a traceback for a configuration: one located line
        from amps_emulator.server.preflight import startup_failure

        if started:  # not a start-up problem: a bug while serving, logged in full
            log.exception("the server stopped on an internal error")
            return 1
        log.debug("start-up failed", exc_info=True)
        for issue in startup_failure(exc, config):
            print(str(issue), file=sys.stderr)
        return 1
    log.info("shut down cleanly")
    return 0


if __name__ == "__main__":
    sys.exit(main())
