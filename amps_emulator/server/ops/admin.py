"""The Admin HTTP interface: AMPS's ``/amps`` monitoring tree, administrator actions, the
emulator's own ``/emulator/...`` extensions, and the web console at ``/``.

It runs on the server's own event loop (the statistics it reads are that loop's state, so no
locks) and does little per request: building the tree is a walk over the connections and
topics, never over messages. HTTP/1.1 framing is h11's (a small, well-tested, sans-IO
parser), the sockets are asyncio streams.

Paths (``.json``/``.xml`` on any node, ``.csv`` on a leaf; no extension: a browsable page):

* ``/amps``: ``host`` (cpus, memory, disks, network), ``instance`` (clients, processors, sow,
  queues, views, subscriptions, transaction_log, transports, replication: one node per
  outgoing Destination with the Monitoring Reference's fields)
* ``/amps/administrator/clients/<id>/disconnect``,
  ``/amps/administrator/replication/<destination>/downgrade``, ``.../upgrade``, ``.../reconnect``,
  ``/amps/administrator/transports/<id>/disable`` and ``.../enable`` (GET, as AMPS; or POST),
  ``/amps/administrator/queues/<id>/enable_proxied_transfer`` and ``disable_proxied_transfer``,
  ``/amps/administrator/actions/<Path>?NAME=VALUE`` (runs the ``on-admin`` actions of
  ``Path``; a missing ``RequiredParameter`` is a 400 and nothing runs)
* ``/emulator/health``, ``/emulator/reset`` (POST; ``?topic=``, ``?queue=``, ``?client=``),
  ``/emulator/sow/<topic>``, ``/emulator/queues/<queue>``, ``/emulator/journal``,
  ``/emulator/subscriptions``, ``/emulator/clock`` and ``/emulator/clock/advance?seconds=``,
  ``/emulator/snapshot`` (GET an archive of the state, POST one to restore it),
  ``/emulator/faults`` (GET lists, POST adds, DELETE clears; see :mod:`server.ops.faults`),
  ``/emulator/replication`` and ``/emulator/replication/<destination>`` (GET the link's state;
  POST ``.../cut``, ``.../restore``: take the link down and keep it down, bring it back;
  POST ``.../hold``, ``.../release``: stop counting the destination's acks, as if it lagged)
"""

from __future__ import annotations

import asyncio
import base64
import html
import json
import logging
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

import h11

from amps_emulator.auth import Credentials
from amps_emulator.config.values import parse_inet_addr
from amps_emulator.protocol.reasons import CommandError
from amps_emulator.server.core.clock import TestClock
from amps_emulator.server.ops import reset as ops
from amps_emulator.server.ops import snapshot
from amps_emulator.server.ops.console import SCRIPT, page
from amps_emulator.server.ops.faults import FaultConflict, FaultError, Faults
from amps_emulator.server.ops.stats import Sampler, client_id, tree

if TYPE_CHECKING:
    from amps_emulator.server.app import Server

#: the challenge a 401 carries when Admin has its own Authentication/Entitlement
WWW_AUTHENTICATE = 'Basic realm="AMPS Admin"'

log = logging.getLogger("amps_emulator.admin")

MAX_REQUEST = 64 * 1024  # bytes of request head and body accepted
MAX_SNAPSHOT = 1 << 30  # bytes of a snapshot archive accepted by POST /emulator/snapshot
IDLE_TIMEOUT = 30.0  # seconds a connection may wait between reads
_SINGULAR = {"cpus": "cpu", "disks": "disk", "network": "interface", "clients": "client",
             "processors": "processor", "sow": "topic", "views": "view", "queues": "queue",
             "subscriptions": "subscription", "transports": "transport", "journals": "journal",
             "replication": "destination"}


class HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def parse_addr(addr: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``PORT`` (every interface) as AMPS's InetAddr."""
    host, port = parse_inet_addr(addr)
    return host or "0.0.0.0", port


async def start_admin(server: Server) -> AdminServer | None:
    """Start the Admin HTTP interface of a started ``server`` on ``--admin`` or the config's
    ``Admin/InetAddr`` (None when neither names one). The server stops it with itself.
    Called by the command line (``__main__.run``) and ``embedded.EmbeddedServer``: the
    server itself does not know the operator tools."""
    cfg = getattr(server.config, "admin", None)
    addr = server.admin_addr
    if addr is None and cfg is not None and getattr(cfg, "port", None) is not None:
        addr = f"{cfg.host or '0.0.0.0'}:{cfg.port}"
    if addr is None:
        return None
    host, port = parse_addr(addr)
    admin = AdminServer(server, host, port, getattr(cfg, "interval", None) or 10.0)
    await admin.start()
    server.admin = admin
    return admin


class AdminServer:
    def __init__(self, server: Server, host: str, port: int, interval: float) -> None:
        self.server = server
        self.host = host
        self.port = port
        self.sampler = Sampler(server, interval)
        #: the faults injected through ``/emulator/faults`` (undone when the interface stops)
        self.faults = Faults(server)
        self._srv: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task] = set()
        cfg = getattr(server.config, "admin", None)
        #: the ``WWW-Authenticate`` of a 401 (the config's ``WWWAuthenticate``)
        self.challenge: str = getattr(cfg, "www_authenticate", None) or WWW_AUTHENTICATE

    @property
    def uri(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self) -> None:
        self._srv = await asyncio.start_server(self._client, self.host, self.port,
                                               reuse_address=True)
        sock = self._srv.sockets[0].getsockname()
        self.host, self.port = sock[0], sock[1]
        self.sampler.start()

    async def stop(self) -> None:
        self.sampler.close()
        self.faults.clear()
        if self._srv is not None:
            self._srv.close()
        for t in list(self._tasks):
            t.cancel()
        if self._srv is not None:
            await self._srv.wait_closed()

    # -- HTTP -----------------------------------------------------------------------------
    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()  # (the server's callback runs as a task)
        if task is not None:
            self._tasks.add(task)
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_REQUEST)
        try:
            while True:
                req, body = await self._read_request(conn, reader)
                if req is None:
                    break
                status, ctype, payload = await self._respond(req, body)
                headers = [("content-type", ctype), ("content-length", str(len(payload))),
                           ("cache-control", "no-store"),
                           ("access-control-allow-origin", "*")]
                if status == 401:
                    headers.append(("www-authenticate", self.challenge))
                writer.write(conn.send(h11.Response(status_code=status, headers=headers)))
                writer.write(conn.send(h11.Data(data=payload)))
                writer.write(conn.send(h11.EndOfMessage()))
                await writer.drain()
                if conn.our_state is h11.MUST_CLOSE:
                    break
                try:
                    conn.start_next_cycle()
                except h11.LocalProtocolError:
                    break
        except (h11.RemoteProtocolError, ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:  # one bad request must not take the admin interface down
            log.exception("admin request failed")
        finally:
            if task is not None:
                self._tasks.discard(task)
            writer.close()

    async def _read_request(self, conn: h11.Connection, reader: asyncio.StreamReader
                            ) -> tuple[Any, bytes]:
        req = None
        body = b""
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                try:
                    data = await asyncio.wait_for(reader.read(16384), IDLE_TIMEOUT)
                except TimeoutError:
                    return None, b""  # an idle or trickling client does not keep a task
                conn.receive_data(data)
                if not data and conn.their_state is not h11.DONE and req is None:
                    return None, b""
                continue
            if isinstance(event, h11.Request):
                req = event
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > (MAX_SNAPSHOT if req is not None and req.target.startswith(
                        b"/emulator/snapshot") else MAX_REQUEST):
                    raise h11.RemoteProtocolError("request body too large")
            elif isinstance(event, h11.EndOfMessage):
                return req, body
            elif isinstance(event, h11.ConnectionClosed):
                return None, b""

    async def _respond(self, req: Any, body: bytes) -> tuple[int, str, bytes]:
        method = req.method.decode()
        target = req.target.decode("latin-1")
        parts = urlsplit(target)
        path = unquote(parts.path).rstrip("/") or "/"
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        try:
            await self._authorize(req, method, path)
            if path == "/" or path == "/index.html":
                return 200, "text/html; charset=utf-8", page(self.server, self.faults.listed()).encode()
            if path == "/console.js":
                return 200, "application/javascript", SCRIPT.encode()
            if path == "/emulator/snapshot":
                return await self._snapshot(method, query, body)
            if path == "/emulator/faults" or path.startswith("/emulator/faults/"):
                return _json(self._faults(method, path, body))
            if path.startswith("/emulator"):
                return _json(await self._emulator(method, path, query))
            if path.startswith("/amps"):
                return self._amps(method, path, query)
            raise HttpError(404, f"no resource {path}")
        except FaultError as exc:
            return 400, "application/json", json.dumps({"error": str(exc)}).encode()
        except (snapshot.SnapshotRefused, FaultConflict) as exc:
            return 409, "application/json", json.dumps({"error": str(exc)}).encode()
        except snapshot.BadSnapshot as exc:
            return 400, "application/json", json.dumps({"error": str(exc)}).encode()
        except HttpError as exc:
            return exc.status, "application/json", json.dumps({"error": str(exc)}).encode()
        except CommandError as exc:  # a bad filter, orderby, topic: what AMPS would say
            return 400, "application/json", json.dumps({"error": str(exc)}).encode()
        except LookupError as exc:
            return 404, "application/json", json.dumps({"error": str(exc.args[0])}).encode()
        except Exception as exc:  # contained: reported to the caller, logged once
            log.exception("admin %s %s failed", method, target)
            return 500, "application/json", json.dumps({"error": str(exc)}).encode()

    async def _authorize(self, req: Any, method: str, path: str) -> None:
        """The Admin interface is AMPS's ``amps-admin`` transport: its own Authentication /
        Entitlement blocks, else the instance's, else the default modules (User Guide,
        "Securing AMPS"). When any of these is configured, the HTTP Basic credentials log on
        through the resolved modules (401 otherwise) and the path must be readable (GET) or
        writable (other methods) by the user's ``admin`` permissions (403). With the defaults
        alone (no block anywhere) every request is served, as the default modules accept
        anyone."""
        security = self.server.broker.security
        if security is None or not security.config.admin_secured:
            return
        user, password = "", None
        for name, value in req.headers:
            if name.lower() == b"authorization":
                scheme, _, encoded = value.decode("latin-1").partition(" ")
                if scheme.lower() == "basic":
                    try:
                        text = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
                    except (ValueError, UnicodeDecodeError):
                        raise HttpError(401, "bad Basic credentials") from None
                    user, _, password = text.partition(":")
        outcome = await security.admin().logon(Credentials(user, password))
        session = outcome.session
        if session is None:
            log.warning("admin %s %s refused (%s): %s", method, path, outcome.reason, outcome.detail)
            raise HttpError(401, outcome.reason)
        try:
            if not session.permissions.check_admin(path, write=method != "GET"):
                self.server.broker.denied["reads" if method == "GET" else "writes"] += 1
                raise HttpError(403, f"user {session.user_id!r} is not entitled to {path}")
        finally:
            session.close()

    # -- /amps ----------------------------------------------------------------------------
    def _amps(self, method: str, path: str, query: dict) -> tuple[int, str, bytes]:
        fmt = ""
        for ext in (".json", ".xml", ".csv"):
            if path.endswith(ext):
                fmt, path = ext[1:], path[: -len(ext)]
                break
        segs = [s for s in path.split("/") if s]
        if len(segs) >= 2 and segs[1] == "administrator":
            return _json(self._administrator(segs[2:], query))
        node: Any = tree(self.server, self.sampler)
        steps: list[tuple[str, bool]] = []
        for seg in segs:
            node, in_list = _child(node, seg, segs)
            steps.append((seg, in_list))
        wrapped: Any = node
        for seg, in_list in reversed(steps):
            if in_list:
                if isinstance(wrapped, dict) and "id" not in wrapped:
                    wrapped = {"id": seg, **wrapped}
                wrapped = [wrapped]
            else:
                wrapped = {seg: wrapped}
        if fmt == "json":
            return 200, "application/json", json.dumps(wrapped).encode()
        if fmt == "xml":
            return 200, "application/xml", _xml(wrapped).encode()
        if fmt == "csv":
            if isinstance(node, (dict, list)):
                raise HttpError(400, "CSV output is for leaf resources only")
            stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(self.sampler.sampled_at))
            return 200, "text/csv", f"{stamp}.000000Z,{node}\n".encode()
        return 200, "text/html; charset=utf-8", _browse(path, node).encode()

    def _administrator(self, segs: list[str], query: dict[str, str]) -> Any:
        s = self.server
        if not segs:
            return {"administrator": {"clients": [client_id(c) for c in s.connections],
                                      "transports": [lst.name for lst in s.listeners],
                                      "actions": s.actions.admin_paths()}}
        kind = segs[0]
        if kind == "actions":  # the on-admin actions; a path runs one (query: its variables)
            if len(segs) == 1:
                return {"actions": s.actions.admin_paths()}
            path = "/".join(segs[1:])
            try:
                ran = s.actions.admin(path, query)
            except ValueError as exc:
                raise HttpError(400, str(exc)) from None
            return {"action": path, "ran": ran}
        if kind == "clients":
            if len(segs) == 1:
                return {"clients": sorted(client_id(c) for c in s.connections)}
            conn = ops.find_client(s, segs[1])
            if conn is None:
                raise LookupError(f"no client {segs[1]!r}")
            if len(segs) == 3 and segs[2] == "disconnect":
                ops._disconnect(s, [conn])
                return {"client": segs[1], "disconnected": True}
            return {"client": segs[1], "actions": ["disconnect"]}
        if kind == "transports":
            if len(segs) == 1:
                return {"transports": [lst.name for lst in s.listeners]}
            lst = next((x for x in s.listeners if x.name == segs[1]), None)
            if lst is None:
                raise LookupError(f"no transport {segs[1]!r}")
            if len(segs) == 3 and segs[2] in ("disable", "enable"):
                return self._transport_action(lst, segs[2])
            return {"transport": lst.name, "actions": ["disable", "enable"]}
        if kind == "replication":
            return self._replication_action(segs[1:])
        if kind == "queues":
            return self._queue_action(segs[1:])
        raise HttpError(404, f"no administrator resource {kind!r}")

    def _replication_action(self, segs: list[str]) -> dict:
        """``/amps/administrator/replication/<destination>/downgrade|upgrade|reconnect``."""
        repl = self.server.replication
        names = list(repl.gate.states) if repl is not None else []
        if not segs:
            return {"replication": names}
        if repl is None or segs[0] not in names:
            raise LookupError(f"no replication destination {segs[0]!r}")
        name = segs[0]
        if len(segs) == 1:
            return {"destination": name, "actions": ["downgrade", "upgrade", "reconnect"]}
        action = segs[1]
        if action == "downgrade":
            done = repl.downgrade_destination(name)
        elif action == "upgrade":
            done = repl.upgrade_destination(name)
        elif action == "reconnect":
            done = repl.reconnect(name)
        else:
            raise HttpError(404, f"no replication action {action!r}")
        st = repl.state(name)
        return {"destination": name, "action": action, "done": done,
                "replication_type": st.replication_type, "upgrade_pending": st.upgrade_pending}

    def _queue_action(self, segs: list[str]) -> dict:
        """``/amps/administrator/queues/<id>/enable_proxied_transfer`` | ``disable_...``
        (``<id>``: the queue's name, or ``name!type`` as the monitoring tree lists it)."""
        svc = self.server.queue_service
        shared = svc.replication if svc is not None else None
        if not segs:
            names = [] if svc is None else sorted(n for n, q in svc.queues.items()
                                                  if q.ownership is not None)
            return {"queues": names}
        name, _, mtype = segs[0].partition("!")
        if len(segs) == 2 and segs[1] in ("enable_proxied_transfer", "disable_proxied_transfer"):
            if shared is None:
                raise LookupError(f"no replicated queue {name!r}")
            enable = segs[1] == "enable_proxied_transfer"
            shared.set_proxied_transfer(name, mtype, enable)  # CommandError: not a replicated queue
            return {"queue": segs[0], "proxied_transfer": "enabled" if enable else "disabled"}
        return {"queue": segs[0], "actions": ["enable_proxied_transfer", "disable_proxied_transfer"]}

    def _transport_action(self, lst: Any, action: str) -> dict:
        if action == "disable":
            if lst.server is not None:
                lst.server.close()
                lst.server = None
            return {"transport": lst.name, "is_enabled": False}
        if lst.server is None:
            task = asyncio.ensure_future(self.server.enable_listener(lst))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return {"transport": lst.name, "is_enabled": True}

    # -- /emulator ------------------------------------------------------------------------
    def _faults(self, method: str, path: str, body: bytes) -> Any:
        """GET: the active faults; POST: add one (a JSON document, or a list of them);
        DELETE: clear them all, or ``/emulator/faults/<id>`` one."""
        rest = path[len("/emulator/faults"):].strip("/")
        if method == "GET" and not rest:
            return {"faults": self.faults.listed()}
        if method == "DELETE":
            if not rest:
                return self.faults.clear()
            if not rest.isdigit():
                raise HttpError(404, f"no fault {rest!r}")
            return self.faults.clear(int(rest))
        if method == "POST" and not rest:
            try:
                doc = json.loads(body)
            except ValueError as exc:
                raise FaultError(f"the body is not JSON: {exc}") from None
            if isinstance(doc, list):
                return {"faults": [self.faults.add(d) for d in doc]}
            return self.faults.add(doc)
        raise HttpError(405, "faults: GET lists, POST adds, DELETE clears")

    async def _snapshot(self, method: str, q: dict, body: bytes) -> tuple[int, str, bytes]:
        """GET: the state as a tar archive (``?gzip=1``: tar.gz); POST: restore one."""
        if method == "GET":
            gz = q.get("gzip", "") not in ("", "0", "false")
            data = await snapshot.take(self.server, gzip=gz)
            return 200, "application/gzip" if gz else "application/x-tar", data
        if method == "POST":
            if not body:
                raise HttpError(400, "restore wants the snapshot archive as the request body")
            out = await snapshot.restore(self.server, body)
            self.faults.journal_replaced()
            return _json(out)
        raise HttpError(405, "snapshot wants GET (take) or POST (restore)")

    def _emulator_replication(self, method: str, segs: list[str]) -> Any:
        """``/emulator/replication[/<destination>[/cut|restore|hold|release]]``: the state of
        the links (GET) and, for HA tests, taking one down and holding its acks (POST)."""
        repl = self.server.replication
        if repl is None:
            if segs:
                raise LookupError(f"no replication destination {segs[0]!r}")
            return {"destinations": [], "incoming": []}
        if not segs:
            return {"instance": repl.name, "group": repl.group,
                    "destinations": [repl.describe(n) for n in repl.gate.states],
                    "incoming": sorted(repl.incoming)}
        name = segs[0]
        repl.state(name)  # LookupError: 404
        if len(segs) == 1:
            return repl.describe(name)
        if len(segs) != 2 or segs[1] not in ("cut", "restore", "hold", "release"):
            raise HttpError(404, f"no emulator replication resource {'/'.join(segs)}")
        if method != "POST":
            raise HttpError(405, f"{segs[1]} wants POST")
        {"cut": repl.cut, "restore": repl.restore, "hold": repl.hold, "release": repl.release}[segs[1]](name)
        return repl.describe(name)

    async def _emulator(self, method: str, path: str, q: dict) -> Any:
        s = self.server
        segs = [x for x in path.split("/") if x][1:]
        what = segs[0] if segs else "health"
        if what == "health":
            return {"ready": s.ready and not s.broker.stopping, "instance": s.instance_name,
                    "admin": self.uri, "test_clock": s.timebase.is_test,
                    "transports": [{"name": x.name, "uri": x.uri,
                                    "enabled": x.server is not None} for x in s.listeners]}
        if what == "reset":
            if method != "POST":
                raise HttpError(405, "reset wants POST")
            t0 = time.perf_counter()
            if "topic" in q:
                out = ops.reset_topic(s, q["topic"])
            elif "queue" in q:
                out = ops.reset_queue(s, q["queue"])
            elif "client" in q:
                out = ops.reset_client(s, q["client"])
            else:
                out = await ops.reset_all(s)
                self.faults.journal_replaced()
            out["ms"] = round((time.perf_counter() - t0) * 1000, 3)
            return out
        if what == "sow" and len(segs) == 2:
            top = int(q["top_n"]) if q.get("top_n") else None
            return await ops.sow_records(s, segs[1], q.get("filter"), q.get("orderby"), top,
                                         q.get("type"))
        if what == "sow":
            return {"topics": [{"topic": n, "message_type": t.spec.message_type,
                                "count": t.count()}
                               for n, t in sorted(s.sow_service.sow.topics.items())]
                    if s.sow_service is not None else []}
        if what == "queues" and len(segs) == 2:
            return ops.queue_contents(s, segs[1])
        if what == "queues":
            svc = s.queue_service
            return {"queues": [{"queue": x.name, "depth": x.engine.depth,
                                "leased": x.engine.leased_count}
                               for x in sorted(svc.queues.values(), key=lambda x: x.key)]
                    if svc else []}
        if what == "journal":
            return ops.journal_range(
                s, q.get("from"), q.get("to"),
                float(q["since"]) if q.get("since") else None,
                float(q["until"]) if q.get("until") else None,
                q.get("topic"), int(q.get("limit", 1000)))
        if what == "subscriptions":
            return ops.subscriptions(s)
        if what == "replication":
            return self._emulator_replication(method, segs[1:])
        if what == "stats":
            return {"history": self.sampler.history, "interval": self.sampler.interval}
        if what == "clock":
            tb = s.timebase
            if len(segs) == 2 and segs[1] == "advance":
                if method != "POST":
                    raise HttpError(405, "advance wants POST")
                if not isinstance(tb, TestClock):
                    raise HttpError(409, "the server runs on real time: start it with "
                                         "--test-clock to advance its clock")
                try:
                    seconds = float(q.get("seconds", ""))
                except ValueError:
                    raise HttpError(400, "advance wants ?seconds=N") from None
                if seconds < 0:
                    raise HttpError(400, "the clock does not go backwards")
                ran = tb.advance(seconds)
                s.turn.request()
                return {"monotonic": tb.monotonic(), "time": tb.time(), "timers_run": ran}
            return {"test_clock": tb.is_test, "monotonic": tb.monotonic(), "time": tb.time()}
        raise HttpError(404, f"no emulator resource {path}")


def _json(obj: Any) -> tuple[int, str, bytes]:
    return 200, "application/json", json.dumps(obj).encode()


def _child(node: Any, seg: str, segs: list[str]) -> tuple[Any, bool]:
    """Step into ``seg`` of ``node`` (a key, or the ``id`` of a collection's element)."""
    if isinstance(node, dict) and seg in node:
        return node[seg], False
    if isinstance(node, list):
        for e in node:
            if isinstance(e, dict) and e.get("id") == seg:
                return e, True
    raise HttpError(404, f"no resource /{'/'.join(segs)}")


def _xml(obj: Any, name: str | None = None) -> str:
    if name is None:
        return "".join(_xml(v, k) for k, v in obj.items())
    if isinstance(obj, list):
        item = _SINGULAR.get(name, "item")
        inner = "".join(
            f"<{item} id='{html.escape(str(e.get('id', '')))}'>"
            + "".join(_xml(v, k) for k, v in e.items() if k != "id") + f"</{item}>"
            if isinstance(e, dict) else f"<{item}>{html.escape(str(e))}</{item}>"
            for e in obj)
        return f"<{name}>{inner}</{name}>"
    if isinstance(obj, dict):
        return f"<{name}>" + "".join(_xml(v, k) for k, v in obj.items()) + f"</{name}>"
    return f"<{name}>{html.escape(str(obj))}</{name}>"


def _browse(path: str, node: Any) -> str:
    """A minimal page listing a node's children as links, as AMPS's browsable interface."""
    rows = []
    if isinstance(node, dict):
        items = [(k, v) for k, v in node.items()]
    elif isinstance(node, list):
        items = [(str(e.get("id", i)), e) for i, e in enumerate(node)]
    else:
        items = []
    for k, v in items:
        if isinstance(v, (dict, list)):
            rows.append(f"<li><a href='{html.escape(path)}/{html.escape(k)}'>{html.escape(k)}</a></li>")
        else:
            rows.append(f"<li>{html.escape(k)}: {html.escape(str(v))}</li>")
    if not items:
        rows.append(f"<li>{html.escape(str(node))}</li>")
    return (f"<!doctype html><title>{html.escape(path)}</title><h1>{html.escape(path)}</h1>"
            f"<p><a href='{html.escape(path)}.json'>json</a> <a href='{html.escape(path)}.xml'>"
            f"xml</a></p><ul>{''.join(rows)}</ul>")
