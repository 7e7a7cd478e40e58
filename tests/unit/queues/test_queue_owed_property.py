"""Random runs of a queue with barriers, filters that cannot always tell (``eligible``
answers None) and deliveries that wait for their records: the count of subscriptions owed a
barrier stays exact, no subscription gets a barrier twice or out of order, and the leases
that ended unsent are remembered only for messages still in the queue."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from amps_emulator.queues import Deliver, QueueEngine, QueueSpec
from amps_emulator.queues.codes import DONE


class Filter:
    """Takes positions whose remainder by ``mod`` is not 1, once ``known``; None before."""

    def __init__(self, known: bool, mod: int) -> None:
        self.known, self.mod = known, mod

    def __call__(self, p: int) -> bool | None:
        return p % self.mod != 1 if self.known else None


subs = st.sampled_from("abc")
ops = st.lists(st.one_of(
    st.tuples(st.just("pub"), st.booleans()),
    st.tuples(st.just("sub"), subs, st.none() | st.tuples(st.booleans(), st.integers(1, 3))),
    st.tuples(st.just("unsub"), subs),
    st.tuples(st.just("know"), st.booleans()),
    st.tuples(st.just("ack"), st.integers(0, 40)),
    st.tuples(st.just("time"), st.floats(0, 4)),
    st.tuples(st.just("remove"), st.integers(1, 40)),
), max_size=80)


@settings(max_examples=300, deadline=None)
@given(ops, st.sampled_from([0, 2, 3]), st.randoms(use_true_random=False))
def test_owed_barriers_and_unsent_leases_stay_consistent(run, max_deliveries, rnd):
    eng = QueueEngine(QueueSpec("q", lease_period=5.0, max_deliveries=max_deliveries,
                                barrier_expression="/b"))
    pos, now = 0, 0.0
    filters: dict[str, Filter | None] = {}
    barriers: dict[str, list[int]] = {}
    leased: dict[int, str] = {}

    def take(out):
        for a in out:
            if type(a) is Deliver:
                if a.barrier:
                    barriers.setdefault(a.sub_key, []).append(a.position)
                else:
                    leased[a.position] = a.sub_key
                    if rnd.random() < 0.3:  # its record is being decompressed
                        eng.delivery_waits(a.position, a.sub_key)

    for op in run:
        kind = op[0]
        if kind == "pub":
            pos += 1
            take(eng.enqueue(pos, f"1|{pos}|", now, is_barrier=op[1]))
        elif kind == "sub":
            k = op[1]
            f = filters[k] = None if op[2] is None else Filter(*op[2])
            if k in eng.subscribers():
                take(eng.replace_subscriber(k, now, max_backlog=2, eligible=f))
            else:
                barriers.pop(k, None)
                take(eng.add_subscriber(k, now, max_backlog=2, eligible=f))
        elif kind == "unsub":
            barriers.pop(op[1], None)
            take(eng.remove_subscriber(op[1], now))
        elif kind == "know":
            for f in filters.values():
                if f is not None:
                    f.known = op[1]
            if op[1]:
                take(eng.dispatch(now))
        elif kind == "ack" and leased:
            p, k = sorted(leased.items())[op[1] % len(leased)]
            del leased[p]
            take(eng.ack(k, f"1|{p}|", now))
        elif kind == "time":
            now += op[1]
            take(eng.poll(now))
        elif kind == "remove":
            take(eng.remove([f"1|{op[1]}|"], now)[1])
        owing = [s for s in eng._sub_list if s.owed is not None]
        assert eng._n_owed == len(owing)
        assert all(s.owed for s in owing)
        live = {eng._pos[j] for j in range(len(eng._st)) if eng._st[j] != DONE}
        assert set(eng._unsent) <= live
        for got in barriers.values():
            assert got == sorted(set(got))  # each once, in order
