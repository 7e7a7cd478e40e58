"""Snapshot and restore of the whole state, for ``/emulator/snapshot``.

A snapshot is a tar archive (gzip on request) of the files that hold the state: the
transaction log's directory (journal segments, their summaries, the queues' low-water
checkpoint ``queues.ack``) under ``journal/``, with the segments archived to
``JournalArchiveDirectory`` (restored into the journal directory), and each persistent SOW topic's LMDB
environment (``data.mdb``) under ``sow/<n>/``, with ``manifest.json`` naming the topics each
environment holds. It is taken on the event loop between two turns, after the SOW commit and
the journal's flush and sync, so no command is half applied in it.

Restore disconnects every client (as a reset does), closes the log, the SOW and the queues,
puts the archive's files in place of theirs and opens them again through the start-up
recovery: the SOW catches up with (transient topics are rebuilt from) the restored journal,
the queues replay it from their checkpoint. The listeners stay as they are.

What cannot be reproduced from files is refused with :class:`SnapshotRefused` (a 409): the
``--memory`` mode, and transient SOW topics that hold records the transaction log does not
record (nothing could rebuild them).
"""

from __future__ import annotations

import asyncio
import io
import json
import lzma
import os
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Iterable
from typing import IO, TYPE_CHECKING, Any, Protocol

from amps_emulator.journal.atomic import fsync_path
from amps_emulator.journal.segment import parse_stored_name
from amps_emulator.journal.summary import SUMMARY_SUFFIX
from amps_emulator.protocol.topics import qualify

if TYPE_CHECKING:
    from amps_emulator.server.core.turn import Turn
    from amps_emulator.server.messaging.broker import Broker
    from amps_emulator.server.net.connection import Connection
    from amps_emulator.server.services.queue_service import QueueService
    from amps_emulator.server.services.sow_service import SowService
    from amps_emulator.server.services.txlog import TxLog
    from amps_emulator.server.services.views import DerivedTopics

FORMAT = 1
REASON = "state restored from a snapshot by the emulator's admin interface"
_SOW_FILES = ("data.mdb",)  # lock.mdb is per process: LMDB makes a new one


class Server(Protocol):
    """What a snapshot reads and replaces of the server (``server.app.Server``)."""

    config: Any
    instance_name: str
    connections: set[Connection]
    turn: Turn
    broker: Broker
    derived: DerivedTopics | None
    wallclock: Callable[[], float]

    @property
    def txlog(self) -> TxLog | None: ...
    @property
    def sow_service(self) -> SowService | None: ...
    @property
    def queue_service(self) -> QueueService | None: ...
    def closed(self, client: Any) -> None: ...
    def replace_derived(self, derived: DerivedTopics) -> None: ...


class SnapshotRefused(Exception):
    """The state cannot be archived or restored faithfully (HTTP 409)."""


class BadSnapshot(ValueError):
    """The archive is not a snapshot this server can take (HTTP 400)."""


def _disconnect(server: Server, conns: Iterable[Connection]) -> int:
    n = 0
    for conn in sorted(conns, key=lambda c: c.conn_id):
        conn.flush_output()
        conn.close(REASON)
        server.closed(conn)  # its state goes now, before the files are replaced
        n += 1
    return n


def _check_memory(server: Server) -> None:
    if server.broker.memory:
        raise SnapshotRefused(
            "the server runs with --memory: its state lives in memory stores and no file "
            "holds it, so it cannot be archived or restored faithfully; run it with a data "
            "directory")


def _check_files(server: Server) -> None:
    """Everything the state holds is in files (or rebuilt from them at start-up)."""
    _check_memory(server)
    svc, tx = server.sow_service, server.txlog
    if svc is None:
        return
    for name, topic in svc.sow.topics.items():
        if svc.sow.store_path(name) is None and (tx is None or not tx.recorded(name)) \
                and topic.count() and not _derived(server, name):
            raise SnapshotRefused(
                f"SOW topic {name!r} is transient and not recorded by the transaction log: "
                f"its {topic.count()} records are in memory only and could not be restored")


def _derived(server: Server, name: str) -> bool:
    """A view's or a conflated topic's own SOW: rebuilt from its underlying topics."""
    return any(qualify(v.name, v.message_type) == name
               for v in (*server.config.views, *server.config.conflated_topics))


async def take(server: Server, gzip: bool = False) -> bytes:
    """The archive of the state now (see the module docstring)."""
    _check_files(server)
    tx, svc = server.txlog, server.sow_service
    if svc is not None:
        svc.commit()
    if tx is not None and tx.is_open:
        tx.end_turn()  # this turn's records written
        await tx.idle()
        tx.sync_now()
    # from here to the end nothing yields: no turn runs while the files are read
    buf = io.BytesIO()
    manifest: dict = {"format": FORMAT, "instance": server.instance_name, "journal": False,
                      "sow": []}
    with tarfile.open(fileobj=buf, mode="w:gz" if gzip else "w") as tar:
        if tx is not None:
            d = tx.cfg.journal_directory
            manifest["journal"] = True
            for name in sorted(os.listdir(d)):
                path = os.path.join(d, name)
                if os.path.isfile(path) and not name.endswith(".tmp"):
                    tar.add(path, f"journal/{name}")
            archive = tx.cfg.journal_archive_directory
            if archive and os.path.isdir(archive):  # archived segments: restored beside the rest
                for name in sorted(os.listdir(archive)):
                    if parse_stored_name(name.removesuffix(SUMMARY_SUFFIX)) is not None:
                        tar.add(os.path.join(archive, name), f"journal/{name}")
        if svc is not None:
            for i, (d, st) in enumerate(sorted(svc.sow.stores.items())):
                st.sync()
                manifest["sow"].append({"dir": f"sow/{i}", "topics": sorted(st.topics)})
                for name in _SOW_FILES:
                    path = os.path.join(d, name)
                    if os.path.isfile(path):
                        tar.add(path, f"sow/{i}/{name}")
        data = json.dumps(manifest, indent=1).encode()
        info = tarfile.TarInfo("manifest.json")
        info.size = len(data)
        info.mtime = int(server.wallclock())
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


MAX_MEMBERS = 100_000  # members an archive may have (each one a file on disk while restoring)
MAX_MANIFEST = 1 << 20  # bytes of manifest.json read
_CHUNK = 1 << 20


def scratch_dir(server: Server) -> str | None:
    """Where a restore stages its files: beside the transaction log (or the first SOW store),
    on the disk that receives them, rather than a temporary directory that may live in
    memory (None: the system's temporary directory)."""
    tx, svc = server.txlog, server.sow_service
    if tx is not None:
        base = os.path.dirname(os.path.abspath(tx.cfg.journal_directory))
    elif svc is not None and svc.sow.stores:
        base = os.path.dirname(os.path.abspath(sorted(svc.sow.stores)[0]))
    else:
        return None
    return base if os.path.isdir(base) else None


def _member_path(member: tarfile.TarInfo, into: str) -> str:
    """Where a regular file member is staged; refuses what could leave the staging directory."""
    name = member.name
    parts = name.split("/")
    if name.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise BadSnapshot(f"archive member {name!r} leaves the archive")
    return os.path.join(into, *parts)


def unpack(archive: IO[bytes], into: str, limit: int) -> dict:
    """Stream the archive's files into the directory ``into`` and return its manifest.

    Members are read as the archive goes (never one whole in memory) and the bytes they
    unpack to are counted against ``limit`` before they are written, so a small compressed
    archive that expands to more is refused (:class:`BadSnapshot`) with at most ``limit``
    bytes on disk. Links, devices and names that leave the archive are refused too."""
    total = members = 0
    try:
        with tarfile.open(fileobj=archive, mode="r|*") as tar:
            for member in tar:
                if member.isdir():
                    continue
                if not member.isfile():
                    raise BadSnapshot(f"archive member {member.name!r} is not a regular file")
                path = _member_path(member, into)
                members += 1
                total += member.size
                if members > MAX_MEMBERS or total > limit:
                    raise BadSnapshot(f"the archive unpacks to more than {limit} bytes or "
                                      f"{MAX_MEMBERS} files, the most a restore takes")
                os.makedirs(os.path.dirname(path), exist_ok=True)
                src = tar.extractfile(member)
                with open(path, "wb") as out:
                    while src is not None and (chunk := src.read(_CHUNK)):
                        out.write(chunk)
    except (tarfile.TarError, EOFError, OSError, zlib.error, lzma.LZMAError) as exc:
        raise BadSnapshot(f"not a tar archive: {exc}") from None
    manifest_path = os.path.join(into, "manifest.json")
    if not os.path.isfile(manifest_path):
        raise BadSnapshot("no manifest.json: not an emulator snapshot")
    try:
        with open(manifest_path, "rb") as f:
            manifest = json.loads(f.read(MAX_MANIFEST))
    except ValueError as exc:
        raise BadSnapshot(f"manifest.json: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BadSnapshot(f"manifest.json: not snapshot format {FORMAT}")
    return manifest


def _plan_sow(server: Server, manifest: dict) -> dict[str, str]:
    """Archive directory -> the environment directory it replaces (matched by topics)."""
    svc = server.sow_service
    stores = {d: set(st.topics) for d, st in svc.sow.stores.items()} if svc is not None else {}
    plan: dict[str, str] = {}
    entries = manifest.get("sow", [])
    for entry in entries if isinstance(entries, list) else [entries]:
        where = entry.get("dir") if isinstance(entry, dict) else None
        names = entry.get("topics", []) if isinstance(entry, dict) else None
        if not isinstance(where, str) or any(p in ("", ".", "..") for p in where.split("/")) \
                or not isinstance(names, list):
            raise BadSnapshot(f"manifest.json: a bad sow entry {entry!r}")
        topics = set(map(str, names))
        target = next((d for d, names in stores.items() if names & topics), None)
        if target is None:
            raise BadSnapshot(f"the snapshot holds SOW topic(s) {', '.join(sorted(topics))}, "
                              "which this server's configuration does not store")
        plan[where] = target
    return plan


async def restore(server: Server, archive: IO[bytes] | bytes, limit: int = 4 << 30) -> dict:
    """Replace the state with the archive's (see the module docstring). The archive is
    unpacked first, in a thread, into a staging directory (:func:`unpack`: at most ``limit``
    bytes); nothing of the server's changes until it has been read whole."""
    _check_memory(server)
    if isinstance(archive, bytes):
        archive = io.BytesIO(archive)
    with tempfile.TemporaryDirectory(prefix="amps-restore-", dir=scratch_dir(server)) as files:
        manifest = await asyncio.to_thread(unpack, archive, files, limit)
        return await _replace(server, manifest, files)


async def _replace(server: Server, manifest: dict, files: str) -> dict:
    """Put the staged ``files`` in place of the server's and open them again."""
    tx, svc, queues = server.txlog, server.sow_service, server.queue_service
    if manifest.get("journal") and tx is None:
        raise BadSnapshot("the snapshot holds a transaction log; this server has none")
    plan = _plan_sow(server, manifest)
    n = _disconnect(server, list(server.connections))
    server.broker.client_seqs.clear()
    # close what holds files, in the order the server stops (the log's timers keep running)
    if queues is not None:
        queues.close()
    if server.derived is not None:
        server.derived.close()
    if svc is not None:
        svc.close()
    if tx is not None and tx.is_open:
        await tx.idle()
    # the archive's files in place of theirs, the log opened again from them
    if svc is not None:
        for d in set(plan.values()) | set(svc.sow.stores):
            if os.path.isdir(d):
                shutil.rmtree(d)
            listing = d.rstrip(os.sep) + ".topics"  # a store the snapshot does not hold
            if d not in plan.values() and os.path.isfile(listing):  # starts empty, as on a
                os.remove(listing)  # reset (not as a lost file)
        for src, d in plan.items():
            _write_files(files, src + "/", d)
    if tx is not None:
        tx.reopen_empty(fill=lambda d: _write_files(files, "journal/", d))
    if svc is not None:
        svc.reopen()
    if queues is not None:  # each queue replays the restored journal from its checkpoint
        for q in queues.queues.values():
            q.subs.clear()
        queues._cache.clear()
        queues._ckpt_pending = None
        queues._ckpt_written = {}
        queues.recover()
    if server.derived is not None:  # (after the queues: a view over one reads what it holds)
        from amps_emulator.server.services.views import DerivedTopics

        derived = DerivedTopics(server.broker, server.config, queues)
        derived.start()
        server.replace_derived(derived)
    server.turn.request()
    return {"restored": True, "clients_disconnected": n,
            "journal_last_position": tx.journal.last_position if tx is not None and tx.is_open
            else None,
            "sow": {name: t.count() for name, t in svc.sow.topics.items()} if svc else {},
            "queues": {name: q.engine.depth for name, q in queues.queues.items()}
            if queues is not None else {}}


def _write_files(files: str, prefix: str, directory: str) -> None:
    """Move the staged files directly under ``files/prefix`` into ``directory``, synced."""
    os.makedirs(directory, exist_ok=True)
    src = os.path.realpath(os.path.join(files, prefix))
    if not src.startswith(os.path.realpath(files) + os.sep) or not os.path.isdir(src):
        return
    for name in sorted(os.listdir(src)):
        path = os.path.join(src, name)
        if not os.path.isfile(path):
            continue
        target = os.path.join(directory, name)
        shutil.move(path, target)  # a rename when on the same disk
        fsync_path(target)
