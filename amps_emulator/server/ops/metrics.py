"""``GET /metrics`` on the Admin port: the server's figures in the Prometheus text exposition
format (version 0.0.4), so Prometheus scrapes the emulator directly, without an exporter
beside it.

The figures are those a monitoring plan built on AMPS's ``/amps`` tree watches (the ones
60East's published exporter turns into gauges), read from the same state the tree is built
from, at the moment of the scrape: connected clients and their traffic, messages received
and delivered (in all and per topic), SOW records and operations per topic, queue depth and
leases, each replication destination's link and lag, and the persisted-ack latency as a
histogram. Counters are cumulative since the server started (``_total``); a reset of the
server does not set them back. Host figures (CPU, memory, disks) are left to the node
exporter. The request is authenticated and entitled as any other Admin request (read
permission on the path ``/metrics``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from amps_emulator.protocol.topics import split_topic
from amps_emulator.server.core.amps_names import connection_name
from amps_emulator.server.core.meters import OTHER_TOPICS
from amps_emulator.server.ops.stats import client_id, processor_counters

if TYPE_CHECKING:
    from amps_emulator.server.app import Server

#: the media type Prometheus asks for and reads
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_Sample = tuple[dict[str, str], float]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(v: float) -> str:
    if v == float("inf"):
        return "+Inf"
    if isinstance(v, int) or float(v).is_integer() and abs(v) < 1 << 53:
        return str(int(v))
    return repr(float(v))


class _Text:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str, samples: Iterable[_Sample]) -> None:
        """One metric family; a counter is named ``<name>_total`` (its ``TYPE`` line too, as
        the text format's version 0.0.4 has it)."""
        if kind == "counter":
            name += "_total"
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            self.sample(name, labels, value)

    def sample(self, name: str, labels: dict[str, str], value: float) -> None:
        if labels:
            inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
            self.lines.append(f"{name}{{{inner}}} {_number(value)}")
        else:
            self.lines.append(f"{name} {_number(value)}")


def _topic_labels(key: str) -> dict[str, str]:
    """``topic`` and ``message_type`` of a topic key; the topics past the meters' cap are
    counted together with both empty."""
    if key == OTHER_TOPICS:
        return {"topic": "", "message_type": ""}
    name, mtype = split_topic(key)
    return {"topic": name, "message_type": mtype}


def render(server: Server) -> str:
    """The exposition of ``server``'s figures now (on its loop: no lock, one instant)."""
    out = _Text()
    _instance(out, server)
    _clients(out, server)
    _topics(out, server)
    _sow(out, server)
    _queues(out, server)
    _replication(out, server)
    _acks(out, server)
    return "\n".join(out.lines) + "\n"


def _instance(out: _Text, s: Server) -> None:
    b = s.broker
    out.family("amps_instance_info", "gauge", "The instance's name and the AMPS version it "
               "announces (always 1).",
               [({"instance": s.instance_name, "version": b.server_version}, 1)])
    out.family("amps_uptime_seconds", "gauge", "Seconds since the server started (its clock).",
               [({}, round(s.wallclock() - s.started_at, 3))])
    whole = processor_counters(s)["all"]
    out.family("amps_messages_received", "counter", "Messages the instance's processors took "
               "in (publishes, replays, queue and SOW reads), as "
               "processors/all/messages_received.", [({}, whole["received"])])
    out.family("amps_matches_found", "counter", "Messages the instance's processors sent out "
               "(deliveries, replays, queue and SOW results), as processors/all/matches_found.",
               [({}, whole["found"])])
    out.family("amps_denied_reads", "counter", "Reads refused by entitlement.",
               [({}, b.denied["reads"])])
    out.family("amps_denied_writes", "counter", "Writes refused by entitlement (Admin "
               "requests included).", [({}, b.denied["writes"])])


def _clients(out: _Text, s: Server) -> None:
    conns = sorted(s.connections, key=lambda c: c.conn_id)
    out.family("amps_clients", "gauge", "Connected clients, as /amps/instance/clients.",
               [({}, len(conns))])
    rows = [({"client": client_id(c), "connection": connection_name(s.instance_name, c)},
             c.counters(), len(c.subs)) for c in conns]
    for field, kind, text in (
            ("messages_in", "counter", "Messages received from the client."),
            ("messages_out", "counter", "Messages sent to the client."),
            ("bytes_in", "counter", "Bytes received from the client."),
            ("bytes_out", "counter", "Bytes sent to the client."),
            ("queued_bytes_out", "gauge", "Bytes queued for the client, not yet sent.")):
        out.family(f"amps_client_{field}", kind, text,
                   [(labels, getattr(n, field)) for labels, n, _ in rows])
    out.family("amps_client_subscriptions", "gauge", "The client's subscriptions.",
               [(labels, subs) for labels, _, subs in rows])


def _topics(out: _Text, s: Server) -> None:
    b = s.broker
    for counts, way, text in ((b.topics_in, "in", "Messages published to the topic."),
                              (b.topics_out, "out", "Messages delivered to subscriptions of "
                                                    "the topic.")):
        out.family(f"amps_topic_messages_{way}", "counter", text,
                   [(_topic_labels(k), v) for k, v in sorted(counts.items())])


def _sow(out: _Text, s: Server) -> None:
    topics = sorted(s.sow_service.sow.topics.items()) if s.sow_service is not None else []
    now = s.wallclock()
    rows = [(_topic_labels(key), t) for key, t in topics]
    out.family("amps_sow_records", "gauge", "Records in the SOW topic, as its valid_keys.",
               [(labels, t.count(now)) for labels, t in rows])
    for field, plural in (("insert", "inserts"), ("update", "updates"), ("delete", "deletes"),
                          ("query", "queries")):
        out.family(f"amps_sow_{plural}", "counter", f"The SOW topic's {field}_count.",
                   [(labels, getattr(t, f"{field}_count")) for labels, t in rows])


def _queues(out: _Text, s: Server) -> None:
    svc = s.queue_service
    queues = sorted(svc.queues.items()) if svc is not None else []
    rows = [({"queue": q.name, "message_type": q.message_type}, q.engine) for _, q in queues]
    out.family("amps_queue_depth", "gauge", "Messages in the queue, leased ones included, as "
               "its queue_depth.", [(labels, e.depth) for labels, e in rows])
    out.family("amps_queue_leased", "gauge", "Messages of the queue leased to subscribers, "
               "as its backlog.", [(labels, e.leased_count) for labels, e in rows])


def _replication(out: _Text, s: Server) -> None:
    repl = s.replication
    states = list(repl.gate.states.items()) if repl is not None else []
    rows = [({"destination": name}, st) for name, st in states]
    out.family("amps_replication_connected", "gauge", "1 while the link to the destination "
               "is up.", [(labels, int(st.connected)) for labels, st in rows])
    out.family("amps_replication_sync", "gauge", "1 while the destination is sync (0: async, "
               "or downgraded).",
               [(labels, int(st.replication_type == "sync")) for labels, st in rows])
    gate = repl.gate if repl is not None else None
    out.family("amps_replication_lag_seconds", "gauge", "Seconds since the oldest record the "
               "destination has not acknowledged was logged (seconds_behind is its whole "
               "seconds).",
               [(labels, round(gate.lag(st), 3)) for labels, st in rows if gate is not None])
    out.family("amps_replication_messages_out", "counter", "Messages sent to the destination.",
               [(labels, st.messages_out) for labels, st in rows])
    out.family("amps_replication_bytes_out", "counter", "Bytes sent to the destination.",
               [(labels, st.bytes_out) for labels, st in rows])


def _acks(out: _Text, s: Server) -> None:
    name = "amps_persisted_ack_latency_seconds"
    out.lines.append(f"# HELP {name} Time from a publish being logged to its persisted ack "
                     "being released (durable here and on every sync destination).")
    out.lines.append(f"# TYPE {name} histogram")
    lat = s.txlog.ack_latency if s.txlog is not None else None
    if lat is None:
        return
    for bound, n in lat.cumulative():
        out.sample(f"{name}_bucket", {"le": _number(bound)}, n)
    out.sample(f"{name}_sum", {}, round(lat.sum, 6))
    out.sample(f"{name}_count", {}, lat.count)


__all__ = ["CONTENT_TYPE", "render"]
