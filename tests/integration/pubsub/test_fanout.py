"""Fan-out to many subscribers through a running server, read from raw sockets: every
subscriber gets every message it matches, once, in publish order, in one frame per connection
whose ``sids`` list that connection's matching subscriptions in the order they subscribed;
subscribers sharing a filter text each still get their own answer; a connection with a select
list or the ``timestamp`` option beside plain subscriptions gets its own shapes."""

from __future__ import annotations

import json

from tests.support.raw import RawClient

N = 300
SYMS = ["IBM", "MSFT", "AAPL"]


def _subscriber(port: int, name: str, subs: list[dict]) -> RawClient:
    c = RawClient(port)
    c.logon(name)
    for sub in subs:
        c.send({"c": "subscribe", "t": "fan", "a": "processed", "cid": sub["sub_id"], **sub})
        header, _ = c.recv_frame()
        assert header.get("status") == "success", header
    return c


def _read(c: RawClient, until_id: int) -> list[tuple[dict, dict]]:
    """Deliveries up to the one of message ``until_id`` (one frame a message here)."""
    got = []
    while True:
        frame = c.recv_frame()
        assert frame is not None
        header, body = frame
        doc = json.loads(body)
        got.append((header, doc))
        if doc["id"] == until_id:
            return got


def test_every_subscriber_gets_its_messages_in_order_with_its_sids(server):
    port = server.port
    shared = [_subscriber(port, f"ibm-{i}", [{"sub_id": "s", "filter": "/sym = 'IBM'"}])
              for i in range(4)]
    others = [_subscriber(port, f"msft-{i}", [{"sub_id": "s", "filter": "/sym = 'MSFT'"}])
              for i in range(4)]
    mixed = _subscriber(port, "mixed", [{"sub_id": "x1", "filter": "/sym = 'IBM'"},
                                        {"sub_id": "x2"},
                                        {"sub_id": "x3", "filter": "/sym = 'MSFT'"},
                                        {"sub_id": "x4", "filter": "/sym = 'IBM'"}])
    shaped = _subscriber(port, "shaped", [{"sub_id": "p"},
                                          {"sub_id": "sel", "o": "select=[-/,+/id]"},
                                          {"sub_id": "ts", "o": "timestamp"}])
    pub = RawClient(port)
    pub.logon("publisher")
    frames = []
    for i in range(N):
        body = json.dumps({"id": i, "sym": SYMS[i % 3], "pad": "z" * 50}).encode()
        h = b'{"c":"p","t":"fan"}'
        frames.append((len(h) + len(body)).to_bytes(4, "big") + h + body)
    pub.send_raw(b"".join(frames[:N // 2]))  # (in bursts: many messages a turn)
    pub.send_raw(b"".join(frames[N // 2:]))
    last_ibm = max(i for i in range(N) if i % 3 == 0)
    last_msft = max(i for i in range(N) if i % 3 == 1)

    for c in shared:
        got = _read(c, last_ibm)
        assert [d["id"] for _, d in got] == list(range(0, N, 3))
        assert all(h == {"c": "p", "t": "fan", "sids": "s", "bm": h["bm"]} for h, _ in got)
    for c in others:
        assert [d["id"] for _, d in _read(c, last_msft)] == list(range(1, N, 3))
    got = _read(mixed, N - 1)
    want_sids = {"IBM": "x1,x2,x4", "MSFT": "x2,x3", "AAPL": "x2"}
    assert [(d["id"], h["sids"]) for h, d in got] == \
        [(i, want_sids[SYMS[i % 3]]) for i in range(N)]
    got = []
    while len(got) < 3 * N:
        header, body = shaped.recv_frame()
        got.append((header, json.loads(body)))
    for i in range(N):  # per message: the plain frame, the selected one, the stamped one
        (hp, dp), (hs, ds), (ht, dt) = got[3 * i:3 * i + 3]
        assert (hp["sids"], hs["sids"], ht["sids"]) == ("p", "sel", "ts")
        assert dp["id"] == dt["id"] == i and ds == {"id": i}
        assert "ts" in ht and "ts" not in hp
    for c in (*shared, *others, mixed, shaped, pub):
        c.close()
