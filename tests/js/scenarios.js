// Scenarios for the official AMPS JavaScript client (npm `amps`) against the emulator's
// WebSocket transport. Run by tests/integration/transports/test_websocket.py:
//
//     node scenarios.js <scenario> <uri> [<uri of a second client>]
//
// Each scenario prints one JSON line with what it observed and exits 0; an error prints
// {"error": ...} and exits 1. A scenario that needs the server to act prints a line
// `ACTION <what>` and waits for the test to write `done` on its standard input.
'use strict';

const amps = require('amps');
const readline = require('readline');

const [scenario, uri] = process.argv.slice(2);
const TIMEOUT_MS = Number(process.env.SCENARIO_TIMEOUT_MS || 20000);

const stdin = readline.createInterface({ input: process.stdin });
const stdinLines = [];
let stdinWaiter = null;
stdin.on('line', (line) => {
  if (stdinWaiter) { const w = stdinWaiter; stdinWaiter = null; w(line); } else stdinLines.push(line);
});

// Ask the test to do something on the server side, and wait until it has.
function serverAction(what) {
  process.stdout.write(`ACTION ${what}\n`);
  return new Promise((resolve) => {
    if (stdinLines.length) resolve(stdinLines.shift()); else stdinWaiter = resolve;
  });
}

// Resolve when `pred()` holds; polled on a short timer, bounded by the scenario timeout.
function until(pred, what) {
  return new Promise((resolve, reject) => {
    const started = Date.now();
    const tick = () => {
      let ok = false;
      try { ok = pred(); } catch (e) { reject(e); return; }
      if (ok) { resolve(); return; }
      if (Date.now() - started > TIMEOUT_MS) { reject(new Error(`timed out waiting for ${what}`)); return; }
      setTimeout(tick, 5);
    };
    tick();
  });
}

let clientCount = 0;
const clients = [];

async function connect(configure) {
  const c = new amps.Client(`js-${scenario}-${++clientCount}`);
  c.errorHandler((err) => { errors.push(String(err && err.message || err)); });
  if (configure) configure(c);
  clients.push(c);
  await c.connect(uri);
  return c;
}

const errors = [];

const body = (m) => m.data;

const scenarios = {
  // NVFIX over an any-type transport (URI /amps/nvfix): the client's FIX/NVFIX type helper
  // writes the bodies from objects and reads them back; a filter on a typed field, a keyed
  // SOW (latest per key), and the raw bytes of what was stored.
  async nvfix_pubsub_sow() {
    const sub = await connect();
    const pub = await connect();
    const got = [];
    await sub.subscribe((m) => got.push(m.data), 'ws-typed', '/qty > 10');
    pub.publish('ws-typed', { id: 1, qty: 5 });
    pub.publish('ws-typed', { id: 2, qty: 20 });
    pub.publish('ws-typed', { id: 2, qty: 30 });
    pub.publish('ws-typed', 'id=3\x01qty=11\x01');  // an NVFIX string as it is
    await pub.flush();
    await sub.flush();
    await until(() => got.length >= 3, 'three deliveries');
    const records = [];
    await new Promise((resolve, reject) => {
      pub.sow((m) => {
        const cmd = m.header.command();
        if (cmd === 'sow') records.push(m.data);
        else if (cmd === 'group_end') resolve();
      }, 'ws-typed', '/qty >= 11', { orderBy: '/qty DESC' }).catch(reject);
    });
    return { got, records };
  },

  // XML: no built-in helper in the client; registering one that passes strings through is
  // how the client's documentation has it. Attribute and element filters.
  async xml_pubsub_sow() {
    amps.TypeHelper.helper('xml', {
      serialize: (d) => [String(d)],
      deserialize: (d) => (typeof d === 'string' ? d : Buffer.from(d).toString('utf8')),
    });
    const sub = await connect();
    const pub = await connect();
    const got = [];
    await sub.subscribe((m) => got.push(m.data), 'ws-typed', "/Order/@update = 'full'");
    pub.publish('ws-typed', '<Order update="delta"><id>1</id></Order>');
    pub.publish('ws-typed', '<Order update="full"><id>2</id></Order>');
    await pub.flush();
    await sub.flush();
    await until(() => got.length >= 1, 'one delivery');
    const records = [];
    await new Promise((resolve, reject) => {
      pub.sow((m) => {
        if (m.header.command() === 'sow') records.push(m.data);
        else if (m.header.command() === 'group_end') resolve();
      }, 'ws-typed', '/Order/id = 2').catch(reject);
    });
    return { got, records };
  },

  // Logon with a heartbeat: the server beats on an idle connection, the client stays up.
  async logon_heartbeat() {
    let heartbeats = 0;
    const c = await connect((c) => {
      c.heartbeat(1);
      c.transportFilter((data, outgoing) => {
        if (!outgoing && typeof data.data === 'string' && data.data.startsWith('{"c":"heartbeat"')) heartbeats++;
      });
    });
    await until(() => heartbeats >= 1, 'a server heartbeat');
    await c.flush();
    return { version: c.serverVersion(), heartbeats, connected: c.isConnected() };
  },

  // Publish/subscribe with a content filter; flush makes the deliveries arrive first.
  async pubsub_filter() {
    const sub = await connect();
    const pub = await connect();
    const got = [];
    await sub.subscribe((m) => got.push({ topic: m.header.topic(), data: body(m) }), 'ws-orders', '/qty > 10');
    for (const qty of [5, 20, 11, 10]) pub.publish('ws-orders', { qty });
    await pub.flush();
    await sub.flush();
    return { got };
  },

  // flush: everything published before it has been processed (here: is in the SOW).
  async flush_then_sow() {
    const c = await connect();
    for (let i = 0; i < 25; i++) c.publish('ws-sow', { id: i, qty: i });
    await c.flush();
    const records = [];
    let groups = 0;
    await new Promise((resolve, reject) => {
      c.sow((m) => {
        const cmd = m.header.command();
        if (cmd === 'group_begin') groups++;
        else if (cmd === 'sow') records.push({ key: m.header.sowKey(), data: body(m) });
        else if (cmd === 'group_end') resolve();
      }, 'ws-sow', '/qty >= 5', { batchSize: 4 }).catch(reject);
    });
    return { groups, count: records.length, ids: records.map((r) => r.data.id).sort((a, b) => a - b),
             keyed: records.every((r) => typeof r.key === 'string' && r.key.length > 0) };
  },

  // sow_and_subscribe with oof: the initial records, then an update leaving the filter.
  async sow_and_subscribe_oof() {
    const c = await connect();
    c.publish('ws-sow', { id: 1, qty: 50 });
    c.publish('ws-sow', { id: 2, qty: 60 });
    c.publish('ws-sow', { id: 3, qty: 1 });
    await c.flush();
    const seen = [];
    await c.sowAndSubscribe((m) => {
      seen.push({ c: m.header.command(), data: body(m), reason: m.header.reason() });
    }, 'ws-sow', '/qty > 10', { options: 'oof' });
    await until(() => seen.some((s) => s.c === 'group_end'), 'the end of the sow part');
    c.publish('ws-sow', { id: 2, qty: 5 });
    c.publish('ws-sow', { id: 3, qty: 30 });
    await c.flush();
    await until(() => seen.filter((s) => s.c === 'oof' || s.c === 'p').length >= 2, 'oof and p');
    return { seen };
  },

  // sow_delete answers with a stats ack the client turns into the result.
  async sow_delete_stats() {
    const c = await connect();
    for (let i = 0; i < 6; i++) c.publish('ws-sow', { id: i, qty: i });
    await c.flush();
    const res = await c.sowDelete('ws-sow', '/qty >= 2');
    const h = res.header;
    return { ack: h.ackType(), status: h.status(), deleted: h.recordsDeleted(), matches: h.matches(),
             topicMatches: h.topicMatches() };
  },

  // delta_subscribe: the second publish to a key arrives as the changed fields only.
  async delta_subscribe() {
    const c = await connect();
    c.publish('ws-sow', { id: 7, a: 1, b: 2 });
    await c.flush();
    const got = [];
    await c.deltaSubscribe((m) => got.push(body(m)), 'ws-sow');
    c.publish('ws-sow', { id: 7, a: 1, b: 3 });
    await c.flush();
    await until(() => got.length >= 1, 'the delta');
    return { got };
  },

  // A bookmark subscription with a bookmark store: replay from the epoch, then resume after
  // what was discarded when subscribing again with the store's most recent bookmark.
  async bookmark_replay() {
    const pub = await connect();
    for (let i = 0; i < 3; i++) pub.publish('ws-log', { n: i });
    await pub.flush();
    const store = new amps.MemoryBookmarkStore();
    const c = await connect((c) => c.bookmarkStore(store));
    const first = [];
    const subId = 'bm-sub';
    await c.subscribe((m) => { first.push(body(m).n); store.discard(m); }, 'ws-log', undefined,
                      { bookmark: '0', subId });
    await until(() => first.length >= 3, 'the replay');
    await c.unsubscribe(subId);
    for (let i = 3; i < 5; i++) pub.publish('ws-log', { n: i });
    await pub.flush();
    const resumeFrom = String(store.mostRecent(subId));
    const second = [];
    await c.subscribe((m) => { second.push(body(m).n); store.discard(m); }, 'ws-log', undefined,
                      { bookmark: resumeFrom, subId });
    await until(() => second.length >= 2, 'the resumed replay');
    await c.flush();
    return { first, second, resumeFrom };
  },

  // A queue consumer acking in batches (auto ack): every message is delivered once and the
  // acks reach the server, so a later consumer finds the queue empty.
  async queue_ack_batch() {
    return queueScenario(5);
  },

  // As above with a batch larger than the subscription's backlog: the client must learn the
  // backlog from the subscription's ack (max_backlog) or it would wait for ever.
  async queue_max_backlog() {
    return queueScenario(50);
  },

  // A publish store: every publish is acknowledged as persisted and leaves the store.
  async publish_store() {
    const store = new amps.MemoryPublishStore();
    const c = await connect((c) => c.publishStore(store));
    for (let i = 0; i < 40; i++) c.publish('ws-log', { i });
    await until(() => store.unpersistedCount() === 0, 'every publish persisted');
    return { unpersisted: store.unpersistedCount(), errors };
  },

  // The server drops the connection; the client reconnects, logs on and resubscribes.
  async reconnect() {
    const states = [];
    const c = amps.Client.createMemoryBacked(`js-${scenario}-reconnecting`);
    c.errorHandler(() => {});
    c.reconnectDelay(50);
    c.addConnectionStateListener((s) => states.push(s));
    clients.push(c);
    await c.connect(uri);
    const got = [];
    await c.subscribe((m) => got.push(body(m).n), 'ws-live');
    const logons = () => states.filter((s) => s === amps.Client.ConnectionStateListener.LoggedOn).length;
    await serverAction('drop');
    await until(() => logons() >= 2 && c.isConnected(), 'the second logon');
    await until(() => states.includes(amps.Client.ConnectionStateListener.Resubscribed), 'resubscribe');
    await c.flush();
    const pub = await connect();
    pub.publish('ws-live', { n: 1 });
    await pub.flush();
    await until(() => got.length >= 1, 'a delivery after the reconnect');
    return { got, logons: logons() };
  },

  // Round trip over wss:// (the test trusts its throwaway certificate via NODE_EXTRA_CA_CERTS).
  async secure_pubsub() {
    const sub = await connect();
    const got = [];
    await sub.subscribe((m) => got.push(body(m)), 'ws-orders');
    sub.publish('ws-orders', { secure: true });
    await sub.flush();
    await until(() => got.length >= 1, 'the delivery');
    return { got, version: sub.serverVersion() };
  },
};

// Logon with credentials in the URI (the transport checks them, issue 22): a wrong password is
// refused (connect rejects with the server's reason), the right one logs on; an exact topic the
// user may not read is refused with "not entitled".
scenarios.logon_credentials = async function logonCredentials() {
  const as = (user, pw) => uri.replace('://', `://${user}:${pw}@`);
  let refused = null;
  const bad = new amps.Client(`js-${scenario}-refused`);
  try {
    await bad.connect(as('alice', 'wrong'));
  } catch (e) {
    // the client rejects with the server's failed ack as the error's message
    const m = e && e.message;
    refused = m && typeof m === 'object' ? `${m.status}: ${m.reason}` : String(m || e);
  }
  const good = new amps.Client(`js-${scenario}-accepted`);
  good.errorHandler((err) => { errors.push(String(err && err.message || err)); });
  clients.push(good);
  await good.connect(as('alice', 'pw'));
  let denied = null;
  try {
    await good.subscribe(() => {}, 'secret');
  } catch (e) {
    denied = String(e && e.reason || e && e.message || e);
  }
  await good.flush();
  return { refused, connected: good.isConnected(), denied };
};

// A reader's filter under a read filter, a writer's under a write filter (the entitlements
// of tests/integration/security/test_filter_injection.py): FILTER is the client's filter, on
// the SOW topic `test`; LAST is the id of the last record published, which a bookmark
// replay waits for. Each command reports the ids it got and the reason it failed, if it did.
scenarios.filter_injection = async function filterInjection() {
  const flt = process.env.FILTER;
  const last = Number(process.env.LAST);
  const c = await connect();
  const reasonOf = (e) => {
    const m = e && e.message;
    if (e && e.reason) return String(e.reason);
    return m && typeof m === 'object' ? String(m.reason) : String(m || e);
  };
  const outcome = async (run) => {
    const got = [];
    try {
      await run(got);
      return { got };
    } catch (e) {
      return { got, error: reasonOf(e) };
    }
  };
  const query = (method) => (got) => new Promise((resolve, reject) => {
    c[method]((m) => {
      const cmd = m.header.command();
      if (cmd === 'sow') got.push(m.data.id);
      else if (cmd === 'group_end') resolve();
    }, 'test', flt).catch(reject);
  });
  const sow = await outcome(query('sow'));
  const sowAndSubscribe = await outcome(query('sowAndSubscribe'));
  const replay = await outcome(async (got) => {
    await c.execute(new amps.Command('subscribe').topic('test').filter(flt).bookmark('0'),
                    (m) => { if (m.header.command() === 'p') got.push(m.data.id); });  // (a delivery: "p")
    await until(() => got.includes(last), 'the replay of the last record');
  });
  const sowDelete = await outcome(async (got) => {
    const ack = await c.sowDelete('test', flt);
    if (ack.header.status() === 'failure') throw { reason: ack.header.reason() };
  });
  return { sow, sowAndSubscribe, replay, sowDelete };
};

async function queueScenario(batch) {
  const pub = await connect();
  for (let i = 0; i < 30; i++) pub.publish('ws-work', { i });
  await pub.flush();
  // no ack timer: only the batch size (or the backlog the server reports) sends acks
  const c = await connect((c) => { c.autoAck(true); c.ackTimeout(0); c.ackBatchSize(batch); });
  const got = [];
  const leases = new Set();
  await c.subscribe((m) => { got.push(body(m).i); leases.add(typeof m.header.leasePeriod()); }, 'ws-work',
                    undefined, { options: 'max_backlog=10' });
  await until(() => got.length >= 30, 'all 30 queue messages');
  await c.flush(); // sends the acks still batched, then waits for the server's ack
  await c.disconnect();
  const later = await connect();
  const after = [];
  await later.subscribe((m) => after.push(body(m).i), 'ws-work');
  await later.flush();
  return { count: got.length, distinct: new Set(got).size, leases: [...leases], redelivered: after.length };
}

async function main() {
  const run = scenarios[scenario];
  if (!run) throw new Error(`unknown scenario ${scenario}`);
  const timer = setTimeout(() => {
    process.stdout.write(JSON.stringify({ error: `scenario ${scenario} timed out`, errors }) + '\n');
    process.exit(1);
  }, TIMEOUT_MS + 5000);
  const result = await run();
  clearTimeout(timer);
  result.errors = errors;
  process.stdout.write(JSON.stringify(result) + '\n');
  for (const c of clients) {
    try { await c.disconnect(); } catch (e) { /* already gone */ }
  }
}

main().then(() => process.exit(0), (err) => {
  process.stdout.write(JSON.stringify({ error: String(err && err.stack || err), errors }) + '\n');
  process.exit(1);
});
