"""``_speedups.plain_run`` (the run of plain publishes to one topic among a read's frames)
against its pure-Python twin ``server.publish_run.plain_run_py``, which reads each header with
the plain-publish reader the unit tests of ``test_speedups`` hold to the general parser.

The frames mix what ends a run: another topic, an empty or missing topic, an ``s`` after
frames without one (and the reverse), a republished ``s``, acks other than ``persisted``, a
``persisted`` ack without ``s``, a cid or topic that is not UTF-8, headers that are not plain
publishes, damaged ones; the connection with and without a client name, and a mark ``last``.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from amps_emulator.server.messaging.publish_runs import plain_run_py
from tests.support.compiled import compiled
from tests.support.compiled import speedups as _speedups


@st.composite
def frames(draw: st.DrawFn) -> list[bytes]:
    out = []
    s = draw(st.integers(0, 5))
    for _ in range(draw(st.integers(0, 14))):
        kind = draw(st.integers(0, 19))
        body = draw(st.sampled_from([b"", b'{"id":1}', b"\xff\x00", b'{"x":"' + b"y" * 300 + b'"}']))
        if kind == 0:
            out.append(b'{"c":"sow","t":"a"}' + body)
            continue
        if kind == 1:
            out.append(draw(st.binary(max_size=30)))
            continue
        parts = [b'"c":"%s"' % draw(st.sampled_from([b"p", b"publish"]))]
        topic = draw(st.sampled_from([b"a", b"a", b"a", b"b", b"", None, b"\xff", b"\xc3\xa9"]))
        if topic is not None:
            parts.append(b'"t":"%s"' % topic)
        if draw(st.booleans()):
            s = s + 1 if draw(st.integers(0, 9)) else max(0, s - draw(st.integers(0, 2)))
            parts.append(b'"s":%d' % s if draw(st.booleans()) else b'"s":"%d"' % s)
        ack = draw(st.sampled_from([None, None, b"persisted", b"processed", b"completed"]))
        if ack is not None:
            parts.append(b'"a":"%s"' % ack)
        if draw(st.integers(0, 3)) == 0:
            parts.append(b'"cid":"%s"' % draw(st.sampled_from([b"1", b"c\xff", b"", b"\xc3\xa9"])))
        header = b"{" + b",".join(draw(st.permutations(parts))) + b"}"
        if draw(st.integers(0, 14)) == 0:  # damage
            i = draw(st.integers(0, len(header) - 1))
            header = header[:i] + draw(st.binary(max_size=2)) + header[i + 1:]
        out.append(header + body)
    return out


@compiled
@settings(max_examples=1500, deadline=None)
@given(frames(), st.integers(0, 3), st.booleans(), st.none() | st.integers(-1, 8))
def test_both_cut_the_same_run(payloads: list[bytes], start: int, named: bool,
                               last: int | None) -> None:
    assert _speedups is not None
    expected = plain_run_py(payloads, start, named, last)
    assert _speedups.plain_run(payloads, start, named, last) == expected
    if expected is not None:
        stop, topic, bodies, seqs, acked = expected
        assert start < stop <= len(payloads) and len(bodies) == stop - start
        assert seqs is None or len(seqs) == len(bodies)
        assert all(0 <= k < len(bodies) for k in acked)


def test_a_run_stops_where_the_rules_say() -> None:
    """The twin itself, on hand-made frames (the compiled one must agree: the test above)."""
    p = [b'{"c":"p","t":"a","s":1,"a":"persisted"}A', b'{"c":"p","t":"a","s":2}B',
         b'{"c":"p","t":"b","s":3}C', b'{"c":"p","t":"b","s":3}D', b'{"c":"p","t":"b"}E']
    assert plain_run_py(p, 0, True, None) == (2, "a", [b"A", b"B"], [1, 2], [0])
    assert plain_run_py(p, 0, True, 1) is None  # republished s: one by one
    assert plain_run_py(p, 2, True, 2) == (3, "b", [b"C"], [3], [])  # then a republish of 3
    assert plain_run_py(p, 3, True, 3) is None
    assert plain_run_py(p, 4, True, 3) == (5, "b", [b"E"], None, [])
    assert plain_run_py(p, 0, False, None) is None  # an s needs a client name
    assert plain_run_py(p, 5, True, None) is None
    q = [b'{"c":"p","t":"a"}X', b'{"c":"p","t":"a","s":9}Y', b'{"c":"p","t":"a","a":"persisted"}Z']
    assert plain_run_py(q, 0, True, None) == (1, "a", [b"X"], None, [])
    assert plain_run_py(q, 2, True, None) is None  # a persisted ack without s
