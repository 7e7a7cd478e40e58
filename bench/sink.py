"""A do-nothing AMPS peer: the baseline publish benches compare the emulator against.

It frames what it reads (4-byte big-endian length, then the frame), answers ``logon`` and
``flush`` as a server must for the official client to go on, and discards everything else:
no header parsing beyond the command name, no routing, no storage. What a Python
asyncio+uvloop server costs before it does any work.

    python bench/sink.py [--listen 127.0.0.1:0]    # prints "ready: tcp://HOST:PORT/amps/json"
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
            head = bytes(buf[start:pos])
            if b'"c":"logon"' in head:
                h = json.loads(head)
                self.transport.write(_ack(h, "processed", version="5.3.4.0",
                                          client_name=h.get("client_name")))
            elif b'"c":"flush"' in head:
                h = json.loads(head)
                self.transport.write(_ack(h, h.get("a") or "processed"))
        del buf[:pos]


async def serve(host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Sink, host, port)
    h, p = server.sockets[0].getsockname()[:2]
    print(f"ready: tcp://{h}:{p}/amps/json", flush=True)
    await server.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--listen", default="127.0.0.1:0")
    host, _, port = ap.parse_args().listen.rpartition(":")
    try:
        import uvloop
        uvloop.run(serve(host, int(port)))
    except ImportError:
        asyncio.run(serve(host, int(port)))


if __name__ == "__main__":
    main()
