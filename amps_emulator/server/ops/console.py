"""The web console at ``/`` of the admin port, in the spirit of AMPS's Galvanometer.

One server-rendered page (topics with their SOW record counts, queues with depth and leases,
clients with their subscriptions, transports, the faults injected through
``/emulator/faults``, the replication graph: this instance, its destinations and upstreams,
each link with its state, sync/async and lag) plus a small script with no dependencies: a
SOW query box that shows the result in a grid (through ``/emulator/sow/<topic>``), a
message-rate chart drawn on a canvas from the sampler's history, and a refresh every few
seconds.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from amps_emulator.protocol.topics import display_name
from amps_emulator.server.ops.stats import client_id

if TYPE_CHECKING:
    from amps_emulator.server.app import Server

_STYLE = """
body{font:14px system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1d2330}
header{background:#1d2330;color:#fff;padding:10px 18px}header b{font-size:18px}
main{display:grid;grid-template-columns:1fr 1fr;gap:14px;padding:14px}
section{background:#fff;border:1px solid #dde1e7;border-radius:6px;padding:10px 14px}
section.wide{grid-column:1/3}h2{font-size:15px;margin:4px 0 8px}
table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #eceef2;
padding:3px 6px;text-align:left;font-size:13px}th{background:#f0f2f5}
input,select,button{font:inherit;padding:3px 6px}#q-filter{width:40%}
.err{color:#b00020}canvas{width:100%;height:160px}
"""


def _e(x: object) -> str:
    return html.escape(str(x))


def page(server: Server, faults: list[dict] | None = None) -> str:
    """The console; ``faults``: the active injected faults (``server.ops.faults``), if any."""
    s = server
    topics = sorted(s.sow_service.sow.topics.items()) if s.sow_service is not None else []
    topic_rows = "".join(
        f"<tr><td>{_e(display_name(n))}</td><td>{_e(t.spec.message_type)}</td>"
        f"<td class='count'>{t.count()}</td></tr>" for n, t in topics) \
        or "<tr><td colspan=3>no SOW topics</td></tr>"
    options = "".join(
        f"<option value='{_e(display_name(n))}' data-type='{_e(t.spec.message_type)}'>"
        f"{_e(display_name(n))}"
        + (f" ({_e(t.spec.message_type)})" if t.spec.message_type != "json" else "")
        + "</option>" for n, t in topics)
    queues = sorted(s.queue_service.queues.items()) if s.queue_service is not None else []
    queue_rows = "".join(
        f"<tr><td>{_e(q.name)}</td><td>{q.engine.depth}</td><td>{q.engine.leased_count}</td>"
        f"<td>{len(q.subs)}</td></tr>" for _key, q in queues) \
        or "<tr><td colspan=4>no queues</td></tr>"
    client_rows = "".join(
        f"<tr><td>{_e(client_id(c))}</td><td>{_e(c.peer)}</td><td>"
        + ", ".join(f"{_e(sid)} → {_e(display_name(sub.topic))}" for sid, sub in c.subs.items())
        + f"</td><td>{c.messages_in}</td><td>{c.messages_out}</td></tr>"
        for c in sorted(s.connections, key=lambda c: c.conn_id)) \
        or "<tr><td colspan=5>no clients</td></tr>"
    transport_rows = "".join(
        f"<tr><td>{_e(x.name)}</td><td>{_e(x.uri)}</td>"
        f"<td>{'enabled' if x.server is not None else 'disabled'}</td></tr>"
        for x in s.listeners)
    fault_rows = "".join(
        f"<tr><td>{_e(f['id'])}</td><td>{_e(f['kind'])}</td><td>"
        + ", ".join(f"{_e(k)}={_e(v)}" for k, v in f.items() if k not in ("id", "kind"))
        + "</td></tr>" for f in faults or []) \
        or "<tr><td colspan=3>no faults injected</td></tr>"
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{_e(s.instance_name)} · amps-emulator</title>
<style>{_STYLE}</style></head><body>
<header><b>{_e(s.instance_name)}</b> · amps-emulator console ·
<a style="color:#9cf" href="/amps">/amps</a></header>
<main>
<section><h2>SOW topics</h2><table id="topics"><tr><th>topic</th><th>type</th>
<th>records</th></tr>{topic_rows}</table></section>
<section><h2>Message rate (messages/s)</h2><canvas id="rate" width="600" height="160">
</canvas></section>
<section class="wide"><h2>SOW query</h2>
<form id="query"><select id="q-topic">{options}</select>
<input id="q-filter" placeholder="filter, e.g. /qty > 10">
<input id="q-orderby" placeholder="orderby, e.g. /qty DESC" size="16">
<input id="q-top" placeholder="top_n" size="5"> <button id="q-run">Query</button>
<span id="q-status"></span></form>
<table id="grid"></table></section>
<section><h2>Queues</h2><table id="queues"><tr><th>queue</th><th>depth</th>
<th>leased</th><th>subscribers</th></tr>{queue_rows}</table></section>
<section><h2>Transports</h2><table><tr><th>name</th><th>URI</th><th>state</th></tr>
{transport_rows}</table></section>
<section class="wide"><h2>Replication</h2>{replication_graph(s)}</section>
<section class="wide"><h2>Active faults</h2><table id="faults"><tr><th>id</th>
<th>kind</th><th>settings</th></tr>{fault_rows}</table></section>
<section class="wide"><h2>Clients</h2><table id="clients"><tr><th>client</th>
<th>address</th><th>subscriptions</th><th>messages in</th><th>messages out</th></tr>
{client_rows}</table></section>
</main><script src="/console.js"></script></body></html>"""


_LINK_COLOURS = {"down": "#b00020", "held": "#c77700", "sync": "#1f7a3a", "async": "#2a6fdb"}


def replication_graph(server: Server) -> str:
    """An SVG of the replication fabric as this instance sees it: itself in the middle, its
    upstreams (incoming links) on the left, its destinations on the right; each outgoing link
    says sync/async (downgrades show), connected or down (or cut, or its acks held) and its
    lag (``seconds_behind``)."""
    repl = server.replication
    if repl is None:
        return "<p>no replication configured</p>"
    dests = [repl.describe(name) for name in repl.gate.states]
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


SCRIPT = r"""
(function () {
  const $ = (id) => document.getElementById(id);
  function cell(tag, text) { const c = document.createElement(tag); c.textContent = text; return c; }
  async function runQuery(ev) {
    if (ev) ev.preventDefault();
    const sel = $('q-topic'), topic = sel.value, p = new URLSearchParams();
    const opt = sel.options[sel.selectedIndex];
    if (opt && opt.dataset.type && opt.dataset.type !== 'json') p.set('type', opt.dataset.type);
    if ($('q-filter').value) p.set('filter', $('q-filter').value);
    if ($('q-orderby').value) p.set('orderby', $('q-orderby').value);
    if ($('q-top').value) p.set('top_n', $('q-top').value);
    $('q-status').textContent = 'running…'; $('q-status').className = '';
    const r = await fetch('/emulator/sow/' + encodeURIComponent(topic) + '?' + p);
    const body = await r.json(), grid = $('grid');
    grid.textContent = '';
    if (!r.ok) { $('q-status').textContent = body.error; $('q-status').className = 'err'; return; }
    const cols = [];
    for (const rec of body.records)
      if (rec.data && typeof rec.data === 'object')
        for (const k of Object.keys(rec.data)) if (!cols.includes(k)) cols.push(k);
    const head = document.createElement('tr');
    head.appendChild(cell('th', 'SowKey'));
    for (const c of cols) head.appendChild(cell('th', c));
    const typed = body.records.some((rec) => rec.body !== undefined);
    if (typed) head.appendChild(cell('th', 'body'));
    grid.appendChild(head);
    for (const rec of body.records) {
      const tr = document.createElement('tr');
      tr.appendChild(cell('td', rec.sow_key));
      for (const c of cols) {
        const v = rec.data ? rec.data[c] : '';
        tr.appendChild(cell('td', typeof v === 'object' ? JSON.stringify(v) : String(v ?? '')));
      }
      if (typed) tr.appendChild(cell('td', rec.body ?? ''));
      grid.appendChild(tr);
    }
    $('q-status').textContent = body.count + ' of ' + body.topic_matches + ' records';
    document.body.dataset.queryDone = String(Number(document.body.dataset.queryDone || 0) + 1);
  }
  async function drawRates() {
    try {
      const r = await fetch('/emulator/stats'); const s = await r.json();
      const c = $('rate'), g = c.getContext('2d'), pts = s.history;
      g.clearRect(0, 0, c.width, c.height);
      const max = Math.max(1, ...pts.map((p) => p[1]));
      g.strokeStyle = '#2a6fdb'; g.lineWidth = 2; g.beginPath();
      pts.forEach((p, i) => {
        const x = pts.length < 2 ? 0 : (i / (pts.length - 1)) * (c.width - 10) + 5;
        const y = c.height - 15 - (p[1] / max) * (c.height - 30);
        i ? g.lineTo(x, y) : g.moveTo(x, y);
      });
      g.stroke(); g.fillStyle = '#555';
      g.fillText('max ' + max.toFixed(1) + ' msg/s, every ' + s.interval + ' s', 6, 12);
    } catch (e) { /* the server went away: keep the last picture */ }
  }
  $('query').addEventListener('submit', runQuery);
  drawRates(); setInterval(drawRates, 5000);
})();
"""
