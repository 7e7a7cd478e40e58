"""What every SOW query shares, whichever command runs it (``sow_commands`` for plain and
paginated queries, ``sow_aggregate`` for aggregated ones): the batch and ``top_n``/``skip_n``
options, the instant a historical query reads (``bookmark``), and sending results
(``processed`` ack, ``group_begin``, ``sow`` batches) from topic query generators. A leaf of
the server package, so both query modules import it and neither imports the other's caller.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import Future
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from amps_emulator.journal import ReadHold, SegmentPending
from amps_emulator.protocol import reasons
from amps_emulator.protocol.bookmarks import (
    EPOCH,
    Bookmark,
    BookmarkError,
    BookmarkList,
    BookmarkRange,
    BookmarkTimestamp,
    format_timestamp,
    parse_bookmark,
)
from amps_emulator.protocol.codec import sow_batch, sow_batch_prefix
from amps_emulator.protocol.reasons import CommandError
from amps_emulator.sow.record import StoredRecords, sow_frames, stored_timestamp
from amps_emulator.sow.scan import BUILDING

if TYPE_CHECKING:
    from amps_emulator.protocol.command import Command
    from amps_emulator.server.core.processors import Meter


class ResultsOut(Protocol):
    """All that sending results needs of a connection (:class:`server.net.connection.Connection`)."""

    def send(self, data: bytes) -> None: ...

    def ack(self, cmd: Command, ack_type: str, status: str = ..., reason: str | None = ...,
            **kw: Any) -> None: ...

    def begin_group(self, cmd: Command, qid: str) -> None: ...

    def end_group(self, cmd: Command, qid: str) -> None: ...


class HasTxLog(Protocol):
    """All that a historical query needs of the broker: its transaction log (or None)."""

    txlog: Any


MAX_BATCH_SIZE = 10_000


DEFAULT_BATCH_SIZE = 10


def batch_size(cmd: Command) -> int:
    """The ``batch_size`` a query sends its records in (refused outside 1..MAX_BATCH_SIZE)."""
    size = cmd.batch_size if cmd.batch_size is not None else DEFAULT_BATCH_SIZE
    if size < 1 or size > MAX_BATCH_SIZE:
        raise CommandError(reasons.INVALID_BATCH_SIZE, f"batch_size {size} is not 1..{MAX_BATCH_SIZE}")
    return size


def count_option(cmd: Command, name: str, header_value: int | None) -> int | None:
    """``top_n``/``skip_n`` from the header, or from the options (``top_n=5``)."""
    value = header_value
    opt = cmd.opts.get(name)
    if value is None and opt is not None and opt is not True:
        try:
            value = int(opt)
        except ValueError:
            raise CommandError(reasons.INVALID_OPTIONS, f"{name}={opt}") from None
    if value is not None and value < 0:
        raise CommandError(reasons.INVALID_OPTIONS if name == "skip_n" else reasons.INVALID_TOPN,
                           f"{name}={value}")
    return value


def top_n(cmd: Command) -> int | None:
    """The ``top_n`` of a query, from the header or the options."""
    return count_option(cmd, "top_n", cmd.top_n)


#: records framed in one step while a long result goes out (a driver runs several steps in
#: a slice of the loop's time)
SEND_STEP = 1_000


#: what a query's step that reads the journal yields: None to go on, or the decompression
#: it waits for
Waited = Future[None] | None
T = TypeVar("T")


def _bookmark_instant(broker: HasTxLog, text: str) -> Generator[Waited, None, float | None]:
    """The instant (UNIX seconds) a historical query names in its ``bookmark`` header:
    a timestamp, ``0``/``epoch`` (the beginning), a ``P|S|`` bookmark of the transaction log
    (the time that message was logged) or a list (the earliest). ``None``: ``now``/``recent``,
    the current state. A generator: reading when a message was logged may wait for its
    compressed segment (:func:`_first_record`)."""
    try:
        spec = parse_bookmark(text)
    except BookmarkError as exc:
        raise CommandError(reasons.INVALID_BOOKMARK, str(exc)) from None
    items = spec.items if isinstance(spec, BookmarkList) else (spec,)
    instants = []
    for item in items:
        if isinstance(item, BookmarkTimestamp):
            instants.append(item.micros / 1_000_000)
        elif item is EPOCH:
            instants.append(0.0)
        elif isinstance(item, Bookmark):
            journal = broker.txlog.journal if broker.txlog is not None else None
            after = (yield from _held(partial(journal.position_after_bookmark, item))) \
                if journal is not None else None
            if journal is None or after is None:
                raise CommandError(reasons.INVALID_BOOKMARK, f"bookmark {text!r} not found")
            logged = (yield from _held(partial(_first_record, journal, after - 1))) \
                if after > 1 else None
            instants.append(0.0 if logged is None else logged.timestamp / 1_000_000)
        elif isinstance(item, BookmarkRange):
            raise CommandError(reasons.INVALID_BOOKMARK, f"a SOW query takes no range: {text!r}")
    return min(instants) if instants else None


def _first_record(journal: Any, position: int, *, hold: ReadHold) -> Any:
    """The first record logged at or after ``position`` (None: none)."""
    return next(iter(journal.read(position, hold=hold)), None)


def _held(read: Callable[..., T]) -> Generator[Waited, None, T]:
    """``read(hold=...)``'s answer. What it reads of a compressed segment not decompressed
    yet is read once the journal cache's worker thread has decompressed it: meanwhile this
    yields that decompression (the query's driver goes on once it is done,
    ``handlers.sow.drive``), so the event loop never decompresses."""
    hold = ReadHold()
    try:
        return read(hold=hold)
    except SegmentPending:
        return (yield from hold.read_again(lambda h: read(hold=h)))


def history_cuts(broker: HasTxLog, cmd: Command, topics: list[Any], common: bool
                 ) -> Generator[Waited, None, dict[str, float] | None]:
    """For a ``sow``/``sow_and_subscribe`` with a ``bookmark``: the instant each topic with
    ``History`` is read as of (None: a current query; topics without History ignore the
    bookmark, as AMPS does). ``common``: one instant for all topics, the earliest (a
    historical subscription replays the transaction log from there), and only when every
    topic keeps history. A generator (see :func:`_bookmark_instant`): returns the
    ``{topic: instant}`` map or None."""
    if not cmd.bookmark or not any(t.history is not None for t in topics):
        return None
    at = yield from _bookmark_instant(broker, cmd.bookmark)
    if at is None:
        return None
    if not common:
        return {t.spec.name: t.history_cut(at) for t in topics if t.history is not None}
    if any(t.history is None for t in topics):
        return None
    cut = min(t.history_cut(at) for t in topics)
    return {t.spec.name: cut for t in topics}


def begin_results(client: ResultsOut, cmd: Command, qid: str) -> str:
    """The query is accepted: the ``processed`` ack and ``group_begin`` go out (the records
    follow as they are ready; ``client.end_group`` ends them, and a failure meanwhile ends
    them too, see :meth:`server.net.connection.Connection.fail`). Returns the query id."""
    if cmd.query_id is None:
        cmd.query_id = qid
    if "processed" in cmd.acks:
        client.ack(cmd, "processed")
    client.begin_group(cmd, qid)
    return qid


def run_topic_steps(client: ResultsOut, cmd: Command, steps: Iterable[Generator[None, None, Any]],
                    on_snapshot: Callable[[], None] | None = None,
                    each: Callable[[int], None] | None = None,
                    after_step: Callable[[str], None] | None = None
                    ) -> Generator[None, None, tuple[str, list[Any]]]:
    """Drive topic query generators (:meth:`sow.topic.Topic.query_steps`): the first step of
    each (plan and snapshot; a bad filter, orderby or option raises here, before anything is
    sent; steps that build a memo index the plan asked for come before it, each yielding
    :data:`sow.scan.BUILDING`, and this yields between them), ``on_snapshot``,
    :func:`begin_results`, then the remaining steps, yielding between them. Returns the query
    id and the results in order; an abandoned query releases every snapshot (and drops a
    half-built index). ``steps`` is read as it goes (a generator each, made when it starts).

    Topics' first steps: with ``on_snapshot``, all in one step, so that the subscription it
    registers and every snapshot are taken at one instant; else with a yield between two
    (a regex may name thousands of topics), and ``each(i)`` right after topic ``i``'s, in
    the same step (a subscription over many topics registered at the first one's snapshot
    takes each other topic's messages from its own snapshot on: see ``handlers.sow``).
    ``after_step(qid)`` runs after each step that follows ``group_begin`` (:class:`StoredStream`
    sends the records read so far)."""
    results: list[Any] = []
    running: dict[int, Generator[None, None, Any]] = {}  # (not done in their first step)
    try:
        for i, st in enumerate(steps):
            if i and on_snapshot is None:
                yield
            results.append(None)
            running[i] = st
            try:
                while next(st) is BUILDING:
                    yield
            except StopIteration as stop:
                results[i] = stop.value
                del running[i]
            if each is not None:
                each(i)
        if on_snapshot is not None:
            on_snapshot()
        qid = begin_results(client, cmd, cmd.query_id or cmd.sub_id or cmd.cid or "")
        for i, st in list(running.items()):
            while True:
                try:
                    next(st)
                except StopIteration as stop:
                    results[i] = stop.value
                    del running[i]
                    break
                if after_step is not None:
                    after_step(qid)
                yield
    finally:
        for st in running.values():
            st.close()
    return qid, results


def batches(records: list[Any], batch: int, opts: dict[str, Any]
             ) -> Iterator[list[tuple[dict[str, Any], bytes]]]:
    """The records as ``sow`` frame batches: (record header, body) pairs, ``batch`` at a
    time (``k`` unless ``no_sowkey``, ``bm``, and ``ts`` with the ``timestamp`` option)."""
    with_key = "no_sowkey" not in opts
    stamped = "timestamp" in opts
    for start in range(0, len(records), batch):
        chunk = []
        for rec in records[start:start + batch]:
            h: dict[str, Any] = {}
            if with_key:
                h["k"] = rec.sow_key
            h["bm"] = rec.bookmark or ""
            if stamped:
                h["ts"] = format_timestamp(round(rec.timestamp * 1_000_000))
            chunk.append((h, rec.data))
        yield chunk


def send_records(client: ResultsOut, qid: str, topic: str, records: list[Any] | StoredRecords,
                 batch: int, opts: dict[str, Any], meter: Meter | None = None
                 ) -> Generator[None, None, int]:
    """Send ``records`` of ``topic`` in ``sow`` batches, yielding after every
    :data:`SEND_STEP` records framed; returns how many were sent. Records kept as stored
    (a plain query's) are framed straight from their stored values (:func:`sow_frames`,
    the same frames). ``meter``: counts the records and the bytes of their batches (the
    ``sow`` processor's matches). The list is used up: the records sent are let go step by
    step (freeing a result of 200,000 records at once held the loop for tens of ms)."""
    if isinstance(records, StoredRecords):
        return (yield from _send_stored(client, qid, topic, records, batch, opts, meter))
    n = len(records)
    framed = done = 0
    for chunk in batches(records, batch, opts):
        data = sow_batch(topic, qid, chunk)
        if meter is not None:
            meter.give(len(data), len(chunk))
        client.send(data)
        framed += len(chunk)
        if framed - done >= SEND_STEP:
            records[done:framed] = [None] * (framed - done)
            done = framed
            yield
    return n


def _send_stored(client: ResultsOut, qid: str, topic: str, records: StoredRecords, batch: int,
                 opts: dict[str, Any], meter: Meter | None, start: int = 0
                 ) -> Generator[None, None, int]:
    """:func:`send_records` of stored records (from row ``start`` on): each step frames whole
    batches of at least :data:`SEND_STEP` records (as the general path does) with one
    :func:`sow_frames` call, and queues them as one write. Returns how many were sent."""
    rows = records.rows
    n = len(rows)
    step = -(-SEND_STEP // batch) * batch
    for first in range(start, n, step):
        end = min(n, first + step)
        _send_rows(client, qid, topic, rows, batch, opts, meter, first, end)
        if end < n:
            yield
    return n - start


def _send_rows(client: ResultsOut, qid: str, topic: str, rows: list[Any], batch: int,
               opts: dict[str, Any], meter: Meter | None, start: int, end: int) -> None:
    """The ``sow`` frames of stored ``rows[start:end]``, ``batch`` to a frame, as one write;
    those rows are then let go (a long result's memory goes as it is sent)."""
    stamps = None
    if "timestamp" in opts:
        stamps = [b""] * start + [
            format_timestamp(round(stored_timestamp(v) * 1_000_000)).encode()
            for _, v in rows[start:end]]
    data = sow_frames(sow_batch_prefix(topic, qid), rows, "no_sowkey" not in opts, stamps,
                      start, end, batch, True)
    rows[start:end] = [None] * (end - start)
    if meter is not None:
        meter.give(len(data), end - start)
    client.send(data)


class StoredStream:
    """A plain query's stored records sent as the scan reads them: the topic's query appends
    them to :attr:`records` (``Topic.query_steps(into=...)``) and, after each step,
    :meth:`send_read` frames the whole batches read so far (the scan and the client's read
    then overlap); :meth:`send_rest` sends what is left when the query is done. The frames
    are those :func:`send_records` makes of the whole result (``meter``: counted as it does)."""

    __slots__ = ("client", "topic", "batch", "opts", "meter", "records", "sent")

    def __init__(self, client: ResultsOut, topic: str, batch: int, opts: dict[str, Any],
                 meter: Meter | None = None) -> None:
        self.client = client
        self.topic = topic
        self.batch = batch
        self.opts = opts
        self.meter = meter
        self.records = StoredRecords()
        self.sent = 0  # rows framed so far

    def send_read(self, qid: str) -> None:
        rows = self.records.rows
        end = self.sent + (len(rows) - self.sent) // self.batch * self.batch
        if end > self.sent:
            _send_rows(self.client, qid, self.topic, rows, self.batch, self.opts, self.meter,
                       self.sent, end)
            self.sent = end

    def send_rest(self, qid: str) -> Generator[None, None, int]:
        """Send the records not sent yet (in steps); returns how many records there are."""
        yield from _send_stored(self.client, qid, self.topic, self.records, self.batch,
                                self.opts, self.meter, self.sent)
        self.sent = len(self.records)
        return self.sent
