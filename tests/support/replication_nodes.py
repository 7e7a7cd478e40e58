"""Configurations for replication tests with two or more emulator instances: one instance's
XML from its name, Group, replication port and Destinations (our own configs, in the shape of
the public HA configs: SOW topics recorded in the transaction log, async or sync links)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import AMPS

from tests.support.clients import Collector


@dataclass
class Dest:
    """One ``Replication/Destination``: ``port`` None = passive (the peer connects in)."""

    group: str
    port: int | None
    name: str | None = None
    sync: bool = False
    pass_through: str | None = None
    topics: list[tuple[str, str, str | None]] = field(default_factory=lambda: [(".*", "json", None)])
    extra: str = ""  # more elements inside the Destination (ResyncPassThrough)
    exclude: str | None = None  # ExcludeValidation of every Topic (one-way links: "replicate")

    def xml(self) -> str:
        name = f"<Name>{self.name}</Name>" if self.name is not None else ""
        topics = "".join(
            f"<Topic><Name>{n}</Name><MessageType>{mt}</MessageType>"
            + (f"<Filter>{flt}</Filter>" if flt is not None else "")
            + (f"<ExcludeValidation>{self.exclude}</ExcludeValidation>" if self.exclude else "") + "</Topic>"
            for n, mt, flt in self.topics)
        addr = "" if self.port is None else (
            f"<InetAddr>127.0.0.1:{self.port}</InetAddr><ReconnectTimeout>0.05</ReconnectTimeout>")
        pt = "" if self.pass_through is None else f"<PassThrough>{self.pass_through}</PassThrough>"
        return (f"<Destination>{name}<Group>{self.group}</Group>"
                f"<SyncType>{'sync' if self.sync else 'async'}</SyncType>{topics}{pt}{self.extra}"
                f"<Transport><Type>amps-replication</Type>{addr}</Transport></Destination>")


def node_xml(name: str, data: Path, *, listen: int | None, dests: list[Dest] | None = None,
             group: str | None = None, sow: str = "", journal: str = "", txlog_topics: str = ".*",
             extra: str = "") -> str:
    repl = "" if listen is None else (
        f"<Transport><Name>amps-replication</Name><Type>amps-replication</Type>"
        f"<InetAddr>127.0.0.1:{listen}</InetAddr></Transport>")
    replication = "" if not dests else "<Replication>" + "".join(d.xml() for d in dests) + "</Replication>"
    grp = "" if group is None else f"<Group>{group}</Group>"
    sow = sow or (f"<Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>"
                  f"<FileName>{data}/sow/%n.sow</FileName></Topic>")
    return f"""<AMPSConfig>
  <Name>{name}</Name>{grp}
  <Transports>
    <Transport><Name>json-tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
      <MessageType>json</MessageType><Protocol>amps</Protocol></Transport>
    {repl}
  </Transports>
  <TransactionLog><JournalDirectory>{data}/journal</JournalDirectory>{journal}
    <Topic><Name>{txlog_topics}</Name><MessageType>json</MessageType></Topic></TransactionLog>
  <SOW>{sow}</SOW>
  {replication}{extra}
</AMPSConfig>"""


def connect(uri: str, name: str) -> AMPS.Client:
    c = AMPS.Client(name)
    c.connect(uri)
    c.logon(5000)
    return c


def journal_of(client: AMPS.Client, topic: str, count: int, timeout: float = 10.0) -> list[tuple[str, dict]]:
    """(bookmark, message) of everything of ``topic`` in an instance's journal, once ``count``
    are there (more, if more arrive meanwhile: a duplicate shows)."""
    got = Collector(lambda m: (m.get_bookmark(), json.loads(m.get_data())))
    cid = client.bookmark_subscribe(got, topic, AMPS.Client.Bookmarks.EPOCH)
    got.wait_for(count, timeout)
    # a marker published after would be needed to see "nothing more"; callers publish one
    client.unsubscribe(cid)
    return list(got.items)


def wait_marker(client: AMPS.Client, topic: str, marker: dict, timeout: float = 10.0) -> list[tuple[str, dict]]:
    """Everything of ``topic`` in the journal up to and including ``marker`` (a message that
    arrives after the ones the caller checks, by the same route, so nothing before it is still
    on the way)."""
    got = Collector(lambda m: (m.get_bookmark(), json.loads(m.get_data())))
    cid = client.bookmark_subscribe(got, topic, AMPS.Client.Bookmarks.EPOCH)
    assert got.wait_until(lambda items: any(m == marker for _, m in items), timeout), (marker, got.items)
    client.unsubscribe(cid)
    items = list(got.items)
    return items[:next(i for i, (_, m) in enumerate(items) if m == marker) + 1]


__all__ = ["Dest", "connect", "journal_of", "node_xml", "wait_marker"]
