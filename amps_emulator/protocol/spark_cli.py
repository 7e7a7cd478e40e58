"""``amps-spark``: the command line of AMPS's ``spark`` utility, over the project's own client.

Scripts and habits written for 60East's ``spark`` run unchanged::

    amps-spark ping -server localhost:9007 -type json
    amps-spark publish -server user:pw@localhost:9007 -type json -topic orders -file data.json
    amps-spark sow -server localhost:9007 -type json -topic orders -filter "/id = 1"

Options are single-dash long words followed by their value (``-delta`` and ``-ack`` take
none); a double dash is accepted too. What goes where:

* message bodies (``sow``, ``subscribe``, ``sow_and_subscribe``), one a line, or as the
  ``-format`` template renders them, on standard output;
* the summary lines spark prints -- ``total messages published: N (R/s)``,
  ``Total messages received: N (R/s)``, ``Deleted N records in Tms.`` -- on standard error,
  so that ``amps-spark sow ... > data.json`` captures data only; rates are per second over
  whole milliseconds, as spark reports them (``Infinity`` when under a millisecond);
* ``ping``: ``Successfully connected to tcp://USER@HOST:PORT/amps/TYPE`` on standard output,
  or ``Unable to connect to AMPS`` and the cause on standard error (exit status 1).

``-type`` (or ``-proto``/``-prot`` with a message-type value) is passed through at logon as
the message type; ``amps`` as a protocol means the default message type, ``json``.
"""

from __future__ import annotations

import getpass
import io
import os
import re
import socket
import sys
import textwrap
import time
import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, TextIO
from urllib.parse import quote

from amps_emulator.protocol.client import Client, ClientError, parse_uri

BANNER = ("===============================\n"
          "- Spark - AMPS client utility -\n"
          "===============================")


class SparkError(Exception):
    """A command line spark cannot run (the message says what to write instead)."""


@dataclass(frozen=True)
class Opt:
    help: str
    flag: bool = False  # takes no value


@dataclass(frozen=True)
class Spec:
    summary: str
    required: dict[str, str]
    options: dict[str, Opt]
    example: str
    example_note: str

    def names(self) -> set[str]:
        return {*self.required, *self.options}


_PROTO = Opt("message type to log on with: json (the default), or another type the "
             "server's transport accepts; proto and prot are synonyms of type, and the "
             "protocol name amps stands for the default type")
_CONNECT = {"type": _PROTO, "proto": _PROTO, "prot": _PROTO}
_FORMAT = Opt("how to print each message: a template of literal text and the tags "
              "{bookmark} {command} {correlation_id} {data} {expiration} {lease_period} "
              "{length} {sowkey} {timestamp} {topic} {user_id} (default: {data})")
_FILTER = Opt("content filter (an AMPS expression, e.g. \"/qty > 10\")")
_QUERY = {"filter": _FILTER, "orderby": Opt("order of the query results, e.g. \"/qty DESC\""),
          "topn": Opt("return at most this many query results"),
          "batchsize": Opt("records per query result message (default 10)")}
_INPUT = {"file": Opt("read messages from this file (plain, or a ZIP archive whose files are "
                      "read in order); standard input when omitted"),
          "delimiter": Opt("decimal code of the character that ends each message "
                           "(default 10, newline)")}
_SERVER = "AMPS server to connect to: host:port or user:password@host:port"

SPECS: dict[str, Spec] = {
    "ping": Spec("log on to a server and report whether that worked",
                 {"server": _SERVER}, dict(_CONNECT),
                 "spark ping -server localhost:9007 -type json",
                 "Logs on to the server at localhost:9007 with message type json."),
    "publish": Spec("publish messages, one per line of a file or of standard input",
                    {"server": _SERVER, "topic": "topic to publish to"},
                    {**_CONNECT, **_INPUT,
                     "delta": Opt("publish as delta_publish (merge into the SOW record)",
                                  flag=True),
                     "rate": Opt("messages per second, a decimal: 0.5 sends one message "
                                 "every two seconds (default: as fast as possible)")},
                    "spark publish -server localhost:9007 -type json -topic orders "
                    "-file orders.json",
                    "Publishes every line of orders.json to the topic orders."),
    "sow": Spec("query the current state of a SOW topic, queue or view",
                {"server": _SERVER, "topic": "topic (or regular expression) to query"},
                {**_CONNECT, **_QUERY, "format": _FORMAT},
                "spark sow -server localhost:9007 -type json -topic orders "
                "-filter \"/qty > 10\"",
                "Prints the orders records whose qty is over 10."),
    "subscribe": Spec("print the messages published to a topic as they arrive",
                      {"server": _SERVER, "topic": "topic (or regular expression) to "
                                                   "subscribe to"},
                      {**_CONNECT, "filter": _FILTER, "format": _FORMAT,
                       "delta": Opt("subscribe with delta_subscribe", flag=True),
                       "ack": Opt("acknowledge each message received from a queue once "
                                  "it is printed", flag=True),
                       "backlog": Opt("ask a queue for a max_backlog of this many "
                                      "unacknowledged messages")},
                      "spark subscribe -server localhost:9007 -type json -topic orders",
                      "Prints each message published to orders until interrupted."),
    "sow_and_subscribe": Spec("query a SOW topic, then print the messages published to it",
                              {"server": _SERVER, "topic": "topic (or regular expression) "
                                                           "to query and subscribe to"},
                              {**_CONNECT, **_QUERY, "format": _FORMAT,
                               "delta": Opt("subscribe with sow_and_delta_subscribe",
                                            flag=True)},
                              "spark sow_and_subscribe -server localhost:9007 -type json "
                              "-topic orders",
                              "Prints the orders records, then every update to them."),
    "sow_delete": Spec("delete SOW records by filter, or by data (messages naming the "
                       "records by their key fields)",
                       {"server": _SERVER, "topic": "SOW topic to delete from"},
                       {**_CONNECT, **_INPUT,
                        "filter": Opt("delete the records matching this filter (1=1: all); "
                                      "without it, the messages of -file or standard input "
                                      "are deleted")},
                       "spark sow_delete -server localhost:9007 -type json -topic orders "
                       "-filter \"/qty = 0\"",
                       "Deletes the orders records whose qty is 0."),
}

# what the server's compact command names mean in -format's {command}
_COMMAND_NAMES = {"p": "publish"}
# -format tags and the header fields they show ({data} and {length} come from the body)
_TAGS = {"bookmark": "bm", "command": "c", "correlation_id": "x", "expiration": "e",
         "lease_period": "lp", "sowkey": "k", "timestamp": "ts", "topic": "t",
         "user_id": "user_id", "data": "", "length": ""}
_TAG_RE = re.compile(r"\{([A-Za-z_]+)\}")
_DATA_KINDS = frozenset(("p", "publish", "delta_publish", "sow", "oof"))


# -- the command line ---------------------------------------------------------------------
@dataclass
class Options:
    command: str
    values: dict[str, str] = field(default_factory=dict)
    flags: set[str] = field(default_factory=set)

    def get(self, name: str) -> str | None:
        return self.values.get(name)

    def need(self, name: str) -> str:
        value = self.values.get(name)
        if value is None:
            raise SparkError(f"{self.command}: -{name} is required")
        return value

    def number(self, name: str, kind: Callable[[str], float | int]) -> float | int | None:
        raw = self.values.get(name)
        if raw is None:
            return None
        try:
            value = kind(raw)
        except ValueError:
            raise SparkError(f"-{name} wants a number, got {raw!r}") from None
        if value <= 0:
            raise SparkError(f"-{name} must be greater than 0, got {raw!r}")
        return value


def parse_options(command: str, argv: Sequence[str]) -> Options:
    """``-name value`` pairs (``-flag`` alone) as spark reads them; anything else is an
    error naming the option and where its help is."""
    spec = SPECS[command]
    known = spec.names()
    opts = Options(command)
    i = 0
    while i < len(argv):
        word = argv[i]
        # a dash, two (GNU habit) or an en dash (pasted from a typeset guide)
        name = re.sub(r"^(--|-|\u2013)", "", word, count=1)
        if name == word or not name:
            raise SparkError(f"{command}: unexpected argument {word!r}: options are "
                             f"-name value (see 'amps-spark help {command}')")
        if name == "authenticator":
            raise SparkError("-authenticator loads a Java AuthenticatorFactory class, which "
                             "this spark cannot run: give user:password@host:port in -server")
        if name not in known:
            raise SparkError(f"{command}: unknown option -{name} "
                             f"(see 'amps-spark help {command}')")
        option = spec.options.get(name)
        if option is not None and option.flag:
            opts.flags.add(name)
            # "-delta true" reads as spark's older scripts wrote it
            if i + 1 < len(argv) and argv[i + 1].lower() in ("true", "false"):
                if argv[i + 1].lower() == "false":
                    opts.flags.discard(name)
                i += 1
            i += 1
            continue
        if i + 1 >= len(argv):
            raise SparkError(f"{command}: -{name} needs a value")
        opts.values[name] = argv[i + 1]
        i += 2
    for name in spec.required:
        opts.need(name)
    return opts


@dataclass(frozen=True)
class Target:
    host: str
    port: int
    user: str
    password: str | None
    message_type: str

    @property
    def display(self) -> str:
        """The URI spark reports (the password left out)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"tcp://{self.user}@{host}:{self.port}/amps/{self.message_type}"

    @property
    def uri(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        cred = quote(self.user, safe="")
        if self.password is not None:
            cred += ":" + quote(self.password, safe="")
        return f"tcp://{cred}@{host}:{self.port}/amps/{self.message_type}"


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry and no $USER (some containers)
        return "user"


def parse_server(spec: str, message_type: str) -> Target:
    """``host:port``, ``user@host:port`` or ``user:password@host:port`` (a ``tcp://`` URI
    is read too); the user defaults to the login name, as spark's does."""
    if "://" in spec:
        try:
            host, port, uri_user, uri_password, _ = parse_uri(spec)
        except ClientError as exc:
            raise SparkError(f"-server: {exc}") from None
        return Target(host, port, uri_user or _os_user(), uri_password, message_type)
    cred, at, hostport = spec.rpartition("@")
    user: str | None = None
    password: str | None = None
    if at:
        user, colon, pw = cred.partition(":")
        password = pw if colon else None
    host, colon, port_s = hostport.rpartition(":")
    host = host.strip("[]")
    if not colon or not host or not port_s.isdigit() or not 0 < int(port_s) < 65536:
        raise SparkError(f"-server wants host:port or user:password@host:port, got {spec!r}")
    return Target(host, int(port_s), user or _os_user(), password, message_type)


def message_type(opts: Options) -> str:
    for name in ("type", "proto", "prot"):
        value = opts.get(name)
        if value and value.lower() != "amps":
            return value
    return "json"


# -- input and output ---------------------------------------------------------------------
def _split(stream: IO[bytes], delimiter: bytes) -> Iterator[bytes]:
    """Messages from ``stream``, read as they come (a pipe may never end)."""
    read = stream.read1 if isinstance(stream, io.BufferedIOBase) else stream.read
    rest = b""
    while chunk := read(1 << 16):
        rest += chunk
        *done, rest = rest.split(delimiter)
        yield from done
    if rest:
        yield rest


def read_messages(opts: Options, stdin: IO[bytes]) -> Iterator[bytes]:
    """The messages of ``-file`` (plain or ZIP) or standard input, split at ``-delimiter``;
    empty ones skipped (and a carriage return before a newline dropped)."""
    code = opts.number("delimiter", int)
    if code is not None and code > 255:
        raise SparkError(f"-delimiter wants a character code 1..255, got {code}")
    delimiter = bytes([10 if code is None else int(code)])
    path = opts.get("file")
    streams: Iterator[IO[bytes]]
    if path is None:
        streams = iter([stdin])
    elif not os.path.isfile(path):
        raise SparkError(f"-file {path}: no such file")
    elif zipfile.is_zipfile(path):
        streams = _zip_members(path)
    else:
        streams = _plain(path)
    for stream in streams:
        for msg in _split(stream, delimiter):
            if delimiter == b"\n" and msg.endswith(b"\r"):
                msg = msg[:-1]
            if msg:
                yield msg


def _plain(path: str) -> Iterator[IO[bytes]]:
    with open(path, "rb") as f:
        yield f


def _zip_members(path: str) -> Iterator[IO[bytes]]:
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            if not info.is_dir():
                with archive.open(info) as member:
                    yield member


def rate_text(count: int, millis: int) -> str:
    """Messages per second over whole milliseconds, printed as spark's Java prints it."""
    if millis == 0:
        return "Infinity" if count else "NaN"
    return f"{count * 1000.0 / millis:.2f}"


def _millis_since(t0: float) -> int:
    return int((time.monotonic() - t0) * 1000)


class Printer:
    """Writes each message as its body, or as the ``-format`` template renders it."""

    def __init__(self, template: str | None, out: TextIO) -> None:
        self.out = out
        self.template = template
        self.tags: list[str] = []
        if template is not None:
            for tag in _TAG_RE.findall(template):
                if tag not in _TAGS:
                    raise SparkError(f"-format: unknown tag {{{tag}}}; the tags are "
                                     + " ".join(f"{{{t}}}" for t in sorted(_TAGS)))
                self.tags.append(tag)

    @property
    def wants_timestamp(self) -> bool:
        return "timestamp" in self.tags

    def __call__(self, header: dict[str, Any], body: bytes) -> None:
        data = body.decode("utf-8", "replace")
        if self.template is None:
            line = data
        else:
            def field_of(m: re.Match[str]) -> str:
                tag = m.group(1)
                if tag == "data":
                    return data
                if tag == "length":
                    return str(len(body))
                value = header.get(_TAGS[tag])
                if tag == "command" and value is not None:
                    value = _COMMAND_NAMES.get(str(value), value)
                return "" if value is None else str(value)
            line = _TAG_RE.sub(field_of, self.template)
        self.out.write(line + "\n")
        self.out.flush()


# -- the commands ---------------------------------------------------------------------------
@dataclass
class Run:
    opts: Options
    client: Client
    stdin: IO[bytes]
    out: TextIO
    err: TextIO

    @property
    def topic(self) -> str:
        return self.opts.need("topic")

    def printer(self) -> Printer:
        return Printer(self.opts.get("format"), self.out)

    def query_headers(self, header: dict[str, Any], printer: Printer) -> dict[str, Any]:
        if (flt := self.opts.get("filter")) is not None:
            header["filter"] = flt
        if (order := self.opts.get("orderby")) is not None:
            header["orderby"] = order
        if (top := self.opts.number("topn", int)) is not None:
            header["top_n"] = int(top)
        if "query_id" in header:
            batch = self.opts.number("batchsize", int)
            header["batch_size"] = int(batch) if batch is not None else 10
        if printer.wants_timestamp:
            header["o"] = ",".join(x for x in (header.get("o"), "timestamp") if x)
        return header


def cmd_ping(run: Run, target: Target) -> int:
    run.out.write(f"Successfully connected to {target.display}\n")
    return 0


def cmd_publish(run: Run, target: Target) -> int:
    rate = run.opts.number("rate", float)
    command = "delta_publish" if "delta" in run.opts.flags else "p"
    topic = run.topic
    messages = read_messages(run.opts, run.stdin)
    t0 = time.monotonic()
    n = 0
    for body in messages:
        if rate is not None:
            wait = t0 + n / rate - time.monotonic()
            if wait > 0:
                time.sleep(wait)  # pacing the publisher is what -rate asks for
        run.client.send({"c": command, "t": topic}, body)
        n += 1
    run.client.flush()  # every message processed before the count is reported
    run.err.write(f"total messages published: {n} ({rate_text(n, _millis_since(t0))}/s)\n")
    return 0


def cmd_sow(run: Run, target: Target) -> int:
    printer = run.printer()
    c = run.client
    header = run.query_headers({"c": "sow", "cid": c.cid(), "t": run.topic, "query_id": "1",
                                "a": "completed"}, printer)
    t0 = time.monotonic()
    n = 0
    for h, body in c.execute(header):
        if h.get("c") == "sow":
            printer(h, body)
            n += 1
    run.err.write(f"Total messages received: {n} ({rate_text(n, _millis_since(t0))}/s)\n")
    return 0


def _stream(run: Run, header: dict[str, Any], printer: Printer) -> int:
    """Print what the subscription brings until the server goes away or we are stopped."""
    c = run.client
    cid = header["cid"]
    ack = "ack" in run.opts.flags
    c.send(header)
    while True:
        msg = c.receive(timeout=3600.0)
        if msg is None:
            continue  # an idle subscription is still a subscription
        h, body = msg
        kind = h.get("c")
        if kind == "ack":
            if h.get("cid") == cid and h.get("status") == "failure":
                raise ClientError(h.get("reason", "failure"))
            continue
        if kind not in _DATA_KINDS:
            continue
        printer(h, body)
        if ack and "bm" in h and "t" in h:
            # a queue acknowledgement: the message is done with (wire notes 4.8)
            c.send({"c": "sow_delete", "cid": "AMPS-queue-ack", "t": h["t"],
                    "bookmark": h["bm"]})


def cmd_subscribe(run: Run, target: Target) -> int:
    printer = run.printer()
    c = run.client
    header: dict[str, Any] = {
        "c": "delta_subscribe" if "delta" in run.opts.flags else "subscribe",
        "cid": c.cid(), "t": run.topic, "sub_id": "1", "a": "processed"}
    if (backlog := run.opts.number("backlog", int)) is not None:
        header["o"] = f"max_backlog={int(backlog)}"
    return _stream(run, run.query_headers(header, printer), printer)


def cmd_sow_and_subscribe(run: Run, target: Target) -> int:
    printer = run.printer()
    c = run.client
    header: dict[str, Any] = {
        "c": "sow_and_delta_subscribe" if "delta" in run.opts.flags else "sow_and_subscribe",
        "cid": c.cid(), "t": run.topic, "sub_id": "1", "query_id": "1", "a": "processed"}
    return _stream(run, run.query_headers(header, printer), printer)


def cmd_sow_delete(run: Run, target: Target) -> int:
    c = run.client
    t0 = time.monotonic()
    flt = run.opts.get("filter")
    if flt is not None:
        if run.opts.get("file") is not None:
            raise SparkError("sow_delete: give -filter or -file, not both")
        pending = [c.send({"c": "sow_delete", "cid": c.cid(), "t": run.topic,
                           "filter": flt, "a": "stats"})]
    else:
        # delete by data: each message names its record by the topic's key fields; all of
        # them go out at once and their stats acks are counted as they come back
        pending = [c.send({"c": "sow_delete", "cid": c.cid(), "t": run.topic, "a": "stats"},
                          body) for body in read_messages(run.opts, run.stdin)]
    waiting = {cid for cid in pending if cid is not None}
    deleted = 0
    while waiting:
        msg = c.receive()
        assert msg is not None  # receive() without a timeout raises instead
        h, _ = msg
        if h.get("c") != "ack" or h.get("cid") not in waiting:
            continue
        if h.get("status") == "failure":
            raise ClientError(h.get("reason", "failure"))
        if h.get("a") == "stats":
            deleted += int(h.get("records_deleted", 0))
            waiting.discard(h["cid"])
    run.err.write(f"Deleted {deleted} records in {_millis_since(t0)}ms.\n")
    return 0


COMMANDS: dict[str, Callable[[Run, Target], int]] = {
    "ping": cmd_ping, "publish": cmd_publish, "sow": cmd_sow, "subscribe": cmd_subscribe,
    "sow_and_subscribe": cmd_sow_and_subscribe, "sow_delete": cmd_sow_delete}


# -- help ---------------------------------------------------------------------------------
def main_help() -> str:
    names = "\n".join(f"    {n}" for n in ("help", *sorted(SPECS)))
    return (f"{BANNER}\nUsage:\n\n    spark help [command]\n\nSupported Commands:\n\n{names}\n\n"
            f"Example:\n\n    %> amps-spark help sow\n\n"
            f"    Shows the parameters and options of the 'sow' command.\n")


def command_help(name: str) -> str:
    spec = SPECS[name]
    # type and prot are listed under proto, whose text names them
    shown = {n: o.help for n, o in spec.options.items() if n not in ("type", "prot")}
    width = max(len(n) for n in (*spec.required, *shown)) + 1

    def rows(items: dict[str, str]) -> str:
        return "\n".join(textwrap.fill(h, 92, initial_indent=f"  {n:<{width}}-- ",
                                        subsequent_indent=" " * (width + 5))
                         for n, h in sorted(items.items()))
    return (f"{BANNER}\nUsage:\n\n  spark {name} [options]\n\n  {spec.summary}\n\n"
            f"Required Parameters:\n\n{rows(spec.required)}\n\nOptions:\n\n{rows(shown)}\n\n"
            f"Example:\n\n  % {spec.example}\n\n    {spec.example_note}\n")


# -- entry point --------------------------------------------------------------------------
def _client_name() -> str:
    return f"spark-{socket.gethostname()}-{os.getpid()}-{time.time_ns() % 10**9}"


def _unable(exc: ClientError, target: Target) -> str:
    cause = exc.__context__
    if isinstance(cause, ConnectionRefusedError):
        kind, text = "ConnectionRefusedException", f"Unable to connect to AMPS at " \
                                                   f"{target.host}:{target.port}"
    elif isinstance(cause, OSError):
        kind, text = "ConnectionException", str(exc)
    else:
        kind, text = "AuthenticationException" if "auth" in str(exc).lower() \
            else "ConnectionException", str(exc)
    return f"Unable to connect to AMPS\n({kind}: {text}).\n"


def main(argv: Sequence[str] | None = None, stdin: IO[bytes] | None = None,
         out: TextIO | None = None, err: TextIO | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    out = out or sys.stdout
    err = err or sys.stderr
    if not args:
        out.write(main_help())
        return 1
    command, rest = args[0], args[1:]
    if command in ("help", "-help", "--help", "-h"):
        if not rest:
            out.write(main_help())
            return 0
        if rest[0] not in SPECS:
            err.write(f"spark: unknown command {rest[0]!r}\n")
            out.write(main_help())
            return 1
        out.write(command_help(rest[0]))
        return 0
    if command not in SPECS:
        err.write(f"spark: unknown command {command!r}\n")
        out.write(main_help())
        return 1
    try:
        opts = parse_options(command, rest)
        target = parse_server(opts.need("server"), message_type(opts))
        if opts.get("format") is not None:
            Printer(opts.get("format"), out)  # a bad template is refused before connecting
        client = Client(target.uri, _client_name())
        try:
            client.connect()
        except ClientError as exc:
            err.write(_unable(exc, target))
            return 1
        try:
            run = Run(opts, client, stdin or sys.stdin.buffer, out, err)
            return COMMANDS[command](run, target)
        finally:
            client.close()
    except SparkError as exc:
        err.write(f"spark: {exc}\n")
        return 1
    except ClientError as exc:
        err.write(f"spark: {command} failed: {exc}\n")
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader of our output went away (| head)
        return 0


if __name__ == "__main__":
    sys.exit(main())
