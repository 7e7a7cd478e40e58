"""``amps-emulator-client``: a command-line AMPS client in the manner of AMPS's ``spark``.

Sub-commands (every one takes ``-s/--server URI``, default ``tcp://127.0.0.1:9007/amps/json``
or ``$AMPS_URI``, and ``--name CLIENT_NAME``)::

    publish            -t TOPIC [MESSAGE ...] [-f FILE | stdin] [--rate N] [--count N]
    subscribe          -t TOPIC [--filter F] [--bookmark B] [--options O] [-n N] [--timeout S]
    sow                -t TOPIC [--filter F] [--orderby O] [--top-n N] [--format table|json]
    sow_delete         -t TOPIC (--filter F | --keys K1,K2)
    sow_and_subscribe  -t TOPIC [--filter F] [--options O] [-n N] [--timeout S]
    ping

``subscribe`` and ``sow_and_subscribe`` run until interrupted (Ctrl-C or SIGTERM, exit status
0), as spark's do; ``-n N`` stops them after N messages and ``--timeout S`` after S seconds
without one. When they stop, one line on stderr says why.

Messages received are printed as JSON lines (``{"c":"p","t":..,"k":..,"bm":..,"data":..}``);
``sow --format table`` prints an aligned table of the records' top-level fields.
``--type MT`` logs on with message type MT whatever the URI's path says; a message of another
type than json is printed with ``data`` as readable text (FIX/NVFIX with ``|`` for the field
separator, binary types as ``base64:...``) and ``fields``, the fields the type's codec reads
(what filters address). Exit status:
0 on success, 1 on a failure ack or a connection problem (the reason on stderr), 2 on a
command-line error -- among them spark's single-dash long words (``-topic``), which argparse
would otherwise read as a short option with a value (``-t opic``); ``amps-spark`` takes those.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from amps_emulator.protocol import bodyview
from amps_emulator.protocol.client import Client, ClientError

DEFAULT_URI = "tcp://127.0.0.1:9007/amps/json"
CONNECT_TIMEOUT = 10.0  # seconds to wait for an answer of the server when --timeout is not given
_SHOWN = ("c", "t", "k", "bm", "x", "reason", "sids", "ts", "lp")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="amps-emulator-client",
                                description="Command-line client for AMPS servers "
                                            "(the emulator or 60East's).")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-s", "--server", default=os.environ.get("AMPS_URI", DEFAULT_URI),
                        help="server URI (default $AMPS_URI or %(default)s)")
    common.add_argument("--type", dest="message_type", metavar="MT",
                        help="message type to log on with (default: the URI's /amps/<type>)")
    common.add_argument("--name", default=f"amps-emulator-client-{os.getpid()}",
                        help="client name to log on with")
    common.add_argument("--timeout", type=float, metavar="S",
                        help=f"seconds to wait for the server's answer (default "
                             f"{CONNECT_TIMEOUT:g}; 0: wait forever); subscribe and "
                             "sow_and_subscribe: stop after S seconds without a message "
                             "(default: run until interrupted)")
    sub = p.add_subparsers(dest="command", required=True)

    pub = sub.add_parser("publish", parents=[common], help="publish messages")
    pub.add_argument("-t", "--topic", required=True)
    pub.add_argument("messages", nargs="*", help="messages (default: -f FILE or stdin, "
                                                 "one message per line)")
    pub.add_argument("-f", "--file", help="read messages from FILE, one per line")
    pub.add_argument("--rate", type=float, help="at most this many messages per second")
    pub.add_argument("--count", type=int, default=1,
                     help="publish the messages this many times over (default 1)")
    pub.add_argument("--expiration", type=int, help="message expiration, seconds")

    for name, helptext in (("subscribe", "print messages as they are published"),
                           ("sow_and_subscribe", "query the SOW, then print new messages")):
        s = sub.add_parser(name, parents=[common], help=helptext)
        s.add_argument("-t", "--topic", required=True)
        s.add_argument("--filter")
        s.add_argument("--options", help="subscription options, e.g. oof,no_empties")
        s.add_argument("-n", "--max-messages", type=int, help="stop after N messages")
        if name == "subscribe":
            s.add_argument("--bookmark", help="replay from a bookmark (0 = epoch, "
                                              "'recent', a timestamp or publisher|seq|)")

    q = sub.add_parser("sow", parents=[common], help="query a SOW topic")
    q.add_argument("-t", "--topic", required=True)
    q.add_argument("--filter")
    q.add_argument("--orderby")
    q.add_argument("--top-n", type=int)
    q.add_argument("--format", choices=["json", "table"], default="json")

    d = sub.add_parser("sow_delete", parents=[common], help="delete SOW records")
    d.add_argument("-t", "--topic", required=True)
    g = d.add_mutually_exclusive_group(required=True)
    g.add_argument("--filter")
    g.add_argument("--keys", help="comma-separated SowKeys")

    sub.add_parser("ping", parents=[common], help="log on and time a round trip")
    return p


def _decoded(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return body.decode("utf-8", "replace")


def _doc(body: bytes, message_type: str) -> Any:
    """What a body's fields are for the table: the JSON value, or another type's fields."""
    if message_type == "json":
        return _decoded(body)
    return bodyview.fields(body, message_type)


def _line(h: dict, body: bytes, message_type: str = "json") -> str:
    out = {k: h[k] for k in _SHOWN if k in h}
    if body:
        if message_type == "json":
            out["data"] = _decoded(body)
        else:
            out["data"] = bodyview.readable_text(body, message_type)
            tree = bodyview.fields(body, message_type)
            if tree is not None:
                out["fields"] = tree
    return json.dumps(out, separators=(",", ":"), ensure_ascii=False)


def with_message_type(uri: str, message_type: str) -> str:
    """``uri`` with its path naming ``message_type`` (``/amps/<type>``)."""
    parts = urlsplit(uri)
    return urlunsplit((parts.scheme, parts.netloc, f"/amps/{message_type}", parts.query,
                       parts.fragment))


def _messages(args: argparse.Namespace) -> list[bytes]:
    if args.messages:
        lines: Iterable[str] = args.messages
    elif args.file:
        with open(args.file, encoding="utf-8") as f:
            lines = f.read().splitlines()
    else:
        lines = sys.stdin.read().splitlines()
    return [ln.encode() for ln in lines if ln.strip()]


def cmd_publish(client: Client, args: argparse.Namespace) -> int:
    msgs = _messages(args)
    if not msgs:
        print("publish: no messages given", file=sys.stderr)
        return 1
    t0 = time.perf_counter()
    n = 0
    for _ in range(max(args.count, 1)):
        for body in msgs:
            if args.rate:
                wait = t0 + n / args.rate - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)  # pacing the publisher, as spark's -rate does
            client.publish(args.topic, body, expiration=args.expiration)
            n += 1
    client.flush()
    dt = time.perf_counter() - t0
    print(f"published {n} messages to {args.topic} in {dt:.3f}s "
          f"({n / dt if dt else 0:.0f}/s)", file=sys.stderr)
    return 0


class _Terminated(Exception):
    """SIGTERM arrived while a subscription was printing messages."""


@contextmanager
def _sigterm_stops() -> Iterator[None]:
    """Inside, SIGTERM raises :class:`_Terminated` (in the main thread; elsewhere signals
    cannot be handled and nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: object) -> None:
        raise _Terminated

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _stream(client: Client, header: dict, args: argparse.Namespace) -> int:
    """Print what a subscription delivers until ``-n``, ``--timeout`` idle seconds, Ctrl-C or
    SIGTERM (then exit status 0), saying on stderr why it stopped."""
    idle = args.timeout if args.timeout else math.inf
    limit = args.max_messages
    n = 0
    why = f"no message for {idle:g}s (--timeout {idle:g})"
    try:
        with _sigterm_stops():
            for h, body in client.execute(header, until="", idle=idle):
                kind = h.get("c")
                if kind in ("p", "publish", "sow", "oof", "delta_publish"):
                    print(_line(h, body, client.message_type), flush=True)
                    n += 1
                    if limit is not None and n >= limit:
                        why = f"-n {limit} reached"
                        break
    except KeyboardInterrupt:
        why = "interrupted (SIGINT)"
    except _Terminated:
        why = "terminated (SIGTERM)"
    print(f"amps-emulator-client: {args.command} {args.topic}: stopped after {n} messages: "
          f"{why}", file=sys.stderr)
    return 0


def cmd_subscribe(client: Client, args: argparse.Namespace) -> int:
    h: dict[str, Any] = {"c": "subscribe", "cid": client.cid(), "t": args.topic,
                         "sub_id": "1", "a": "processed"}
    if args.filter:
        h["filter"] = args.filter
    if args.options:
        h["o"] = args.options
    if args.bookmark:
        h["bookmark"] = {"recent": "recent", "now": "0|1|", "epoch": "0"}.get(
            args.bookmark, args.bookmark)
    return _stream(client, h, args)


def cmd_sow_and_subscribe(client: Client, args: argparse.Namespace) -> int:
    h: dict[str, Any] = {"c": "sow_and_subscribe", "cid": client.cid(), "t": args.topic,
                         "sub_id": "1", "query_id": "1", "a": "processed",
                         "batch_size": 100}
    if args.filter:
        h["filter"] = args.filter
    if args.options:
        h["o"] = args.options
    return _stream(client, h, args)


def cmd_sow(client: Client, args: argparse.Namespace) -> int:
    h: dict[str, Any] = {"c": "sow", "cid": client.cid(), "t": args.topic, "query_id": "1",
                         "a": "completed", "batch_size": 100}
    if args.filter:
        h["filter"] = args.filter
    if args.orderby:
        h["orderby"] = args.orderby
    if args.top_n is not None:
        h["top_n"] = args.top_n
    records = [(hd, body) for hd, body in client.execute(h) if hd.get("c") == "sow"]
    if args.format == "json":
        for hd, body in records:
            print(_line(hd, body, client.message_type))
    else:
        print(_table([(hd.get("k", ""), _doc(body, client.message_type)) for hd, body in records]))
    print(f"{len(records)} records", file=sys.stderr)
    return 0


def _table(rows: list[tuple[str, Any]]) -> str:
    cols: list[str] = []
    for _, doc in rows:
        if isinstance(doc, dict):
            cols.extend(k for k in doc if k not in cols)
    head = ["SowKey", *cols]
    cells = [[key, *(_cell(doc.get(k) if isinstance(doc, dict) else None) for k in cols)]
             for key, doc in rows]
    widths = [max(len(r[i]) for r in [head, *cells]) for i in range(len(head))]
    fmt = "  ".join(f"{{:{w}}}" for w in widths)
    return "\n".join([fmt.format(*head), fmt.format(*("-" * w for w in widths)),
                      *(fmt.format(*r) for r in cells)])


def _cell(v: Any) -> str:
    if v is None:
        return ""
    return v if isinstance(v, str) else json.dumps(v)


def cmd_sow_delete(client: Client, args: argparse.Namespace) -> int:
    h: dict[str, Any] = {"c": "sow_delete", "cid": client.cid(), "t": args.topic,
                         "a": "processed,stats"}
    if args.filter:
        h["filter"] = args.filter
    else:
        h["sow_keys"] = args.keys
    deleted = 0
    for hd, _ in client.execute(h, until="stats"):
        if hd.get("a") == "stats":
            deleted = int(hd.get("records_deleted", 0))
    print(json.dumps({"topic": args.topic, "records_deleted": deleted}))
    return 0


def cmd_ping(client: Client, args: argparse.Namespace) -> int:
    rtt = client.flush()
    print(json.dumps({"server": client.uri, "version": client.server_version,
                      "round_trip_ms": round(rtt * 1000, 3)}))
    return 0


COMMANDS = {"publish": cmd_publish, "subscribe": cmd_subscribe, "sow": cmd_sow,
            "sow_delete": cmd_sow_delete, "sow_and_subscribe": cmd_sow_and_subscribe,
            "ping": cmd_ping}


# A single dash and two or more letters: spark's way of writing a long option. argparse would
# read "-topic" as "-t opic" (and "-server" as "-s erver"); that is refused instead.
_SPARK_WORD = re.compile(r"-[A-Za-z][A-Za-z_]+(=.*)?")


def refuse_single_dash_words(parser: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    """Stop with a usage error at the first ``-word`` before a ``--`` separator, naming the
    ``--word`` this tool means and ``amps-spark`` for spark command lines. Short options
    with their value attached (``-tfoo``) are refused too: they cannot be told apart."""
    for word in argv:
        if word == "--":
            return
        if _SPARK_WORD.fullmatch(word):
            name = word[1:].split("=", 1)[0]
            parser.error(f"{word!r}: a single dash takes one letter here (-t orders); long "
                         f"options take two (--{name}). For spark's syntax "
                         f"({word} ...), use amps-spark.")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    refuse_single_dash_words(parser, sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    try:
        uri = args.server if not args.message_type else with_message_type(args.server,
                                                                           args.message_type)
        wait = CONNECT_TIMEOUT if args.timeout is None else args.timeout or 3600.0
        with Client(uri, args.name, wait) as c:
            return COMMANDS[args.command](c, args)
    except ClientError as exc:
        print(f"amps-emulator-client: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader of our output went away (| head)
        return 0


if __name__ == "__main__":
    sys.exit(main())
