"""Benchmark: decode + evaluate one content filter, per AMPS message type, JSON as baseline.

The same order (symbol, quantity, price, side, trader and a few more fields) is written in
each type; every type is decoded by its codec (amps_emulator.protocol.msgtypes) and the same
compiled filter runs on the tree.  Prints msgs/s per type, the ratio to JSON, and the machine.

    python bench/bench_msgtypes.py [--seconds S]
"""

from __future__ import annotations

import argparse
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import msgspec  # noqa: E402

from amps_emulator.protocol.filter import compile_filter  # noqa: E402
from amps_emulator.protocol.msgtypes import MessageTypeDecl, build_registry  # noqa: E402
from amps_emulator.protocol.msgtypes.composite import join_parts  # noqa: E402
from bench._support import machine  # noqa: E402

DOC = {"symbol": "IBM", "qty": 500, "side": "B", "price": 123.45, "trader": "john.smith",
       "account": "ACC-0001", "venue": "XNYS", "currency": "USD", "status": "new",
       "order_type": "limit", "tif": "day", "id": 1234567}
PROTO = """syntax = "proto3";
package bench;
message Order { string symbol = 1; int64 qty = 2; string side = 3; double price = 4;
  string trader = 5; string account = 6; string venue = 7; string currency = 8;
  string status = 9; string order_type = 10; string tif = 11; int64 id = 12; }
"""
FILTER = "{p}/symbol = 'IBM' AND {p}/qty > 100 AND {p}/side IN ('B', 'S') AND {p}/price BETWEEN 10 AND 200"


def bodies(reg) -> dict[str, tuple[bytes, str]]:
    nv = "".join(f"{k}={v}\x01" for k, v in DOC.items()).encode()
    xml = ("<order>" + "".join(f"<{k}>{v}</{k}>" for k, v in DOC.items()) + "</order>").encode()
    st = struct.pack("<8sid", b"IBM", 500, 123.45) + b"B"
    return {
        "json": (msgspec.json.encode(DOC), ""),
        "nvfix": (nv, ""),
        "fix": (b"55=IBM\x0138=500\x0154=B\x0144=123.45\x0149=john.smith\x011=ACC-0001\x01"
                b"100=XNYS\x0115=USD\x0139=0\x0140=2\x0159=0\x0111=1234567\x01", ""),
        "xml": (xml, "/order"),
        "msgpack": (msgspec.msgpack.encode(DOC), ""),
        "bflat": (reg.codec("bflat").encode(DOC), ""),
        "bson": (reg.codec("bson").encode(DOC), ""),
        "protobuf (proto3)": (reg.codec("protobuf (proto3)").encode(DOC), ""),
        "composite-local (json+binary)": (join_parts([msgspec.json.encode(DOC), b"\0" * 400]),
                                          "/0"),
        "composite-global (json+binary)": (join_parts([msgspec.json.encode(DOC), b"\0" * 400]),
                                           ""),
        "struct": (st, ""),
    }


def run(decode, f, body: bytes, seconds: float) -> float:
    n = 0
    batch = 2000
    t0 = time.perf_counter()
    deadline = t0 + seconds
    while True:
        for _ in range(batch):
            f(decode(body))
        n += batch
        now = time.perf_counter()
        if now >= deadline:
            return n / (now - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=1.0, help="per type (default 1)")
    args = ap.parse_args()
    proto_dir = tempfile.mkdtemp(prefix="bench-msgtypes-")
    Path(proto_dir, "order.proto").write_text(PROTO)
    reg = build_registry([
        MessageTypeDecl("composite-local (json+binary)", module="composite-local",
                        parts=("json", "binary")),
        MessageTypeDecl("composite-global (json+binary)", module="composite-global",
                        parts=("json", "binary")),
        MessageTypeDecl("protobuf (proto3)", module="protobuf", proto_paths=(proto_dir,),
                        proto_file="order.proto", proto_type="bench.Order"),
        MessageTypeDecl("struct", module="struct",
                        fields=("/symbol = 8s", "/qty = i", "/price = d", "/side = c")),
    ])
    print(f"machine: {machine()}")
    print(f"filter: {FILTER.format(p='')}")
    base = None
    for mt, (body, prefix) in bodies(reg).items():
        codec = reg.codec(mt)
        f = compile_filter(FILTER.format(p=prefix))
        if mt == "fix":
            f = compile_filter("/55 = 'IBM' AND /38 > 100 AND /54 IN ('B', 'S') "
                               "AND /44 BETWEEN 10 AND 200")
        assert f(codec.decode(body)), mt
        rate = run(codec.decode, f, body, args.seconds)
        base = base or rate
        print(f"{mt:32s} {len(body):5d} B  {rate:12,.0f} msgs/s  {rate / base:5.2f}x json")


if __name__ == "__main__":
    main()
