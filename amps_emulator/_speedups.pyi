# Types of the compiled extension (_speedups.c); its pure-Python twins are
# journal.record.append_record_py, journal.record.frame_size_py, journal.base.publish_run_py,
# journal.replicated.replicated_run_py
# and protocol.codec.scan_frames_py;
# parse_publish_header's is protocol.codec.parse_command's general path; sow_key's is
# sow.keys.sow_key_py; sow_frames's is sow.record.sow_frames_py;
# sow_values's is sow.record.sow_values_py; plain_run's is server.publish_run.plain_run_py;
# frame_parts's is protocol.codec.frame_parts_py; fan_send's is server.delivery.plan.fan_send_py;
# replay_frames's is server.delivery.replay_frames.replay_frames_py.
from collections.abc import Callable
from typing import Any, Literal, overload

def append_record(
    buf: bytearray,
    kind: int,
    position: int,
    publisher_id: int,
    sequence: int,
    timestamp: int,
    client_seq: int | None,
    topic: str,
    message_type: str,
    client_name: str,
    correlation_id: str | None,
    sow_key: str | None,
    expiration: int | None,
    headers: dict[str, str],
    body: bytes,
) -> int: ...
def frame_size(
    topic: str,
    message_type: str,
    client_name: str,
    correlation_id: str | None,
    sow_key: str | None,
    expiration: int | None,
    headers: dict[str, str],
    body: bytes,
) -> int: ...
def publish_run(
    buf: bytearray | None,
    record_type: type[Any],
    topic: str,
    message_type: str,
    client_name: str,
    publisher_id: int,
    timestamp: int,
    position: int,
    last: int,
    bodies: list[bytes],
    client_seqs: list[int] | None,
    base: int,
    mark: int,
    interval: int,
) -> tuple[list[Any], list[int], list[tuple[int, int]]] | None: ...
def replicated_run(
    buf: bytearray | None,
    record_type: type[Any],
    topic: str,
    message_type: str,
    client_name: str,
    publisher_id: int,
    timestamp: int,
    position: int,
    sequences: list[int],
    client_seqs: list[int] | None,
    headers: dict[str, str],
    bodies: list[bytes],
    base: int,
    mark: int,
    interval: int,
) -> tuple[list[Any], list[tuple[int, int]]] | None: ...
def plain_run(
    payloads: list[bytes], start: int, named: bool, last: int | None
) -> tuple[int, str, list[bytes], list[int] | None, list[int]] | None: ...
def scan_frames(data: bytes, need: int, limit: int) -> tuple[list[bytes], int, int]: ...
def parse_publish_header(
    payload: bytes,
) -> tuple[int, str | None, str | None, str | None, int | None] | None: ...
def sow_key(prefix: bytes, value: object) -> str | None: ...
def hash_int_rows(field: str, keyed: list[tuple[Any, str]]) -> list[tuple[bytes, str]]: ...
def int_run(field: str, keyed: list[tuple[Any, str]]) -> int: ...
def record_keys(lk_of: dict[str, bytes], keyed: list[tuple[Any, str]], seq: int
                ) -> tuple[list[bytes], int]: ...
def bookmark_strs(recs: list[Any]) -> list[str] | None: ...
def sow_keyed(prefix: bytes, field: str, docs: list[Any]) -> list[tuple[Any, str]]: ...
def crc32(data: bytes | bytearray | memoryview, value: int = 0) -> int: ...

#: 1 when crc32 (and the journal frames' CRC) folds with PCLMULQDQ, 0 when it uses tables
crc_clmul: int
@overload
def sow_frames(
    prefix: bytes,
    rows: list[tuple[bytes, bytes]],
    with_key: bool,
    stamps: list[bytes] | None,
    start: int,
    end: int,
    batch: int,
    joined: Literal[False] = ...,
) -> list[bytes]: ...
@overload
def sow_frames(
    prefix: bytes,
    rows: list[tuple[bytes, bytes]],
    with_key: bool,
    stamps: list[bytes] | None,
    start: int,
    end: int,
    batch: int,
    joined: Literal[True],
) -> bytes: ...
def sow_values(
    version: int,
    bodies: list[bytes | memoryview],
    bookmarks: list[str],
    positions: list[int],
    timestamps: list[float],
) -> list[bytes]: ...
def frame_parts(head: bytes, sids: bytes, tail: bytes, body: bytes) -> bytes: ...
def fan_send(targets: list[tuple[Callable[[bytes], None], bytes, Any]], head: bytes,
             tail: bytes, body: bytes) -> int: ...
def replay_frames(
    data: bytes,
    start: int,
    next_pos: int,
    limit: int,
    name: bytes,
    mt: bytes,
    head: bytes,
    max_records: int,
    max_bytes: int,
) -> tuple[int, int, int, int, int, int, bytes, int, int, int]: ...
def set_fallbacks(append_record: Callable[..., int], frame_size: Callable[..., int]) -> None: ...

class Filler:
    """A bytes object of ``size`` bytes filled piece by piece, then taken whole (the frame
    decoder's large bodies). Twin: ``protocol.codec.FillerPy``."""

    def __init__(self, size: int) -> None: ...
    def write(self, data: bytes | bytearray | memoryview, start: int) -> int: ...
    def take(self) -> bytes: ...
    @property
    def remaining(self) -> int: ...
    @property
    def filled(self) -> int: ...

class Syncer:
    """The transaction log's group fdatasync on a thread without the GIL (not on Windows);
    no pure-Python twin: without it server/txlog.py syncs in a worker thread."""

    def __init__(self, wake_fd: int) -> None: ...
    def start(self, fds: list[int], dir_fd: int, target: int) -> None: ...
    def extend(self, target: int) -> bool: ...
    def synced(self) -> int: ...
    def result(self) -> tuple[int, int] | None: ...
    def wait(self) -> tuple[int, int] | None: ...
    def close(self) -> None: ...
