"""The Admin HTTP interface: AMPS's ``/amps`` monitoring tree, administrator actions, the
emulator's own ``/emulator/...`` extensions, and the web console at ``/``.

It runs on the server's own event loop (the statistics it reads are that loop's state, so no
locks) and does little per request: building the tree is a walk over the connections and
topics, never over messages. HTTP/1.1 framing is h11's (a small, well-tested, sans-IO
parser), the sockets are asyncio streams; :mod:`server.ops.admin_http` reads requests within
their limits (a deadline, body sizes, a cap on connections) and gives each path its one
canonical form, which entitlements are checked on and requests routed by (anything else, or
a path longer than its resource, is a 404). Credentials and entitlements are checked on the
request head, before its body is read; an administrator action needs the ``admin`` write
permission whatever the method.

Paths (``.json``/``.xml`` on the last segment of any ``/amps`` node, ``.csv`` on a leaf; no
extension: a browsable page; ``?t0=``/``?t1=``: the history, :mod:`server.ops.stats_history`):

* ``/amps``: ``host`` (cpus, memory, disks, network), ``instance`` (clients, processors, sow,
  queues, views, subscriptions, transaction_log, transports, replication: one node per
  outgoing Destination with the Monitoring Reference's fields)
* ``/amps/administrator/clients/<id>/disconnect``,
  ``/amps/administrator/replication/<destination>/downgrade``, ``.../upgrade``, ``.../reconnect``,
  ``/amps/administrator/transports/<id>/disable`` and ``.../enable`` (GET, as AMPS; or POST),
  ``/amps/administrator/queues/<id>/enable_proxied_transfer`` and ``disable_proxied_transfer``,
  ``/amps/administrator/actions/<Path>?NAME=VALUE`` (runs the ``on-admin`` actions of
  ``Path``; a missing ``RequiredParameter`` is a 400 and nothing runs),
  ``/amps/administrator/minidump`` (writes a minidump into ``MiniDumpDirectory``; its path)
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
import html
import json
import logging
import tempfile
import time
from typing import IO, TYPE_CHECKING, Any

import h11

from amps_emulator.config.values import parse_inet_addr
from amps_emulator.protocol.reasons import CommandError
from amps_emulator.server.core.clock import TestClock
from amps_emulator.server.net.admission import Ticket
from amps_emulator.server.net.tls_listen import TLSServer, bind_tcp, stream_protocol
from amps_emulator.server.ops import metrics, snapshot
from amps_emulator.server.ops import reset as ops
from amps_emulator.server.ops.admin_access import WWW_AUTHENTICATE, AdminAccess, admin_tls
from amps_emulator.server.ops.admin_http import (
    AdminLimits,
    ConnectionCap,
    Deadline,
    Exchange,
    HttpError,
    Target,
    TooLarge,
    parse_target,
)
from amps_emulator.server.ops.console import STATIC, page, static_file
from amps_emulator.server.ops.faults import FaultConflict, FaultError, Faults
from amps_emulator.server.ops.history import History
from amps_emulator.server.ops.stats import Sampler, client_id, tree

if TYPE_CHECKING:
    from amps_emulator.server.app import Server

__all__ = ["AdminLimits", "AdminServer", "HttpError", "start_admin", "WWW_AUTHENTICATE"]

log = logging.getLogger("amps_emulator.admin")

#: how many segments each ``/emulator/<what>`` resource takes after its name
_EMULATOR_DEPTH = {"health": 0, "reset": 0, "sow": 1, "queues": 1, "journal": 0,
                   "subscriptions": 0, "replication": 2, "stats": 0, "clock": 1, "faults": 1}
_SINGULAR = {"cpus": "cpu", "disks": "disk", "network": "interface", "clients": "client",
             "processors": "processor", "sow": "topic", "views": "view", "queues": "queue",
             "subscriptions": "subscription", "transports": "transport", "journals": "journal",
             "replication": "destination"}


def parse_addr(addr: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``PORT`` (every interface) as AMPS's InetAddr."""
    host, port = parse_inet_addr(addr)
    return host or "0.0.0.0", port


async def start_admin(server: Server, limits: AdminLimits | None = None) -> AdminServer | None:
    """Start the Admin HTTP interface of a started ``server`` on ``--admin`` or the config's
    ``Admin/InetAddr`` (None when neither names one). The server stops it with itself.
    Called by the command line (``__main__.run``) and ``embedded.EmbeddedServer``: the
    server itself does not know the operator tools. ``limits``: what a request may cost
    (:class:`AdminLimits`' defaults without)."""
    cfg = getattr(server.config, "admin", None)
    addr = server.admin_addr
    if addr is None and cfg is not None and getattr(cfg, "port", None) is not None:
        addr = f"{cfg.host or '0.0.0.0'}:{cfg.port}"
    if addr is None:
        return None
    host, port = parse_addr(addr)
    admin = AdminServer(server, host, port, getattr(cfg, "interval", None) or 10.0, limits)
    await admin.start()
    server.admin = admin
    return admin


def _error(status: int, message: str) -> tuple[int, str, bytes]:
    return status, "application/json", json.dumps({"error": message}).encode()


class AdminServer:
    def __init__(self, server: Server, host: str, port: int, interval: float,
                 limits: AdminLimits | None = None) -> None:
        self.server = server
        self.host = host
        self.port = port
        self.sampler = Sampler(server, interval)
        #: a second-by-second history for the console's charts (its first sample now)
        self.history = History(server)
        #: what one request and the interface as a whole may use (tests shorten them)
        self.limits = limits if limits is not None else AdminLimits()
        #: the faults injected through ``/emulator/faults`` (undone when the interface stops)
        self.faults = Faults(server)
        self._srv: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task] = set()
        cfg = getattr(server.config, "admin", None)
        #: HTTPS (the config's ``Certificate`` and ``PrivateKey``), else None: plain HTTP
        self.tls = admin_tls(cfg)
        #: log-on, entitlement, anonymous paths, session cookies and the headers every answer
        #: carries (:mod:`server.ops.admin_access`)
        self.access = AdminAccess(server, cfg, "https" if self.tls is not None else "http")
        #: the ``WWW-Authenticate`` of a 401 (the config's ``WWWAuthenticate``)
        self.challenge = self.access.challenge
        #: the connections open now, and the cap on them
        self.cap = ConnectionCap(self.limits, self.access.headers)

    @property
    def uri(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.access.scheme}://{host}:{self.port}"

    async def start(self) -> None:
        await self.sampler.open_database()
        if self.tls is None:
            self._srv = await asyncio.start_server(self._client, self.host, self.port,
                                                   reuse_address=True)
        else:  # a socket counts under the cap from its accept, its handshake included; the
            # handshake must end within a request's deadline: a peer that opens one and
            # stalls is closed then, as one that trickles its request is
            tls = TLSServer(asyncio.get_running_loop(), await bind_tcp(self.host, self.port),
                            stream_protocol(self._client), self.tls,
                            self.limits.request_deadline, self.cap)
            tls.start()
            self._srv = tls
        self.server.admin_credentials = self.access.trusted_credentials
        sock = self._srv.sockets[0].getsockname()
        self.host, self.port = sock[0], sock[1]
        self.sampler.start()
        self.history.start()

    def truncate_statistics(self, age: float) -> str:
        """``amps-action-do-truncate-statistics``: see :meth:`Sampler.truncate`."""
        return self.sampler.truncate(age)

    async def stop(self) -> None:
        self.sampler.close()
        self.history.close()
        await self.sampler.close_database()
        self.faults.clear()
        if self._srv is not None:
            self._srv.close()
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        if tasks:  # (let them end before the loop does; a TLS connection takes a step more)
            await asyncio.wait(tasks, timeout=1.0)
        if self._srv is not None:
            await self._srv.wait_closed()

    # -- HTTP -----------------------------------------------------------------------------
    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      ticket: Ticket | None = None) -> None:
        """One connection (``ticket``: its place under the cap, taken at its accept)."""
        if ticket is None and not self.cap.admit(writer):
            return
        task = asyncio.current_task()  # (the server's callback runs as a task)
        if task is not None:
            self._tasks.add(task)
        ex = Exchange(reader, writer, self.limits, self.server.budget)
        try:  # (from here on, whatever happens gives the place back)
            ex.extra = self.access.response_headers(None, writer.get_extra_info("sockname"))
            self.server.budget.add(ex)
            while await self._exchange(ex):
                pass
        except Deadline:
            if ex.received:  # (an idle kept-alive connection just closes)
                log.info("admin: a request from %s did not arrive within its %.0fs: closed",
                         writer.get_extra_info("peername"), self.limits.request_deadline)
                ex.refuse(408, "the request did not arrive in time")
        except h11.RemoteProtocolError as exc:
            ex.refuse(exc.error_status_hint, str(exc))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:  # one bad request must not take the admin interface down
            log.exception("admin request failed")
        finally:
            (ticket or self.cap).release()
            self.server.budget.discard(ex)
            if task is not None:
                self._tasks.discard(task)
            writer.close()

    async def _exchange(self, ex: Exchange) -> bool:
        """Read, check and answer one request; whether the connection carries another.
        Credentials, the path and its entitlement are checked on the head: a refused request
        is answered without its body being read, and its connection closed."""
        req = await ex.head()
        if req is None:
            return False
        method = req.method.decode("ascii", "replace")
        ex.extra = self.access.response_headers(req, ex.writer.get_extra_info("sockname"))
        body: bytes | IO[bytes] = b""
        try:
            try:
                target: Target | None = parse_target(req.target)
            except HttpError as exc:  # reported once credentials are checked (401 first)
                target, bad = None, exc
            if not self.access.is_anonymous(target, method):
                grant = await self.access.logon(req, method)
                if grant.cookie is not None:
                    ex.extra.append(("set-cookie", grant.cookie))
                if target is None:
                    raise bad
                self.access.entitle(grant.session, method, target)
            assert target is not None  # (anonymous: it has a canonical form)
            body = await self._read_body(ex, req, method, target)
        except HttpError as exc:
            if exc.status in (400, 404):  # (401, 403, 413: logged where refused)
                log.info("admin %s %r refused: %s", method, req.target.decode("latin-1"), exc)
            await self._send(ex, *_error(exc.status, str(exc)), close=True)
            await ex.linger()
            return False
        try:
            status, ctype, payload = await self._respond(method, target, body)
        finally:
            if not isinstance(body, bytes):
                body.close()
        return await self._send(ex, status, ctype, payload)

    async def _send(self, ex: Exchange, status: int, ctype: str, payload: bytes,
                    close: bool = False) -> bool:
        headers = [("content-type", ctype), ("content-length", str(len(payload))),
                   ("cache-control", "no-store")]  # (+ ex.extra: CORS, the configured ones)
        if status == 401:
            headers.append(("www-authenticate", self.challenge))
        return await ex.send(status, headers, payload, close)

    async def _read_body(self, ex: Exchange, req: h11.Request, method: str, target: Target
                         ) -> bytes | IO[bytes]:
        """The body, within its limit: a restore's archive spooled to a file (its caller is
        entitled to write it, checked already), any other in memory."""
        restore = method == "POST" and target.segs == ("emulator", "snapshot")
        limit = self.limits.max_snapshot if restore else self.limits.max_body
        declared = ex.declared_length(req)
        too_large = HttpError(413, f"the request body is larger than {limit} bytes")
        if declared is not None and declared > limit:
            log.warning("admin %s %s refused: a %d-byte body (at most %d)", method,
                        target.path, declared, limit)
            raise too_large
        try:
            if not restore:
                buf = bytearray()
                await ex.body(buf.extend, limit)
                return bytes(buf)
            ex.extend_deadline(self.limits.snapshot_deadline)
            spool = tempfile.TemporaryFile(dir=snapshot.scratch_dir(self.server))
            try:
                await ex.body(spool.write, limit, spooled=True)
            except BaseException:
                spool.close()
                raise
            spool.seek(0)
            return spool
        except TooLarge:
            log.warning("admin %s %s refused: the body passed %d bytes", method, target.path,
                        limit)
            raise too_large from None

    async def _respond(self, method: str, target: Target, body: bytes | IO[bytes]
                       ) -> tuple[int, str, bytes]:
        segs, query = target.segs, target.query
        try:
            if not self.access.console and (not segs or segs[0] in STATIC):
                raise HttpError(404, "the web console is off (<Galvanometer>disabled</Galvanometer>)")
            if not segs:
                return 200, "text/html; charset=utf-8", page(self.server, self.faults.listed()).encode()
            if segs[0] in STATIC:
                return 200, STATIC[segs[0]], static_file(segs[0])
            if segs == ("metrics",):
                return 200, metrics.CONTENT_TYPE, metrics.render(self.server).encode()
            if segs[0] == "emulator":
                if segs[1:] == ("snapshot",):
                    return await self._snapshot(method, query, body)
                return _json(await self._emulator(method, segs[1:], query, body))
            return self._amps(method, target)
        except FaultError as exc:
            return _error(400, str(exc))
        except (snapshot.SnapshotRefused, FaultConflict) as exc:
            return _error(409, str(exc))
        except snapshot.BadSnapshot as exc:
            return _error(400, str(exc))
        except HttpError as exc:
            return _error(exc.status, str(exc))
        except CommandError as exc:  # a bad filter, orderby, topic: what AMPS would say
            return _error(400, str(exc))
        except LookupError as exc:
            return _error(404, str(exc.args[0]))
        except Exception as exc:  # contained: reported to the caller, logged once
            log.exception("admin %s %s failed", method, target.path)
            return _error(500, str(exc))

    # -- /amps ----------------------------------------------------------------------------
    def _amps(self, method: str, target: Target) -> tuple[int, str, bytes]:
        segs, fmt = list(target.segs), target.fmt
        if len(segs) >= 2 and segs[1] == "administrator":
            return _json(self._administrator(segs[2:], target.query))
        steps: list[tuple[str, bool]] = []
        if "t0" in target.query or "t1" in target.query:  # the statistics' history
            got = self.sampler.store.select(segs, target.query)
            if got.series and fmt in ("", "csv"):
                return 200, "text/csv" if fmt else "text/plain; charset=utf-8", got.csv()
            node: Any = [{"timestamp": t, "value": v} for t, v in got.node] if got.series \
                else got.node
            steps = got.steps
        else:
            node = tree(self.server, self.sampler)
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
        return 200, "text/html; charset=utf-8", _browse(target.path, node).encode()

    def _administrator(self, segs: list[str], query: dict[str, str]) -> Any:
        """``/amps/administrator[/<kind>[/<name>[/<action>]]]``: anything longer, or an
        action the kind does not have, is a 404 (and nothing is done)."""
        s = self.server
        if not segs:
            return {"administrator": {"clients": [client_id(c) for c in s.connections],
                                      "transports": [lst.name for lst in s.listeners],
                                      "minidump": "/amps/administrator/minidump",
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
        if kind == "minidump":  # AMPS writes one on a plain GET
            if len(segs) > 1:
                raise HttpError(404, f"no administrator resource {'/'.join(segs)}")
            try:
                return {"minidump": s.write_minidump("Admin interface")}
            except LookupError as exc:
                raise HttpError(409, str(exc)) from None
            except OSError as exc:
                raise HttpError(500, f"cannot write the minidump: {exc}") from None
        if len(segs) > 3:
            raise HttpError(404, f"no administrator resource {'/'.join(segs)}")
        if kind == "clients":
            if len(segs) == 1:
                return {"clients": sorted(client_id(c) for c in s.connections)}
            conn = ops.find_client(s, segs[1])
            if conn is None:
                raise LookupError(f"no client {segs[1]!r}")
            if len(segs) == 3:
                if segs[2] != "disconnect":
                    raise HttpError(404, f"no client action {segs[2]!r}")
                ops._disconnect(s, [conn])
                return {"client": segs[1], "disconnected": True}
            return {"client": segs[1], "actions": ["disconnect"]}
        if kind == "transports":
            if len(segs) == 1:
                return {"transports": [lst.name for lst in s.listeners]}
            lst = next((x for x in s.listeners if x.name == segs[1]), None)
            if lst is None:
                raise LookupError(f"no transport {segs[1]!r}")
            if len(segs) == 3:
                if segs[2] not in ("disable", "enable"):
                    raise HttpError(404, f"no transport action {segs[2]!r}")
                return self._transport_action(lst, segs[2])
            return {"transport": lst.name, "actions": ["disable", "enable"]}
        if kind == "replication":
            return self._replication_action(segs[1:])
        if kind == "authorization":
            return self._authorization(segs[1:])
        if kind == "queues":
            return self._queue_action(segs[1:])
        raise HttpError(404, f"no administrator resource {kind!r}")

    def _authorization(self, segs: list[str]) -> dict:
        """``/amps/administrator/authorization/<authentication|entitlement>/reset``: the
        permission documents are read again, the clients logged on are disconnected (as the
        reset actions do) and every Admin session cookie ends."""
        kinds = ["authentication", "entitlement"]
        if not segs:
            return {"authorization": kinds}
        if segs[0] not in kinds:
            raise LookupError(f"no authorization resource {segs[0]!r}")
        if len(segs) == 1:
            return {segs[0]: {"actions": ["reset"]}}
        if segs[1] != "reset":
            raise HttpError(404, f"no {segs[0]} action {segs[1]!r}")
        clients = self.server.action_reset_security(segs[0], None, None)
        log.warning("admin: %s reset: %d clients disconnected, %d Admin sessions ended",
                    segs[0], clients, self.access.sessions.clear())
        return {segs[0]: "reset", "clients_disconnected": clients}

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
        if len(segs) == 2 and segs[1] not in ("enable_proxied_transfer", "disable_proxied_transfer"):
            raise HttpError(404, f"no queue action {segs[1]!r}")
        if len(segs) == 2:
            if shared is None:
                raise LookupError(f"no replicated queue {name!r}")
            enable = segs[1] == "enable_proxied_transfer"
            shared.set_proxied_transfer(name, mtype, enable)  # CommandError: not a replicated queue
            return {"queue": segs[0], "proxied_transfer": "enabled" if enable else "disabled"}
        return {"queue": segs[0], "actions": ["enable_proxied_transfer", "disable_proxied_transfer"]}

    def _transport_action(self, lst: Any, action: str) -> dict:
        if action == "disable":
            self.server.disable_listener(lst)
            return {"transport": lst.name, "is_enabled": False}
        if lst.server is None:
            task = asyncio.ensure_future(self.server.enable_listener(lst))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return {"transport": lst.name, "is_enabled": True}

    # -- /emulator ------------------------------------------------------------------------
    def _faults(self, method: str, segs: tuple[str, ...], body: bytes) -> Any:
        """GET: the active faults; POST: add one (a JSON document, or a list of them);
        DELETE: clear them all, or ``/emulator/faults/<id>`` one."""
        rest = segs[0] if segs else ""
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

    async def _snapshot(self, method: str, q: dict, body: bytes | IO[bytes]
                        ) -> tuple[int, str, bytes]:
        """GET: the state as a tar archive (``?gzip=1``: tar.gz); POST: restore one (``body``:
        the archive, spooled to a file)."""
        if method == "GET":
            gz = q.get("gzip", "") not in ("", "0", "false")
            data = await snapshot.take(self.server, gzip=gz)
            return 200, "application/gzip" if gz else "application/x-tar", data
        if method == "POST":
            if isinstance(body, bytes) or not body.read(1):
                raise HttpError(400, "restore wants the snapshot archive as the request body")
            body.seek(0)
            out = await snapshot.restore(self.server, body, limit=self.limits.max_extracted)
            self.faults.journal_replaced()
            return _json(out)
        raise HttpError(405, "snapshot wants GET (take) or POST (restore)")

    def _emulator_replication(self, method: str, segs: tuple[str, ...]) -> Any:
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

    async def _emulator(self, method: str, segs: tuple[str, ...], q: dict, body: Any) -> Any:
        """``/emulator/<what>[/...]`` (``segs``: what follows ``/emulator``): each resource
        takes at most as many segments as :data:`_EMULATOR_DEPTH` says, else a 404."""
        s = self.server
        what = segs[0] if segs else "health"
        if len(segs) > _EMULATOR_DEPTH.get(what, -1) + 1:
            raise HttpError(404, f"no emulator resource /emulator/{'/'.join(segs)}")
        if what == "faults":
            return self._faults(method, segs[1:], body)
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
        if what == "stats":  # the console's charts: ?seconds= of history, the ?top= topics
            try:
                return self.history.series(float(q.get("seconds", 3600)), int(q.get("top", 6)))
            except ValueError:
                raise HttpError(400, "stats wants ?seconds=S&top=N") from None
        if what == "clock":
            tb = s.timebase
            if segs[1:] == ("advance",):
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
            if len(segs) > 1:
                raise HttpError(404, f"no clock resource {segs[1]!r}")
            return {"test_clock": tb.is_test, "monotonic": tb.monotonic(), "time": tb.time()}
        raise HttpError(404, f"no emulator resource /emulator/{'/'.join(segs)}")


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
            f"<{item}" + (f" id='{html.escape(str(e['id']))}'" if "id" in e else "") + ">"
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
