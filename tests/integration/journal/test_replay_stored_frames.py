"""A plain bookmark replay framed from the journal's stored frames
(``server.delivery.replay_frames``) delivers exactly what the general path delivers.

The general path reads the log by records; a filter that matches everything (``1=1``) makes a
replay take it. Both replay the same log, which has what the fast path must handle or leave
to the general path: other topics between the replayed one's messages, correlation ids,
SowKeys and expirations on some messages (one correlation id that is not ASCII), and small
segments (64 KB), so the replay crosses segment files. The frames each subscriber reads must
be the same, header for header and body for body, in the same order, none missing.
"""

from __future__ import annotations

import pytest

from tests.support.raw import RawClient
from tests.support.servers import start_server

N = 1500  # about 350 KB of log: six segments


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    d = tmp_path_factory.mktemp("replay-stored")
    srv = start_server(f"""<AMPSConfig>
  <Name>stored</Name>
  <Transports><Transport><Name>json-tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
    <MessageType>json</MessageType><Protocol>amps</Protocol></Transport></Transports>
  <TransactionLog><JournalDirectory>{d}/journal</JournalDirectory><JournalSize>64KB</JournalSize>
    <Topic><Name>.*</Name><MessageType>json</MessageType></Topic></TransactionLog>
</AMPSConfig>""")
    pub = RawClient(srv.port)
    pub.logon("publisher")
    for i in range(N):
        header: dict = {"c": "p", "t": "replayed" if i % 3 else "other"}
        if i % 7 == 0:
            header["x"] = f"corr-{i}" if i != 700 else "corrélation"
        if i % 11 == 0:
            header["k"] = f"key-{i}"
        if i % 13 == 0:
            header["e"] = 3600 + i
        pub.send(header, b'{"i":%d,"pad":"%s"}' % (i, b"y" * (100 + i % 50)))
    pub.send({"c": "p", "t": "replayed", "a": "persisted", "s": 1}, b'{"i":"last"}')
    while True:  # everything is in the log (and persisted) before the replays
        got = pub.recv_frame()
        assert got is not None
        if got[0].get("a") == "persisted":
            break
    yield srv
    pub.close()
    srv.stop()


def _replay(srv, **extra) -> list[tuple[dict, bytes]]:
    c = RawClient(srv.port)
    c.logon("replayer")
    c.send({"c": "subscribe", "cid": "r", "sub_id": "r", "t": "replayed", "a": "completed",
            **extra})
    frames = []
    while True:
        got = c.recv_frame()
        assert got is not None, "the server closed the connection"
        header, body = got
        if header.get("c") == "ack":
            assert header.get("status") == "success", header
            break
        frames.append((header, body))
    c.close()
    return frames


@pytest.mark.parametrize("extra", [
    {"bookmark": "0"},
    {"bookmark": "0", "top_n": 333},
    {"bookmark": "0", "o": "top_n=10"},
])
def test_a_plain_replay_delivers_what_the_general_path_does(logged, extra):
    fast = _replay(logged, **extra)
    general = _replay(logged, filter="1=1", **extra)
    assert fast == general
    want = 333 if "top_n" in extra else 10 if "o" in extra else N - N // 3 + 1
    assert len(fast) == want
    ids = [body.split(b",")[0] for _, body in fast]
    assert len(set(ids)) == len(ids)  # no message twice


def test_the_replay_carries_every_header_the_log_has(logged):
    frames = _replay(logged, bookmark="0")
    headers = {k for h, _ in frames for k in h}
    assert {"c", "t", "sids", "bm", "x", "k", "e"} <= headers
    assert any(h.get("x") == "corrélation" for h, _ in frames)  # (left to the general path)
    assert all(h["t"] == "replayed" and h["sids"] == "r" for h, _ in frames)
    bms = [h["bm"] for h, _ in frames]
    assert bms == sorted(bms, key=lambda b: int(b.split("|")[1]))  # in log order


def test_a_replay_from_a_bookmark_in_the_middle(logged):
    every = _replay(logged, bookmark="0")
    middle = every[len(every) // 2][0]["bm"]
    fast = _replay(logged, bookmark=middle)
    assert fast == _replay(logged, bookmark=middle, filter="1=1")
    assert fast == every[len(every) // 2 + 1:]


def test_the_bookmark_processor_counts_the_same_either_way(logged):
    """What the Admin's ``bookmark`` processor counts of a replay (records read and their
    bytes, messages sent and theirs) does not depend on the path that framed it."""
    meter = logged.server.broker.processors.bookmark

    def counted(**extra) -> tuple[int, int, int, int]:
        before = logged.call(lambda: (meter.received, meter.received_bytes, meter.found,
                                      meter.found_bytes))
        _replay(logged, bookmark="0", **extra)
        after = logged.call(lambda: (meter.received, meter.received_bytes, meter.found,
                                     meter.found_bytes))
        return tuple(a - b for a, b in zip(after, before, strict=True))  # type: ignore[return-value]

    fast = counted()
    assert fast == counted(filter="1=1")
    assert fast[0] >= N and fast[2] == N - N // 3 + 1
