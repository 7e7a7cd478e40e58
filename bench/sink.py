"""A do-nothing AMPS peer: the baseline the publish and fan-out benches compare the emulator against.

It frames what it reads (4-byte big-endian length, then the frame), answers ``logon`` and
``flush`` as a server must for the official client to go on, and discards everything else:
no header parsing beyond the command name, no routing, no storage. What a Python
asyncio+uvloop server costs before it does any work.

``--fanout``: also a do-nothing fan-out. A ``subscribe`` (literal topic, no filter, no
options) is acknowledged and remembered; each publish goes to every subscription of its topic
as a ``p`` frame (``{"c":"p","t":TOPIC,"sids":SUB_ID}`` + the body), built per subscriber,
queued on the subscriber's connection and written once per read (so a burst of publishes
costs each subscriber one ``write``). No filter, no journal, no bookmark.

    python bench/sink.py [--listen 127.0.0.1:0] [--fanout]    # prints "ready: tcp://HOST:PORT/amps/json"
"""

from __future__ import annotations

import argparse
import asyncio
import json
import struct

_LEN = struct.Struct(">I")


def _ack(header: dict, ack_type: str, **extra: object) -> bytes:
    h = {"c": "ack", "cid": header.get("cid"), "a": ack_type, "status": "success", **extra}
    data = json.dumps(h, separators=(",", ":")).encode()
    return _LEN.pack(len(data)) + data


class Sink(asyncio.Protocol):
    def connection_made(self, transport):  # uvloop's TCP transport (no asyncio.Transport subclass)
        self.transport = transport
        self.buf = bytearray()

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos, end = 0, len(buf)
        while end - pos >= 4:
            (n,) = _LEN.unpack_from(buf, pos)
            if end - pos - 4 < n:
                break
            start = pos + 4
            pos = start + n
            if buf[start + 6:start + 7] == b"p":  # {"c":"p",... : the publish fast path
                continue
            self.command(bytes(buf[start:pos]))
        del buf[:pos]

    def command(self, head: bytes) -> None:
        if b'"c":"logon"' in head:
            h = json.loads(head)
            self.transport.write(_ack(h, "processed", version="5.3.4.0",
                                      client_name=h.get("client_name")))
        elif b'"c":"flush"' in head:
            h = json.loads(head)
            self.transport.write(_ack(h, h.get("a") or "processed"))


#: topic -> [(connection, header prefix up to and with the sids)] of the fan-out sink
_SUBSCRIBERS: dict[bytes, list[tuple[FanoutSink, bytes]]] = {}
#: connections with output queued during the current read
_DIRTY: list[FanoutSink] = []


class FanoutSink(Sink):
    def connection_made(self, transport):
        super().connection_made(transport)
        self.out: list[bytes] = []

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos, end = 0, len(buf)
        dirty = _DIRTY
        subscribers = _SUBSCRIBERS
        while end - pos >= 4:
            (n,) = _LEN.unpack_from(buf, pos)
            if end - pos - 4 < n:
                break
            start = pos + 4
            pos = start + n
            if buf[start + 6:start + 7] == b"p":  # {"c":"p","t":"TOPIC"...}BODY
                t = start + 14
                q = buf.index(b'"', t)
                subs = subscribers.get(bytes(buf[t:q]))
                if subs:
                    body = bytes(buf[buf.index(b"}", q) + 1:pos])
                    for conn, head in subs:
                        out = conn.out
                        if not out:
                            dirty.append(conn)
                        out.append(_LEN.pack(len(head) + len(body)) + head + body)
                continue
            self.command(bytes(buf[start:pos]))
        del buf[:pos]
        for conn in dirty:
            out = conn.out
            if out:
                conn.out = []
                conn.transport.write(b"".join(out))
        dirty.clear()

    def command(self, head: bytes) -> None:
        if b'"c":"subscribe"' in head:
            h = json.loads(head)
            sid = h.get("sub_id") or h.get("cid")
            prefix = json.dumps({"c": "p", "t": h["t"], "sids": sid},
                                separators=(",", ":")).encode()
            _SUBSCRIBERS.setdefault(h["t"].encode(), []).append((self, prefix))
            self.transport.write(_ack(h, "processed", sub_id=sid))
        else:
            super().command(head)

    def connection_lost(self, exc: Exception | None) -> None:
        for subs in _SUBSCRIBERS.values():
            subs[:] = [s for s in subs if s[0] is not self]


async def serve(host: str, port: int, fanout: bool) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(FanoutSink if fanout else Sink, host, port)
    h, p = server.sockets[0].getsockname()[:2]
    print(f"ready: tcp://{h}:{p}/amps/json", flush=True)
    await server.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--listen", default="127.0.0.1:0")
    ap.add_argument("--fanout", action="store_true", help="also forward publishes to subscribers")
    args = ap.parse_args()
    host, _, port = args.listen.rpartition(":")
    try:
        import uvloop
        uvloop.run(serve(host, int(port), args.fanout))
    except ImportError:
        asyncio.run(serve(host, int(port), args.fanout))


if __name__ == "__main__":
    main()
