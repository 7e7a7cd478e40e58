"""A short history of the server's figures for the console's charts (``GET /emulator/stats``).

Every second (real time) a :class:`History` takes a sample: messages in and out per second
(all topics, and per topic), the depth of each queue, the persisted acks released in that
second (how many, their mean and longest latency) and each replication destination's lag.
It keeps the last :data:`KEEP` samples in a ring, and takes its first when the Admin interface
starts, so a chart has a point from its first second. A sample costs a walk over the topics
counted (at most ``meters.TOPIC_CAP``), the queues and the destinations; per topic it keeps
only the topics that moved in that second.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from amps_emulator.protocol.topics import display_name, split_topic
from amps_emulator.server.core.meters import OTHER_TOPICS

if TYPE_CHECKING:
    from amps_emulator.server.app import Server

#: seconds between samples, and how many are kept (five minutes)
INTERVAL = 1.0
KEEP = 300


@dataclass
class Sample:
    at: float  # wall-clock time of the sample
    messages_in: float  # per second, since the previous sample
    messages_out: float
    topics_in: dict[str, float] = field(default_factory=dict)  # topics that moved only
    topics_out: dict[str, float] = field(default_factory=dict)
    queue_depth: dict[str, int] = field(default_factory=dict)
    acks: int = 0  # persisted acks released since the previous sample
    ack_mean_ms: float | None = None
    ack_max_ms: float | None = None
    replication_lag: dict[str, float] = field(default_factory=dict)  # seconds


def topic_label(key: str) -> str:
    """A topic key as the console and the metrics name it: ``name`` for json, else
    ``name (type)``; the topics past the cap are ``(other topics)``."""
    if key == OTHER_TOPICS:
        return "(other topics)"
    name, mtype = split_topic(key)
    return display_name(key) if mtype == "json" else f"{name} ({mtype})"


class History:
    def __init__(self, server: Server, interval: float = INTERVAL, keep: int = KEEP) -> None:
        self.server = server
        self.interval = interval
        self.samples: collections.deque[Sample] = collections.deque(maxlen=keep)
        self.timer: Any = None
        self._at = time.monotonic()
        self._in: dict[str, int] = {}
        self._out: dict[str, int] = {}
        self._published = self._delivered = 0
        self._acks = (0, 0.0)
        self._read_counters()
        self.sample(seed=True)

    def start(self) -> None:
        self.timer = self.server.loop.call_later(self.interval, self._tick)

    def close(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _tick(self) -> None:
        try:
            self.sample()
        finally:
            self.timer = self.server.loop.call_later(self.interval, self._tick)

    def _read_counters(self) -> tuple[dict[str, float], dict[str, float], float, float]:
        """The rates since the last read (per second), and remember the counters."""
        broker = self.server.broker
        now = time.monotonic()
        dt = max(now - self._at, 1e-6)
        rates_in = {k: (v - self._in.get(k, 0)) / dt for k, v in broker.topics_in.items()
                    if v != self._in.get(k, 0)}
        rates_out = {k: (v - self._out.get(k, 0)) / dt for k, v in broker.topics_out.items()
                     if v != self._out.get(k, 0)}
        published, delivered = broker.stats["published"], broker.stats["delivered"]
        total_in = (published - self._published) / dt
        total_out = (delivered - self._delivered) / dt
        self._in, self._out = dict(broker.topics_in), dict(broker.topics_out)
        self._published, self._delivered, self._at = published, delivered, now
        return rates_in, rates_out, total_in, total_out

    def sample(self, seed: bool = False) -> Sample:
        """Take a sample now (``seed``: the first, whose rates are zero by definition)."""
        s = self.server
        rates_in, rates_out, total_in, total_out = self._read_counters()
        if seed:
            rates_in, rates_out, total_in, total_out = {}, {}, 0.0, 0.0
        sample = Sample(time.time(), total_in, total_out,
                        {topic_label(k): v for k, v in rates_in.items()},
                        {topic_label(k): v for k, v in rates_out.items()})
        if s.queue_service is not None:
            sample.queue_depth = {topic_label(k): q.engine.depth
                                  for k, q in s.queue_service.queues.items()}
        txlog = s.txlog
        if txlog is not None:
            lat = txlog.ack_latency
            acks, total = lat.count - self._acks[0], lat.sum - self._acks[1]
            self._acks = (lat.count, lat.sum)
            peak = lat.take_peak()
            if acks and not seed:
                sample.acks = acks
                sample.ack_mean_ms = round(total / acks * 1000, 3)
                sample.ack_max_ms = round(peak * 1000, 3)
        repl = s.replication
        if repl is not None:
            sample.replication_lag = {name: round(repl.gate.lag(st), 3)
                                      for name, st in repl.gate.states.items()}
        self.samples.append(sample)
        return sample

    def series(self, seconds: float, top: int) -> dict[str, Any]:
        """The samples of the last ``seconds`` as columns for the charts: the ``top`` topics
        with the most messages in the window (in, and out), every queue and destination."""
        samples = list(self.samples)
        if samples:
            cut = samples[-1].at - seconds
            samples = [x for x in samples if x.at >= cut]
        return {
            "interval": self.interval, "now": time.time(),
            "started": round(self.samples[0].at, 3) if self.samples else None,
            "t": [round(x.at, 3) for x in samples],
            "messages_in": [round(x.messages_in, 3) for x in samples],
            "messages_out": [round(x.messages_out, 3) for x in samples],
            "topics_in": _columns(samples, "topics_in", top, 0.0),
            "topics_out": _columns(samples, "topics_out", top, 0.0),
            "queue_depth": _columns(samples, "queue_depth", None, None),
            "acks": [x.acks for x in samples],
            "ack_mean_ms": [x.ack_mean_ms for x in samples],
            "ack_max_ms": [x.ack_max_ms for x in samples],
            "replication_lag": _columns(samples, "replication_lag", None, None),
        }


def _columns(samples: list[Sample], what: str, top: int | None, missing: float | None
             ) -> dict[str, list[Any]]:
    """``{name: [value per sample]}`` of the dict ``what`` of each sample (``missing`` where a
    sample has no value); ``top``: only the names with the largest sums."""
    sums: dict[str, float] = {}
    for x in samples:
        for k, v in getattr(x, what).items():
            sums[k] = sums.get(k, 0.0) + v
    names = sorted(sums, key=lambda k: (-sums[k], k))
    if top is not None:
        names = names[:top]
    return {k: [_round(getattr(x, what).get(k, missing)) for x in samples] for k in sorted(names)}


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


__all__ = ["History", "KEEP", "Sample", "topic_label"]
