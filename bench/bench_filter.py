"""Benchmark: AMPS content filters on a decoded ~1 KB JSON message.

Prints (1) evaluations/s of a 5-predicate filter on a decoded message, (2) decode (with
msgspec.json.decode) + evaluate per second, (3) parse + compile time per filter, (4) a
one-decode / many-subscriptions figure, and the machine it ran on.

    python bench/bench_filter.py [--seconds S]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import msgspec  # noqa: E402

from amps_emulator.protocol.filter import compile_filter, matching  # noqa: E402
from amps_emulator.protocol.filter.compiler import _compile_cached  # noqa: E402

FILTER = ("/symbol = 'IBM' AND /qty > 100 AND /side IN ('B', 'S') "
          "AND /price BETWEEN 10 AND 200 AND /trader LIKE '^jo'")
# the same, but the LIKE needs the regex engine ('^jo' alone becomes str.startswith)
FILTER_RX = FILTER.replace("'^jo'", "'^jo.n\\.'")


def make_message() -> bytes:
    doc = {
        "id": 1234567, "symbol": "IBM", "qty": 500, "side": "B", "price": 123.45,
        "trader": "john.smith", "account": "ACC-0001", "venue": "XNYS", "currency": "USD",
        "status": "new", "order_type": "limit", "tif": "day", "created": "20240102T123500Z",
        "notes": "entered on behalf of a client " * 4,
        "tags": ["equity", "us", "large-cap", "tech"],
        "client": {"name": "Example Capital", "country": "US", "tier": "gold",
                   "contacts": [{"name": "A. Person", "phone": "555-0100"},
                                {"name": "B. Person", "phone": "555-0101"}]},
        "fills": [{"qty": 100, "px": 123.4}, {"qty": 150, "px": 123.45},
                  {"qty": 250, "px": 123.5}],
        "risk": {"limit": 1000000, "used": 61725.0, "desk": "cash-equities"},
    }
    body = msgspec.json.encode(doc)
    pad = 1024 - len(body) - len(',"pad":""')
    if pad > 0:
        doc["pad"] = "x" * pad
        body = msgspec.json.encode(doc)
    return body


def cpu_model() -> str:
    """platform.processor(), or the model name from /proc/cpuinfo where that is empty."""
    name = platform.processor()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return f"{line.split(':', 1)[1].strip()} [platform.processor()={name!r}]"
    except OSError:
        pass
    return name or platform.machine()


def rate(fn, seconds: float) -> float:
    """Calls per second of ``fn(n)`` (which performs n operations), best of 3 runs."""
    n = 10_000
    while True:  # calibrate
        t0 = time.perf_counter()
        fn(n)
        dt = time.perf_counter() - t0
        if dt > 0.2:
            break
        n *= 2
    per_run = max(int(n * (seconds / 3) / dt), 1000)
    best = 0.0
    for _ in range(3):
        t0 = time.perf_counter()
        fn(per_run)
        best = max(best, per_run / (time.perf_counter() - t0))
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3.0, help="time per measurement")
    args = ap.parse_args()

    body = make_message()
    decode = msgspec.json.decode
    doc = decode(body)
    f = compile_filter(FILTER)
    assert f(doc) is True, "benchmark filter must match (all five predicates evaluated)"
    f_rx = compile_filter(FILTER_RX)
    assert f_rx(doc) is True and "_krs" in f_rx.source  # really uses the regex

    def evaluate_rx(n: int) -> None:
        for _ in range(n):
            f_rx(doc)

    def evaluate(n: int) -> None:
        for _ in range(n):
            f(doc)

    def decode_evaluate(n: int) -> None:
        for _ in range(n):
            f(decode(body))

    def loop_overhead(n: int) -> None:
        for _ in range(n):
            pass

    # many subscriptions on one message: the body is decoded once
    subs = [compile_filter(f"/qty > {i} AND /symbol = 'IBM'") for i in range(0, 1000, 10)]

    def fan_out(n: int) -> None:
        for _ in range(n):
            matching(subs, body)

    eval_rate = rate(evaluate, args.seconds)
    eval_rx_rate = rate(evaluate_rx, args.seconds / 2)
    de_rate = rate(decode_evaluate, args.seconds)
    fan_rate = rate(fan_out, args.seconds / 2)

    # parse + compile per filter (cache bypassed: distinct texts, cache cleared)
    texts = [FILTER.replace("100", str(1000 + i)) for i in range(300)]
    _compile_cached.cache_clear()
    t0 = time.perf_counter()
    for t in texts:
        compile_filter(t)
    compile_us = (time.perf_counter() - t0) / len(texts) * 1e6
    t0 = time.perf_counter()
    for _ in range(100_000):
        compile_filter(FILTER)
    cached_us = (time.perf_counter() - t0) / 100_000 * 1e6

    print(f"machine       : {cpu_model()} ({platform.machine()}), {os.cpu_count()} CPUs, "
          f"{platform.python_implementation()} {platform.python_version()}, "
          f"{platform.system()} {platform.release()}")
    print(f"message       : {len(body)} bytes JSON, {len(doc)} top-level fields")
    print(f"filter        : {FILTER}")
    print(f"evaluate      : {eval_rate:,.0f} evaluations/s per core "
          f"({1e9 / eval_rate:.0f} ns each; target >= 1,000,000)")
    print(f"  regex LIKE  : {eval_rx_rate:,.0f} evaluations/s per core with LIKE "
          f"'^jo.n\\.' ({1e9 / eval_rx_rate:.0f} ns each)")
    print(f"decode + eval : {de_rate:,.0f} messages/s per core "
          f"({1e9 / de_rate:.0f} ns each; target >= 300,000)")
    print(f"fan-out       : 1 decode + {len(subs)} filters: {fan_rate:,.0f} messages/s "
          f"({fan_rate * len(subs):,.0f} filter evaluations/s)")
    print(f"compile       : {compile_us:.0f} us per filter (parse + codegen + compile), "
          f"{cached_us * 1000:.0f} ns cached lookup")


if __name__ == "__main__":
    main()
