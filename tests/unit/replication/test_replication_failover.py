"""Where a bookmark replay starts on an instance the subscriber failed over to
(``journal.failover``), between journals linked by the replication link's two halves in one
process: each replicated record carries what its sender had received (``sv``), and a record
from another instance resolves to the first earlier record here its sender did not hold."""

from __future__ import annotations

from amps_emulator.journal import MemoryJournal
from amps_emulator.journal.failover import seen_of
from amps_emulator.replication import Receiver, Selection, Sender

from .test_replication_link import Applied, dest, pipe, pub


class Node:
    """One instance: its journal and, per peer, the sender to it and the receiver from it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.journal = MemoryJournal()
        self.applied = Applied()

    def link_to(self, other: Node) -> tuple[Sender, Receiver]:
        sender = Sender(self.journal, Selection(dest(name=other.name), other.name), local_name=self.name,
                        local_group="G")
        sender.start(other.journal.high_water_marks())
        return sender, Receiver(other.journal, other.applied, local_name=other.name)

    def publish(self, tag: str, numbers) -> list:
        return [pub(self.journal, body=b'{"%s":%d}' % (tag.encode(), i), client=f"pub-{tag}", s=i)
                for i in numbers]


def test_a_record_from_the_peer_resolves_before_what_the_peer_never_had():
    a, b = Node("A"), Node("B")
    ab, ba = a.link_to(b), b.link_to(a)
    a4 = a.publish("a", range(1, 5))[-1]
    b.publish("b", range(1, 5))
    pipe(*ab)
    pipe(*ba)
    a5 = a.publish("a", range(5, 25))[0]  # the link A -> B is cut: B never gets these
    b9 = b.publish("b", range(5, 10))[-1]
    pipe(*ba)  # B -> A is up: on A, b5..b9 come after a5..a24
    on_a = a.journal.position_of(b9.bookmark)
    assert on_a is not None and on_a > a5.position
    assert seen_of(a.journal.record_at(on_a)) == {"": a4.bookmark_str}  # what B had of A's
    assert a.journal.position_after_bookmark(b9.bookmark_str, resume=True) == a5.position
    assert a.journal.position_after_bookmark(b9.bookmark_str) == on_a + 1  # exactly after it
    # a record of A's own: the subscriber that saw it has seen everything of A's before it
    a24 = a.journal.record_at(a5.position + 19)
    assert a.journal.position_after_bookmark(a24.bookmark_str, resume=True) == a24.position + 1
    # once healed, B has a5..a24 after b9 and sends on what it had: a record from B sent
    # after that resolves after itself again
    pipe(*ab)
    b10 = b.publish("b", [10])[0]
    pipe(*ba)
    at = a.journal.position_of(b10.bookmark)
    assert a.journal.position_after_bookmark(b10.bookmark_str, resume=True) == at + 1


def test_a_bookmark_not_held_starts_where_the_latest_record_from_the_peer_would():
    a, b = Node("A"), Node("B")
    ab, ba = a.link_to(b), b.link_to(a)
    a.publish("a", range(1, 3))
    pipe(*ab)
    b.publish("b", range(1, 3))
    pipe(*ba)
    a3 = a.publish("a", [3])[0]  # cut A -> B
    b.publish("b", [3])
    pipe(*ba)
    unseen = b.publish("b", [4])[0]  # the subscriber saw it on B; B died before sending it
    assert a.journal.position_of(unseen.bookmark) is None
    assert a.journal.position_for_unheld() == a3.position
    standalone = MemoryJournal()
    pub(standalone)
    assert standalone.position_for_unheld() is None  # nothing replicated here: NOW, as before


def test_records_from_a_third_instance_the_sender_had_not_received_are_replayed():
    a, b, c = Node("A"), Node("B"), Node("C")
    ca, cb, ba = c.link_to(a), c.link_to(b), b.link_to(a)
    c.publish("c", [1])
    pipe(*ca)
    pipe(*cb)
    c2 = c.publish("c", [2])[0]
    pipe(*ca)  # C -> B is cut: B never has c2
    b1 = b.publish("b", [1])[0]
    pipe(*ba)
    c2_on_a = a.journal.position_of(c2.bookmark)
    assert a.journal.position_after_bookmark(b1.bookmark_str, resume=True) == c2_on_a
