"""A replication peer's logon, sans-IO: the hello carries the Destination's credentials, a frame
announced larger than the pre-logon limit is refused before its bytes are read, records the
peer may not replicate are dropped (acknowledged, so the link goes on) and logged once."""

from __future__ import annotations

import asyncio
import logging

import pytest

from amps_emulator.auth import Session, parse_document
from amps_emulator.auth.permissions import DocumentPermissions
from amps_emulator.config.model import ReplicationAuthenticator
from amps_emulator.journal import MemoryJournal
from amps_emulator.protocol.codec import FrameDecoder, ProtocolError
from amps_emulator.replication import Receiver, Selection, Sender
from amps_emulator.replication.link import ack_position
from amps_emulator.replication.peer_auth import PeerIdentity, log_on_peer, logon_with
from amps_emulator.replication.stream import PRE_AUTH_FRAME, read_frame
from amps_emulator.replication.wire import Hello, LinkRefused, Logon, classify_hello
from tests.unit.replication.test_replication_link import Applied, dest, pub


def test_the_hello_carries_the_logon_and_never_shows_the_password():
    (payload,) = FrameDecoder().feed(Hello(name="A", group="G", hw={}).encode(Logon("peer", "s3cret")))
    hello, logon = classify_hello(payload)
    assert hello.name == "A" and logon == Logon("peer", "s3cret")
    assert "s3cret" not in repr(logon)
    (payload,) = FrameDecoder().feed(Hello(name="A", group="G", hw={}).encode())
    assert classify_hello(payload)[1] == Logon("", None)  # an older peer: no logon at all


def test_the_authenticator_reads_its_password_at_each_connection(tmp_path, monkeypatch):
    pw = tmp_path / "pw"
    pw.write_text("from-file\n")
    assert logon_with(ReplicationAuthenticator(user="u", password_file=str(pw))) == Logon("u", "from-file")
    monkeypatch.setenv("REPL_PW", "from-env")
    auth = ReplicationAuthenticator(user="u", password_env="REPL_PW")
    assert logon_with(auth) == Logon("u", "from-env")
    assert "from" not in repr(auth)
    monkeypatch.delenv("REPL_PW")
    with pytest.raises(LinkRefused, match="REPL_PW"):
        logon_with(auth)
    assert logon_with(ReplicationAuthenticator()).user  # the process's user


async def test_a_frame_announced_too_large_is_refused_before_it_is_read():
    reader = asyncio.StreamReader()
    reader.feed_data((PRE_AUTH_FRAME + 1).to_bytes(4, "big") + b"x" * 10)  # the rest never comes
    with pytest.raises(ProtocolError, match="limit"):
        await asyncio.wait_for(read_frame(reader, PRE_AUTH_FRAME), 5)
    reader = asyncio.StreamReader()
    reader.feed_data((3).to_bytes(4, "big") + b"abc")
    assert await read_frame(reader, PRE_AUTH_FRAME) == b"abc"


def identity(doc: str) -> PeerIdentity:
    perms = DocumentPermissions(parse_document(doc, "peer"))
    return PeerIdentity("127.0.0.1:1", "peer", Session("peer", perms))


def test_refused_records_are_dropped_acknowledged_and_logged_once(caplog):
    a, b = MemoryJournal(), MemoryJournal()
    port = Applied()
    who = identity('{"replication-logon": true, "replicated-topics": ["orders"]}')
    snd = Sender(a, Selection(dest(), "B"), local_name="A", local_group="G")
    rcv = Receiver(b, port, admit=who.admits)
    snd.start(b.high_water_marks())
    for i in range(5):
        pub(a, "secret", s=2 * i + 1)
        pub(a, "orders", s=2 * i + 2)
    dec = FrameDecoder()
    with caplog.at_level(logging.ERROR, logger="amps_emulator.replication"):
        for payload in dec.feed(b"".join(snd.poll())):
            rcv.handle(payload)
        ack = rcv.take_ack(0.0)
        assert ack is not None and ack_position(next(iter(FrameDecoder().feed(ack)))) == a.last_position
        assert [r.topic for r in port.records] == ["orders"] * 5 and rcv.refused == 5
        assert [r.topic for r in b.read(b.first_position)] == ["orders"] * 5  # nothing else journaled
        assert len(caplog.records) == 1 and "'secret'" in caplog.records[0].getMessage()
        who.close()
    assert len(caplog.records) == 2 and "5 records refused" in caplog.records[1].getMessage()


async def test_without_security_every_peer_and_topic_is_accepted():
    who = await log_on_peer(None, Logon("anyone"), "peer")
    assert who.user == "anyone" and not who.checks_topics and who.admits("anything")
