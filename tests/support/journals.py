"""Journal helpers shared by unit and integration tests: :class:`SlowGunzip`, a decompressor
of compressed journal segments that a test holds back, to see what goes on meanwhile."""

from __future__ import annotations

import threading

from amps_emulator.journal import stored


class SlowGunzip:
    """Put in place of ``journal.stored.decompress`` (``install``): each call says it began
    (``entered``) and waits for ``release`` before it decompresses; ``calls`` counts them,
    ``threads`` says which thread made each (a running server's: its worker, never its loop)."""

    def __init__(self) -> None:
        self.real = stored.decompress
        self.calls = 0
        self.threads: list[threading.Thread] = []
        self.entered = threading.Event()
        self.release = threading.Event()

    def install(self, monkeypatch) -> SlowGunzip:
        monkeypatch.setattr(stored, "decompress", self)
        return self

    def __call__(self, path: str) -> bytes:
        self.calls += 1
        self.threads.append(threading.current_thread())
        self.entered.set()
        if not self.release.wait(60):
            raise AssertionError("SlowGunzip was never released")
        return self.real(path)


#: the Admin path ``housekeep``: the journal segments an hour old archived and compressed,
#: then a message on ``housekeeping-done``
HOUSEKEEP = """<Actions><Action>
  <On><Module>amps-action-on-admin</Module><Options><Path>housekeep</Path></Options></On>
  <Do><Module>amps-action-do-archive-journal</Module><Options><Age>1h</Age></Options></Do>
  <Do><Module>amps-action-do-compress-journal</Module><Options><Age>1h</Age></Options></Do>
  <Do><Module>amps-action-do-publish-message</Module>
    <Options><Topic>housekeeping-done</Topic><MessageType>json</MessageType><Data>{}</Data></Options></Do>
</Action></Actions>"""


def compressing_config(d, name: str, sow: str, actions: str = HOUSEKEEP) -> str:
    """A server config for tests of compressed journal segments: every JSON topic recorded in
    64 KB segments (a 1 MB cache of decompressed ones), ``sow`` (a ``<SOW>`` element) and
    ``actions`` (an ``<Actions>`` element: by default :data:`HOUSEKEEP`)."""
    return f"""<AMPSConfig><Name>{name}</Name>
<Admin><InetAddr>127.0.0.1:0</InetAddr></Admin>
<Transports><Transport><Name>json-tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
  <MessageType>json</MessageType><Protocol>amps</Protocol></Transport></Transports>
<TransactionLog><JournalDirectory>{d}/journal</JournalDirectory>
  <JournalArchiveDirectory>{d}/archive</JournalArchiveDirectory>
  <JournalSize>64KB</JournalSize><CompressedJournalCacheMemoryLimit>1MB</CompressedJournalCacheMemoryLimit>
  <Topic><Name>.*</Name><MessageType>json</MessageType></Topic></TransactionLog>
{sow}
{actions}
</AMPSConfig>"""
