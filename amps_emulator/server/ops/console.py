"""The web console at ``/`` of the admin port, in the spirit of AMPS's Galvanometer.

One server-rendered page: the live panels (topics with their SOW record counts, queues with
depth and leases, clients with their subscriptions, transports, the replication graph and
its destinations, the faults injected through ``/emulator/faults``) and the forms that act
(reset, snapshot and restore, faults, disconnecting a client, downgrading and upgrading a
destination). Its script (``console.js``, with ``console.css`` package data beside this
module, no dependencies) swaps in the live panels from a fresh copy of the page every second,
draws the charts (message rates per topic, queue depth, persisted-ack latency, replication
lag) as SVG from ``/emulator/stats`` (:mod:`server.ops.history`), runs the SOW query box, and
sends each action to its Admin or ``/emulator`` path: an action is an ordinary Admin
request, so the Admin interface's permissions apply (a user who may only read sees it
refused).
"""

from __future__ import annotations

import html
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from amps_emulator.protocol.topics import display_name
from amps_emulator.server.ops.stats import client_id

if TYPE_CHECKING:
    from amps_emulator.server.app import Server

#: the console's static files (package data), served as ``/<name>``
STATIC = {"console.js": "application/javascript; charset=utf-8",
          "console.css": "text/css; charset=utf-8"}


@cache
def static_file(name: str) -> bytes:
    return resources.files(__package__).joinpath(name).read_bytes()


def _e(x: object) -> str:
    return html.escape(str(x))


def _act(label: str, method: str, path: str, arm: bool = False, **query: str) -> str:
    """A button the script turns into an Admin request (``arm``: a second click confirms)."""
    target = path + ("?" + urlencode(query) if query else "")
    return (f"<button class='act' data-method='{method}' data-path='{_e(target)}'"
            + (" data-arm='1'" if arm else "") + f">{_e(label)}</button>")


def _q(part: str) -> str:
    return quote(part, safe="")


def _rows(rows: list[str], width: int, empty: str) -> str:
    return "".join(rows) or f"<tr><td colspan={width}>{_e(empty)}</td></tr>"


def _topics(s: Server) -> str:
    topics = sorted(s.sow_service.sow.topics.items()) if s.sow_service is not None else []
    rows = [f"<tr><td>{_e(display_name(n))}</td><td>{_e(t.spec.message_type)}</td>"
            f"<td class='num'>{t.count()}</td><td>"
            + _act("clear", "POST", "/emulator/reset", arm=True, topic=display_name(n))
            + "</td></tr>" for n, t in topics]
    return ("<table id='topics'><tr><th>topic</th><th>type</th><th class='num'>records</th>"
            f"<th></th></tr>{_rows(rows, 4, 'no SOW topics')}</table>")


def _queues(s: Server) -> str:
    queues = sorted(s.queue_service.queues.items()) if s.queue_service is not None else []
    rows = [f"<tr><td>{_e(q.name)}</td><td class='num'>{q.engine.depth}</td>"
            f"<td class='num'>{q.engine.leased_count}</td><td class='num'>{len(q.subs)}</td><td>"
            + _act("empty", "POST", "/emulator/reset", arm=True, queue=q.name) + "</td></tr>"
            for _key, q in queues]
    return ("<table id='queues'><tr><th>queue</th><th class='num'>depth</th>"
            "<th class='num'>leased</th><th class='num'>subscribers</th><th></th></tr>"
            f"{_rows(rows, 5, 'no queues')}</table>")


def _clients(s: Server) -> str:
    rows = []
    for c in sorted(s.connections, key=lambda c: c.conn_id):
        ident = client_id(c)
        subs = ", ".join(f"{_e(sid)} → {_e(display_name(sub.topic))}" for sid, sub in c.subs.items())
        rows.append(f"<tr data-client='{_e(ident)}'><td>{_e(ident)}</td><td>{_e(c.peer)}</td>"
                    f"<td>{subs}</td><td class='num'>{c.messages_in}</td>"
                    f"<td class='num'>{c.messages_out}</td><td>"
                    + _act("disconnect", "POST",
                           f"/amps/administrator/clients/{_q(ident)}/disconnect") + "</td></tr>")
    return ("<table id='clients'><tr><th>client</th><th>address</th><th>subscriptions</th>"
            "<th class='num'>messages in</th><th class='num'>messages out</th><th></th></tr>"
            f"{_rows(rows, 6, 'no clients')}</table>")


def _transports(s: Server) -> str:
    rows = []
    for x in s.listeners:
        on = x.server is not None
        rows.append(f"<tr><td>{_e(x.name)}</td><td>{_e(x.uri)}</td>"
                    f"<td>{'enabled' if on else 'disabled'}</td><td>"
                    + _act("disable" if on else "enable", "POST",
                           f"/amps/administrator/transports/{_q(x.name)}/"
                           + ("disable" if on else "enable"), arm=on) + "</td></tr>")
    return ("<table id='transports'><tr><th>name</th><th>URI</th><th>state</th><th></th></tr>"
            f"{''.join(rows)}</table>")


def _faults(faults: list[dict[str, Any]]) -> str:
    rows = [f"<tr><td>{_e(f['id'])}</td><td>{_e(f['kind'])}</td><td>"
            + ", ".join(f"{_e(k)}={_e(v)}" for k, v in f.items() if k not in ("id", "kind"))
            + "</td><td>" + _act("clear", "DELETE", f"/emulator/faults/{f['id']}") + "</td></tr>"
            for f in faults]
    return ("<table id='faults'><tr><th>id</th><th>kind</th><th>settings</th><th>"
            + (_act("clear all", "DELETE", "/emulator/faults") if faults else "")
            + f"</th></tr>{_rows(rows, 4, 'no faults injected')}</table>")


def _destination(gate: Any, st: Any) -> dict[str, Any]:
    """What the console shows of a destination: ``describe``'s fields it needs, without
    ``describe``'s sampling of the rates (the page is read every second; ``/amps``'s
    ``messages_out_per_sec`` stays the average since the previous read of the tree)."""
    lag = gate.lag(st)
    return {"name": st.dest.name, "replication_type": st.replication_type,
            "configured_sync_type": st.dest.sync_type, "is_connected": st.connected,
            "held": st.held_at is not None, "cut": st.cut,
            "seconds_behind": int(lag) if lag >= 1 else 0}


def _replication(s: Server) -> str:
    repl = s.replication
    if repl is None:
        return "<p>no replication configured</p>"
    dests = [_destination(repl.gate, st) for st in repl.gate.states.values()]
    rows = []
    for d in dests:
        name = str(d["name"])
        link = "cut" if d["cut"] else "connected" if d["is_connected"] else "down"
        rows.append(f"<tr data-destination='{_e(name)}'><td>{_e(name)}</td>"
                    f"<td>{_e(d['replication_type'])}</td><td>{_e(d['configured_sync_type'])}</td>"
                    f"<td>{link}{' · acks held' if d['held'] else ''}</td>"
                    f"<td class='num'>{_e(d['seconds_behind'])}</td><td>"
                    + _act("downgrade", "POST",
                           f"/amps/administrator/replication/{_q(name)}/downgrade")
                    + _act("upgrade", "POST", f"/amps/administrator/replication/{_q(name)}/upgrade")
                    + "</td></tr>")
    return replication_graph(s, dests) + (
        "<table id='destinations'><tr><th>destination</th><th>now</th><th>configured</th>"
        "<th>link</th><th class='num'>lag (s)</th><th></th></tr>"
        f"{_rows(rows, 6, 'no destinations')}</table>")


def _options(s: Server) -> str:
    topics = sorted(s.sow_service.sow.topics.items()) if s.sow_service is not None else []
    return "".join(
        f"<option value='{_e(display_name(n))}' data-type='{_e(t.spec.message_type)}'>"
        f"{_e(display_name(n))}"
        + (f" ({_e(t.spec.message_type)})" if t.spec.message_type != "json" else "")
        + "</option>" for n, t in topics)


_FAULT_FORM = """<form id='fault-form'><select id='f-kind'>
<option value='delay'>delay</option><option value='drop'>drop</option>
<option value='hold_acks'>hold_acks</option><option value='refuse'>refuse</option>
<option value='disk_full'>disk_full</option></select>
<label data-kinds='delay drop'>client <input id='f-client' list='client-names' size='14'></label>
<label data-kinds='refuse'>transport <select id='f-transport'>{transports}</select></label>
<label data-kinds='delay'>ms <input id='f-ms' type='number' min='0' value='250' size='6'></label>
<label data-kinds='hold_acks'>seconds <input id='f-seconds' type='number' min='0' value='30'
size='6'></label>
<label data-kinds='drop'>every (s) <input id='f-every' type='number' min='0' size='6'
placeholder='once'></label> <button id='f-add'>Inject</button></form>"""


def live(server: Server, faults: list[dict[str, Any]]) -> dict[str, str]:
    """The live panels' contents by element id (the script swaps each one in)."""
    s = server
    names = "".join(f"<option value='{_e(client_id(c))}'>" for c in s.connections)
    return {"live-topics": _topics(s), "live-queues": _queues(s), "live-clients": _clients(s),
            "live-transports": _transports(s), "live-faults": _faults(faults),
            "live-replication": _replication(s),
            "live-names": f"<datalist id='client-names'>{names}</datalist>"}


def page(server: Server, faults: list[dict[str, Any]] | None = None) -> str:
    """The console; ``faults``: the active injected faults (``server.ops.faults``), if any."""
    s = server
    panels = {k: f"<div class='live' id='{k}'>{v}</div>" for k, v in live(s, faults or []).items()}
    transports = "".join(f"<option>{_e(x.name)}</option>" for x in s.listeners)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{_e(s.instance_name)} · amps-emulator</title>
<link rel="stylesheet" href="/console.css"></head><body>
<header><b>{_e(s.instance_name)}</b> <span>amps-emulator console</span>
<a href="/amps">/amps</a> <a href="/metrics">/metrics</a>
<span id="live-state">live</span><label><input type="checkbox" id="pause"> pause</label></header>
<div id="toolbar">{_act("Reset everything", "POST", "/emulator/reset", arm=True)}
<button id="snap-take">Take snapshot</button> <a id="snap-link" hidden>download</a>
<input type="file" id="snap-file" accept=".tar,.gz,.tgz,application/gzip,application/x-tar">
<button id="snap-restore">Restore</button>
<span id="action-status" role="status"></span></div>
<main>
<section class="wide"><h2>Charts <select id="window"><option value="60">last minute</option>
<option value="120" selected>last 2 minutes</option><option value="300">last 5 minutes</option>
</select></h2><div class="charts">
<figure><figcaption>Messages published per topic, and delivered</figcaption>
<svg id="chart-rates" class="chart" viewBox="0 0 560 210"></svg></figure>
<figure><figcaption>Queue depth</figcaption>
<svg id="chart-queues" class="chart" viewBox="0 0 560 210"></svg></figure>
<figure><figcaption>Persisted-ack latency</figcaption>
<svg id="chart-acks" class="chart" viewBox="0 0 560 210"></svg></figure>
<figure><figcaption>Replication lag</figcaption>
<svg id="chart-lag" class="chart" viewBox="0 0 560 210"></svg></figure></div></section>
<section><h2>SOW topics</h2>{panels["live-topics"]}</section>
<section><h2>Queues</h2>{panels["live-queues"]}</section>
<section class="wide"><h2>SOW query</h2>
<form id="query"><select id="q-topic">{_options(s)}</select>
<input id="q-filter" placeholder="filter, e.g. /qty > 10">
<input id="q-orderby" placeholder="orderby, e.g. /qty DESC" size="16">
<input id="q-top" placeholder="top_n" size="5"> <button id="q-run">Query</button>
<span id="q-status"></span></form>
<table id="grid"></table></section>
<section class="wide"><h2>Replication</h2>{panels["live-replication"]}</section>
<section class="wide"><h2>Active faults</h2>{panels["live-faults"]}
{_FAULT_FORM.format(transports=transports)}{panels["live-names"]}</section>
<section class="wide"><h2>Clients</h2>{panels["live-clients"]}</section>
<section class="wide"><h2>Transports</h2>{panels["live-transports"]}</section>
</main><script src="/console.js"></script></body></html>"""


_LINK_COLOURS = {"down": "#b00020", "held": "#c77700", "sync": "#1f7a3a", "async": "#2a6fdb"}


def replication_graph(server: Server, dests: list[dict[str, Any]] | None = None) -> str:
    """An SVG of the replication fabric as this instance sees it: itself in the middle, its
    upstreams (incoming links) on the left, its destinations on the right; each outgoing link
    says sync/async (downgrades show), connected or down (or cut, or its acks held) and its
    lag (``seconds_behind``). ``dests``: :func:`_destination` of each one."""
    repl = server.replication
    if repl is None:
        return "<p>no replication configured</p>"
    if dests is None:
        dests = [_destination(repl.gate, st) for st in repl.gate.states.values()]
    ups = sorted(repl.incoming)
    rows = max(len(dests), len(ups), 1)
    h = 30 + rows * 60
    cy = h // 2
    parts = [f'<svg id="replication" width="760" height="{h}" viewBox="0 0 760 {h}" '
             'xmlns="http://www.w3.org/2000/svg" font-size="12">',
             '<defs><marker id="arr" markerWidth="8" markerHeight="8" refX="8" refY="4" '
             'orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#555"/></marker></defs>',
             f'<rect x="300" y="{cy - 18}" width="160" height="36" rx="6" fill="#1d2330"/>'
             f'<text x="380" y="{cy + 4}" fill="#fff" text-anchor="middle">{_e(repl.name)} '
             f'({_e(repl.group)})</text>']
    for i, name in enumerate(ups):
        y = 30 + i * 60 + 15
        parts.append(f'<rect x="10" y="{y - 15}" width="150" height="30" rx="6" fill="#eef1f5" '
                     f'stroke="#99a"/><text x="85" y="{y + 4}" text-anchor="middle">{_e(name)}</text>'
                     f'<line x1="160" y1="{y}" x2="298" y2="{cy}" stroke="#555" marker-end="url(#arr)"/>'
                     f'<text x="170" y="{y - 4}" fill="#555">incoming</text>')
    for i, d in enumerate(dests):
        y = 30 + i * 60 + 15
        state = "down" if not d["is_connected"] else "held" if d["held"] else str(d["replication_type"])
        colour = _LINK_COLOURS[state]
        link = "cut" if d["cut"] else "connected" if d["is_connected"] else "down"
        label = (f"{d['replication_type']} · {link}{' · acks held' if d['held'] else ''}"
                 f" · lag {d['seconds_behind']}s")
        dash = ' stroke-dasharray="6,4"' if d["replication_type"] == "async" else ""
        parts.append(f'<line class="link" data-state="{state}" x1="462" y1="{cy}" x2="598" y2="{y}" '
                     f'stroke="{colour}" stroke-width="2"{dash} marker-end="url(#arr)"/>'
                     f'<rect x="600" y="{y - 15}" width="150" height="30" rx="6" fill="#eef1f5" '
                     f'stroke="{colour}"/><text x="675" y="{y + 4}" text-anchor="middle">'
                     f'{_e(d["name"])}</text><text x="470" y="{y - 20 if y < cy else y + 16}" '
                     f'fill="{colour}">{_e(label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


__all__ = ["STATIC", "live", "page", "replication_graph", "static_file"]
