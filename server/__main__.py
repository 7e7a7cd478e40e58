"""Command line: ``amps-emulator [CONFIG.xml]``, like AMPS's ``ampServer CONFIG.xml``.

Runs in the foreground. Prints one readiness line once every transport accepts
connections::

    ready: tcp://127.0.0.1:9007/amps/json

(several transports: their URIs separated by spaces), so scripts can wait for it.
SIGTERM and SIGINT shut the server down cleanly.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from typing import Any, Sequence

log = logging.getLogger("amps_emulator")


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
    p.add_argument("--data-dir", default="./amps-data",
                   help="data directory of the built-in default config (default ./amps-data)")
    p.add_argument("--listen", metavar="HOST:PORT",
                   help="override the first transport's address (port 0 picks a free port; "
                        "the ready line shows it)")
    p.add_argument("--keep-readable-journal", action="store_true",
                   help="start even if the transaction log is damaged in the middle, keeping "
                        "every readable record (the damaged file is kept as *.corrupt)")
    p.add_argument("--logon-timeout", type=float, default=None, metavar="SECONDS",
                   help="disconnect a connection that has not logged on after this long "
                        "(default 30; 0: never)")
    p.add_argument("--memory-budget", default=None, metavar="SIZE",
                   help="bytes all connections together may hold in buffered frames before "
                        "the largest holders are disconnected as slow consumers "
                        "(default 256MB)")
    p.add_argument("--log-level", default="INFO",
                   choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return p


def load(path: str | None, data_dir: str, listen: str | None = None) -> Any:
    from amps_emulator.config import default_config, load_config

    cfg = default_config(data_dir=data_dir) if path is None else load_config(path)
    if listen:
        cfg = with_listen_address(cfg, listen)
    return cfg


def _replace(obj: Any, **changes: Any) -> Any:
    import dataclasses

    import msgspec

    if dataclasses.is_dataclass(obj):
        return dataclasses.replace(obj, **changes)
    return msgspec.structs.replace(obj, **changes)


def with_listen_address(cfg: Any, listen: str) -> Any:
    """``cfg`` with its first transport bound to ``listen`` (``HOST:PORT`` or ``PORT``)."""
    host, _, port = listen.rpartition(":")
    host = host.strip("[]") or None
    if not port.isdigit():
        raise SystemExit(f"amps-emulator: --listen wants HOST:PORT, got {listen!r}")
    if not cfg.transports:
        raise SystemExit("amps-emulator: --listen given but the config has no transport")
    first = cfg.transports[0]
    changes: dict[str, Any] = {"port": int(port)}
    if host is not None:
        changes["host"] = host
    return _replace(cfg, transports=(_replace(first, **changes), *cfg.transports[1:]))


async def run(config: Any, *, ready: Any = None, shutdown: asyncio.Event | None = None,
              sockets: Any = None, keep_readable_journal: bool = False,
              **limits: Any) -> None:
    """Start a server on ``config`` and serve until ``shutdown`` is set (``limits``:
    ``logon_timeout``, ``memory_budget`` for :class:`server.app.Server`)."""
    from amps_emulator.server.app import Server

    server = Server(config, keep_readable_journal=keep_readable_journal,
                    **{k: v for k, v in limits.items() if v is not None})
    uris = await server.start(sockets=sockets)
    shutdown = shutdown or asyncio.Event()
    if ready is not None:
        ready(uris)
    try:
        await shutdown.wait()
    finally:
        await server.stop()


def _install_event_loop_policy() -> None:
    try:
        import uvloop
    except ImportError:  # uvloop is optional where the platform lacks it
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    from amps_emulator.config import ConfigError
    from amps_emulator.config.cli import run_sample_config, run_verify_config

    if args.sample_config:
        return run_sample_config()
    if args.verify_config:
        return run_verify_config(args.verify_config)
    try:
        config = load(args.config, args.data_dir, args.listen)
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"{args.config}: {exc.strerror or exc}", file=sys.stderr)
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
            print("ready: " + " ".join(uris), flush=True)

        await run(config, ready=ready, shutdown=shutdown,
                  keep_readable_journal=args.keep_readable_journal,
                  logon_timeout=args.logon_timeout, memory_budget=budget)

    from amps_emulator.journal import JournalCorruptError, JournalError

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
    except OSError as exc:
        print(f"amps-emulator: cannot start: {exc}", file=sys.stderr)
        return 1
    log.info("shut down cleanly")
    return 0


if __name__ == "__main__":
    sys.exit(main())
