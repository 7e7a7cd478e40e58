// The amps-emulator web console's script (no dependencies): live panels, SVG charts, the SOW
// query box and the actions. Every action is an ordinary Admin request, so the Admin
// interface's authentication and permissions decide; a refusal is shown as it came.
(function () {
  'use strict';
  const $ = (id) => document.getElementById(id);
  const body = document.body;
  const NS = 'http://www.w3.org/2000/svg';
  const COLOURS = ['#2a6fdb', '#1f7a3a', '#c77700', '#8e44ad', '#b00020', '#138496', '#6b7280',
    '#d63384'];
  // a page opened as http://user:password@host/ has credentials in its address, which fetch
  // refuses in a URL: every request names the origin alone (the browser adds the credentials)
  const at = (path) => location.origin + path;
  const count = (name) => { body.dataset[name] = String(Number(body.dataset[name] || 0) + 1); };

  // -- what an action did ---------------------------------------------------------------
  function say(text, ok) {
    const s = $('action-status');
    s.textContent = text;
    s.className = ok ? 'ok' : 'err';
  }

  function summary(doc) {
    if (doc === null || doc === undefined) return 'done';
    const text = JSON.stringify(doc);
    return text.length > 200 ? text.slice(0, 199) + '…' : text;
  }

  async function act(what, method, path, payload, headers) {
    say(what + ' …', true);
    try {
      const r = await fetch(at(path), {method: method, body: payload, headers: headers || {}});
      const type = r.headers.get('content-type') || '';
      const doc = type.startsWith('application/json') ? await r.json() : null;
      if (r.ok) say(what + ': ' + summary(doc), true);
      else if (r.status === 401 || r.status === 403) {
        say(what + ' refused (' + r.status + '): ' + (doc && doc.error || r.statusText), false);
      } else say(what + ' failed (' + r.status + '): ' + (doc && doc.error || r.statusText), false);
    } catch (e) {
      say(what + ' failed: ' + e, false);
    }
    await Promise.all([refresh(), drawCharts()]);  // the panels as they are after it
    count('actions');
  }

  // -- buttons that act (a destructive one is armed by a first click) ---------------------
  let armed = null;  // {path, until}

  function rearm() {
    for (const b of document.querySelectorAll('button.act[data-arm]')) {
      const on = armed !== null && armed.path === b.dataset.path && Date.now() < armed.until;
      if (!b.dataset.label) b.dataset.label = b.textContent;
      b.classList.toggle('armed', on);
      b.textContent = on ? 'click again to ' + b.dataset.label : b.dataset.label;
    }
  }

  document.addEventListener('click', (ev) => {
    const b = ev.target.closest('button.act');
    if (!b) return;
    ev.preventDefault();
    const path = b.dataset.path;
    const label = b.dataset.label || b.textContent;
    if (b.dataset.arm && !(armed && armed.path === path && Date.now() < armed.until)) {
      armed = {path: path, until: Date.now() + 4000};
      rearm();
      setTimeout(rearm, 4100);
      return;
    }
    armed = null;
    rearm();
    const row = b.closest('tr');
    const what = label + (row && row.cells[0] && row.cells[0] !== b.parentElement
      ? ' ' + row.cells[0].textContent : '');
    act(what, b.dataset.method, path);
  });

  // -- live panels: swapped in from a fresh copy of the page ------------------------------
  // One pass at a time; a refresh asked for during a pass runs after it (so what an action
  // did is always shown), and asks made meanwhile share that one.
  let running = null, queued = null;

  function refresh() {
    if (queued) return queued;
    const start = () => { running = pass().finally(() => { running = null; }); return running; };
    if (!running) return start();
    queued = running.then(() => { queued = null; return start(); });
    return queued;
  }

  async function pass() {
    const state = $('live-state');
    try {
      const r = await fetch(at('/'), {cache: 'no-store'});
      if (!r.ok) throw new Error('HTTP ' + r.status);
      const doc = new DOMParser().parseFromString(await r.text(), 'text/html');
      for (const el of document.querySelectorAll('.live[id]')) {
        const fresh = doc.getElementById(el.id);
        if (fresh && fresh.innerHTML !== el.innerHTML) el.innerHTML = fresh.innerHTML;
      }
      rearm();
      state.textContent = 'live · ' + new Date().toLocaleTimeString();
      state.className = '';
      count('refreshes');
    } catch (e) {
      state.textContent = 'not updated: ' + e.message;
      state.className = 'stale';
    }
  }

  // -- charts ---------------------------------------------------------------------------
  function node(parent, tag, attrs, text) {
    const n = document.createElementNS(NS, tag);
    for (const k in attrs) n.setAttribute(k, attrs[k]);
    if (text !== undefined) n.textContent = text;
    parent.appendChild(n);
    return n;
  }

  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  function fmt(v) {
    if (v >= 1e6) return +(v / 1e6).toFixed(1) + 'M';
    if (v >= 1e4) return +(v / 1e3).toFixed(0) + 'k';
    if (v >= 1e3) return +(v / 1e3).toFixed(1) + 'k';
    return String(+v.toFixed(v < 1 ? 2 : 1));
  }

  // series: [{name, values, dash}], values aligned with t (null: no value then)
  function chart(svg, t, series, unit, now, span, interval, empty) {
    const W = 560, H = 210, L = 52, R = 12, T = 26, B = 28, pw = W - L - R, ph = H - T - B;
    svg.textContent = '';
    const t0 = now - span;
    const x = (ts) => L + (ts - t0) / span * pw;
    let max = 0;
    for (const s of series) {
      s.values.forEach((v, i) => { if (v !== null && t[i] >= t0 && v > max) max = v; });
    }
    const top = niceMax(max);
    const y = (v) => T + ph - v / top * ph;
    for (let i = 0; i <= 4; i++) {
      const v = top * i / 4, yy = y(v);
      node(svg, 'line', {x1: L, x2: W - R, y1: yy, y2: yy, class: i ? 'grid' : 'axis'});
      node(svg, 'text', {x: L - 6, y: yy + 4, 'text-anchor': 'end'}, fmt(v));
    }
    node(svg, 'text', {x: 12, y: T + ph / 2, 'text-anchor': 'middle',
      transform: 'rotate(-90 12 ' + (T + ph / 2) + ')'}, unit);
    node(svg, 'line', {x1: L, x2: L, y1: T, y2: T + ph, class: 'axis'});
    const step = [2, 5, 10, 20, 30, 60].find((s) => span / s <= 6) || 60;
    for (let k = 0; k <= span; k += step) {
      const xx = x(now - k);
      node(svg, 'line', {x1: xx, x2: xx, y1: T + ph, y2: T + ph + 4, class: 'axis'});
      node(svg, 'text', {x: xx, y: H - 8, 'text-anchor': k === span ? 'start' : 'middle'},
        k === 0 ? 'now' : '−' + k + ' s');
    }
    let points = 0, lx = L;
    series.forEach((s, i) => {
      const colour = COLOURS[i % COLOURS.length];
      let d = '', prev = null;
      s.values.forEach((v, j) => {
        if (v === null || t[j] < t0) { prev = null; return; }
        const gap = prev !== null && t[j] - t[prev] > 2.5 * interval;
        d += (prev === null || gap ? 'M' : 'L') + x(t[j]).toFixed(1) + ',' + y(v).toFixed(1);
        prev = j;
        points++;
      });
      const attrs = {d: d || 'M0,0', class: 'line', stroke: colour};
      if (s.dash) attrs['stroke-dasharray'] = '5,3';
      node(svg, 'path', attrs).dataset.series = s.name;
      node(svg, 'rect', {x: lx, y: 6, width: 10, height: 10, fill: colour});
      node(svg, 'text', {x: lx + 14, y: 15, class: 'legend'}, s.name);
      lx += 24 + 6.2 * s.name.length;
    });
    if (!series.length) {
      node(svg, 'text', {x: L + pw / 2, y: T + ph / 2, 'text-anchor': 'middle'}, empty);
    }
    svg.dataset.points = String(points);
  }

  function named(columns) {
    return Object.keys(columns).map((k) => ({name: k, values: columns[k]}));
  }

  let drawing = false;

  async function drawCharts() {
    if (drawing) return;
    drawing = true;
    try {
      const chosen = Number($('window').value);
      const r = await fetch(at('/emulator/stats?seconds=' + chosen + '&top=6'), {cache: 'no-store'});
      if (!r.ok) return;
      const d = await r.json();
      // from the first second: the axis spans the history there is (10 s at least), up to
      // the window chosen
      const span = Math.min(chosen, Math.max(10, Math.ceil((d.now - d.started) / 10) * 10));
      const rates = named(d.topics_in);
      rates.push({name: 'delivered, all topics', values: d.messages_out, dash: true});
      chart($('chart-rates'), d.t, rates, 'messages/s', d.now, span, d.interval, '');
      chart($('chart-queues'), d.t, named(d.queue_depth), 'messages', d.now, span, d.interval,
        'no queues');
      const acks = d.ack_mean_ms.some((v) => v !== null)
        ? [{name: 'mean', values: d.ack_mean_ms}, {name: 'longest', values: d.ack_max_ms, dash: true}]
        : [];
      chart($('chart-acks'), d.t, acks, 'ms', d.now, span, d.interval,
        'no persisted acks in this window');
      chart($('chart-lag'), d.t, named(d.replication_lag), 'seconds', d.now, span, d.interval,
        'no replication destinations');
      count('charts');
    } catch (e) {
      /* the server went away: keep the last picture */
    } finally {
      drawing = false;
    }
  }

  // -- SOW query --------------------------------------------------------------------------
  function cell(tag, text) {
    const c = document.createElement(tag);
    c.textContent = text;
    return c;
  }

  async function runQuery(ev) {
    if (ev) ev.preventDefault();
    const sel = $('q-topic'), topic = sel.value, p = new URLSearchParams();
    const opt = sel.options[sel.selectedIndex];
    if (opt && opt.dataset.type && opt.dataset.type !== 'json') p.set('type', opt.dataset.type);
    if ($('q-filter').value) p.set('filter', $('q-filter').value);
    if ($('q-orderby').value) p.set('orderby', $('q-orderby').value);
    if ($('q-top').value) p.set('top_n', $('q-top').value);
    $('q-status').textContent = 'running…';
    $('q-status').className = '';
    const r = await fetch(at('/emulator/sow/' + encodeURIComponent(topic) + '?' + p));
    const doc = await r.json(), grid = $('grid');
    grid.textContent = '';
    if (!r.ok) {
      $('q-status').textContent = doc.error;
      $('q-status').className = 'err';
      return;
    }
    const cols = [];
    for (const rec of doc.records) {
      if (rec.data && typeof rec.data === 'object') {
        for (const k of Object.keys(rec.data)) if (!cols.includes(k)) cols.push(k);
      }
    }
    const head = document.createElement('tr');
    head.appendChild(cell('th', 'SowKey'));
    for (const c of cols) head.appendChild(cell('th', c));
    const typed = doc.records.some((rec) => rec.body !== undefined);
    if (typed) head.appendChild(cell('th', 'body'));
    grid.appendChild(head);
    for (const rec of doc.records) {
      const tr = document.createElement('tr');
      tr.appendChild(cell('td', rec.sow_key));
      for (const c of cols) {
        const v = rec.data ? rec.data[c] : '';
        tr.appendChild(cell('td', typeof v === 'object' ? JSON.stringify(v) : String(v ?? '')));
      }
      if (typed) tr.appendChild(cell('td', rec.body ?? ''));
      grid.appendChild(tr);
    }
    $('q-status').textContent = doc.count + ' of ' + doc.topic_matches + ' records';
    count('queryDone');
  }

  // -- faults -----------------------------------------------------------------------------
  function showFaultFields() {
    const kind = $('f-kind').value;
    for (const l of document.querySelectorAll('#fault-form label[data-kinds]')) {
      l.hidden = !l.dataset.kinds.split(' ').includes(kind);
    }
  }

  function addFault(ev) {
    ev.preventDefault();
    const kind = $('f-kind').value, doc = {kind: kind};
    if (kind === 'delay' || kind === 'drop') doc.client = $('f-client').value;
    if (kind === 'delay') doc.ms = Number($('f-ms').value);
    if (kind === 'drop' && $('f-every').value) doc.every = Number($('f-every').value);
    if (kind === 'hold_acks') doc.seconds = Number($('f-seconds').value);
    if (kind === 'refuse') doc.transport = $('f-transport').value;
    act('inject ' + kind, 'POST', '/emulator/faults', JSON.stringify(doc),
      {'Content-Type': 'application/json'});
  }

  // -- snapshot and restore ---------------------------------------------------------------
  let snapshot = null;

  async function takeSnapshot() {
    say('taking a snapshot …', true);
    try {
      const r = await fetch(at('/emulator/snapshot?gzip=1'), {cache: 'no-store'});
      if (!r.ok) {
        const doc = await r.json().catch(() => null);
        say('snapshot ' + (r.status === 401 || r.status === 403 ? 'refused' : 'failed') + ' (' +
          r.status + '): ' + (doc && doc.error || r.statusText), false);
      } else {
        snapshot = await r.blob();
        const link = $('snap-link');
        if (link.href) URL.revokeObjectURL(link.href);
        link.href = URL.createObjectURL(snapshot);
        link.download = document.title.split(' ')[0] + '-snapshot.tar.gz';
        link.textContent = 'download (' + (snapshot.size / 1024).toFixed(1) + ' KiB)';
        link.hidden = false;
        say('snapshot taken: ' + snapshot.size + ' bytes', true);
      }
    } catch (e) {
      say('snapshot failed: ' + e, false);
    }
    count('actions');
  }

  function restore() {
    const file = $('snap-file').files[0] || snapshot;
    if (!file) {
      say('restore: take a snapshot or choose an archive first', false);
      count('actions');
      return;
    }
    act('restore', 'POST', '/emulator/snapshot', file);
  }

  $('query').addEventListener('submit', runQuery);
  $('fault-form').addEventListener('submit', addFault);
  $('f-kind').addEventListener('change', showFaultFields);
  $('snap-take').addEventListener('click', takeSnapshot);
  $('snap-restore').addEventListener('click', restore);
  $('window').addEventListener('change', drawCharts);
  showFaultFields();
  rearm();
  drawCharts();
  setInterval(() => {
    if (!$('pause').checked) {
      refresh();
      drawCharts();
    }
  }, 1000);
})();
