"""Header formats of the legacy ``fix``, ``nvfix`` and ``xml`` protocols (sans-IO).

A transport with ``<Protocol>fix</Protocol>`` (or ``nvfix``, ``xml``) frames commands as the
``amps`` protocol does -- a 4-byte big-endian length, then the payload -- but the payload's
header is not a JSON object: it travels in the format of the protocol, and the body follows it.
The official clients speak these formats when the URI's path names the protocol
(``tcp://host:port/fix``); the connection's message type is the transport's ``MessageType``.

``fix`` and ``nvfix`` (one format): header fields ``TAG=value`` each ended by ``0x01``, tags
numbered from 20000 (:data:`TAGS`); ``0x02`` ends the header and the body follows.  A
delivery's command is written ``publish`` (the ``amps`` protocol's ``p`` is expanded by the
client's JSON header reader, which a legacy client does not have).  In a
message with a body (``p``, ``oof``, each ``sow`` record) the header carries the body length
(tag 20058), which the client needs to find the body; a batched ``sow`` is the query's header,
``0x02``, then per record its own fields, ``0x02``, the body and one separator byte.

``xml``: a SOAP envelope.  ``<SOAP-ENV:Envelope><SOAP-ENV:Header>`` holds one element per
field (:data:`XML_NAMES`; where the Command Reference and the official client spell a name
differently, both are read and the client's is written, since an element the client does not
know ends its scan of the header), ``<SOAP-ENV:Body>`` the body as is; a batched ``sow`` puts each
record in the body as ``<Msg key="K" len="N">body</Msg>``.  Clients write some values as
CDATA and read names, topics, users, passwords and subscription ids with the five XML
entities, which the server writes that way; other values travel as they are.

The server keeps speaking JSON internally: :func:`to_amps_payload` turns an inbound legacy
payload into the ``amps`` payload (JSON header + body) the command parser reads, and
:func:`from_amps_frames` turns the frames the server writes into legacy frames.
"""

from __future__ import annotations

import re
from typing import Any
from xml.sax.saxutils import escape as _xml_escape
from xml.sax.saxutils import unescape as _xml_unescape

import msgspec

from amps_emulator.protocol.codec import header_end, payloads_of

__all__ = ["LEGACY_PROTOCOLS", "LegacyFormatError", "TAGS", "XML_NAMES", "to_amps_payload",
           "from_amps_frames", "tag_header", "xml_header"]

LEGACY_PROTOCOLS = ("fix", "nvfix", "xml")

#: FIX header tag -> the ``amps`` protocol's JSON header key (the tags of the Command
#: Reference's protocol chapter; 20026, which the official client writes for ``orderby``, too)
TAGS: dict[int, str] = {
    20000: "c", 20001: "cid", 20002: "client_name", 20003: "user_id", 20004: "ts", 20005: "t",
    20006: "filter", 20007: "mt", 20008: "a", 20009: "sub_id", 20011: "version", 20012: "e",
    20014: "data_only", 20015: "heartbeat", 20017: "lp", 20018: "status", 20019: "query_id",
    20023: "bs", 20025: "top_n", 20026: "orderby", 20032: "sow_keys", 20035: "x", 20036: "s",
    20037: "bm", 20038: "pw", 20039: "o", 20052: "records_inserted", 20053: "records_updated",
    20054: "records_deleted", 20055: "records_returned", 20056: "topic_matches",
    20057: "matches", 20058: "l", 20059: "k", 20060: "gseq", 20061: "sids", 20062: "reason",
}
_TAG_ALIASES = {20074: "x"}  # CorrelationID, as the reference also lists it

#: SOAP header element -> JSON header key, as the server writes them: the names the official
#: client reads (an element it does not know ends its header scan)
_XML_OUT: dict[str, str] = {
    "Cmd": "c", "CmdId": "cid", "ClntName": "client_name", "UsrId": "user_id", "TxmTm": "ts",
    "Tpc": "t", "Fltr": "filter", "MsgTyp": "mt", "AckTyp": "a", "SubId": "sub_id",
    "Version": "version", "Expn": "e", "Hrtbt": "heartbeat", "LeasePrd": "lp",
    "Status": "status", "QId": "query_id", "BtchSz": "bs", "TopN": "top_n",
    "OrderBy": "orderby", "SowKeys": "sow_keys", "CrlId": "x", "Seq": "s", "BkMrk": "bm",
    "PW": "pw", "Opts": "o", "RecordsInserted": "records_inserted",
    "RecordsUpdated": "records_updated", "RecordsDeleted": "records_deleted",
    "RecordsReturned": "records_returned", "TopicMatches": "topic_matches",
    "Matches": "matches", "SowKey": "k", "GrpSqNum": "gseq", "SubIds": "sids",
    "Reason": "reason",
}
#: every SOAP header element read inbound: the client's names and the reference's spellings
XML_NAMES: dict[str, str] = {
    **_XML_OUT, "MsgLn": "l", "MsgLen": "l", "LeasePeriod": "lp", "CorrelationId": "x",
    "DatOnly": "data_only",
}

# the other spellings of a key the server may write (protocol.headers.CLIENT_KNOWN_KEYS)
_ALIASES = {
    "cmd": "c", "cmd_id": "cid", "topic": "t", "ack_type": "a", "seq": "s", "expiration": "e",
    "opts": "o", "sub_ids": "sids", "bookmark": "bm", "batch_size": "bs",
    "group_seq_num": "gseq", "password": "pw", "timestamp": "ts", "lease_period": "lp",
}
_KEY_TAG = {key: tag for tag, key in TAGS.items()}
_KEY_XML = {key: name for name, key in _XML_OUT.items()}
# values the client reads with entities (and every client writes as CDATA)
_XML_ESCAPED = frozenset({"client_name", "t", "user_id", "pw", "sub_id"})
_WITH_BODY = frozenset({"p", "publish", "oof"})

_ENVELOPE = b"<SOAP-ENV:Envelope><SOAP-ENV:Header>"
_HEADER_END = b"</SOAP-ENV:Header><SOAP-ENV:Body>"
_BODY_END = b"</SOAP-ENV:Body></SOAP-ENV:Envelope>"
_XML_FIELD = re.compile(rb"<([A-Za-z]+)>(?:<!\[CDATA\[(.*?)\]\]>|([^<]*))</\1>", re.DOTALL)
_XML_ENTITIES = {"&quot;": '"', "&apos;": "'"}

_json_encode = msgspec.json.encode
_json_decode = msgspec.json.Decoder(dict).decode


class LegacyFormatError(ValueError):
    """A payload that is not a header of the legacy protocol; the connection closes."""


# ---- inbound: legacy payload -> amps payload -----------------------------------------------

def _text(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise LegacyFormatError(f"{what} is not UTF-8") from None


def _from_tags(payload: bytes) -> tuple[dict[str, str], bytes]:
    end = payload.find(b"\x02")
    head, body = (payload, b"") if end < 0 else (payload[:end], payload[end + 1:])
    header: dict[str, str] = {}
    for field in head.split(b"\x01"):
        if not field:
            continue
        tag, eq, value = field.partition(b"=")
        if not eq or not tag.isdigit():
            raise LegacyFormatError(f"header field {field[:40]!r} is not TAG=value")
        n = int(tag)
        key = TAGS.get(n) or _TAG_ALIASES.get(n)
        if key is not None:
            header[key] = _text(value, f"header tag {n}")
    return header, body


def _from_xml(payload: bytes) -> tuple[dict[str, str], bytes]:
    if not payload.startswith(b"<SOAP-ENV:Envelope>"):
        raise LegacyFormatError("payload is not a SOAP-ENV:Envelope")
    hend = payload.find(b"</SOAP-ENV:Header>")
    if hend < 0:
        raise LegacyFormatError("no </SOAP-ENV:Header>")
    header: dict[str, str] = {}
    for m in _XML_FIELD.finditer(payload, 0, hend):
        key = XML_NAMES.get(_text(m.group(1), "an element name"))
        if key is None:
            continue
        cdata, plain = m.group(2), m.group(3)
        header[key] = (_text(cdata, key) if cdata is not None
                       else _xml_unescape(_text(plain or b"", key), _XML_ENTITIES))
    bstart = payload.find(b"<SOAP-ENV:Body>", hend)
    if bstart < 0:
        return header, b""
    bstart += len(b"<SOAP-ENV:Body>")
    bend = payload.rfind(b"</SOAP-ENV:Body>")
    return header, payload[bstart:bend if bend >= bstart else len(payload)]


def to_amps_payload(protocol: str, payload: bytes) -> bytes:
    """The ``amps`` payload (JSON header + body) of one inbound frame of ``protocol``;
    :class:`LegacyFormatError` when the payload is not that protocol's."""
    header, body = _from_xml(payload) if protocol == "xml" else _from_tags(payload)
    if "c" not in header:
        raise LegacyFormatError("header names no command")
    return _json_encode(header) + body


# ---- outbound: amps frames -> legacy frames --------------------------------------------------

def _value_text(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return v if isinstance(v, str) else str(v)


def _fields(header: dict[str, Any]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for k, v in header.items():
        if v is None:
            continue
        key = _ALIASES.get(k, k)
        if key in _KEY_TAG:
            out.append((key, _value_text(v)))
    return out


def tag_header(header: dict[str, Any]) -> bytes:
    """The header fields of ``header`` in the fix/nvfix format (without the ending ``0x02``)."""
    return b"".join(b"%d=%s\x01" % (_KEY_TAG[k], v.encode("utf-8")) for k, v in _fields(header))


def xml_header(header: dict[str, Any]) -> bytes:
    """The SOAP header elements of ``header``."""
    parts = []
    for k, v in _fields(header):
        name = _KEY_XML.get(k)
        if name is None:  # the body length: the client reads the body to the envelope's end
            continue
        text = _xml_escape(v, {'"': "&quot;", "'": "&apos;"}) if k in _XML_ESCAPED else v
        parts.append(f"<{name}>{text}</{name}>")
    return "".join(parts).encode("utf-8")


def _records(rest: bytes) -> list[tuple[dict[str, Any], bytes]]:
    """The ``(record header, body)`` pairs of a batched sow frame after its outer header."""
    out: list[tuple[dict[str, Any], bytes]] = []
    pos = 0
    while pos < len(rest):
        end = header_end(rest[pos:])
        if end < 0:
            break
        rec = _json_decode(rest[pos:pos + end])
        start = pos + end
        length = rec.get("l")
        n = length if isinstance(length, int) and length >= 0 else len(rest) - start
        out.append((rec, rest[start:start + n]))
        pos = start + n
    return out


def _legacy_payload(protocol: str, header: dict[str, Any], body: bytes) -> bytes:
    c = header.get("c", header.get("cmd"))
    if c == "p":  # the amps protocol's short form; a legacy client reads the command as sent
        header = {**header, "c": "publish"}
    xml = protocol == "xml"
    if c == "sow":
        records = _records(body)
        if xml:
            msgs = b"".join(b'<Msg key="%s" len="%d">%s</Msg>'
                            % (_value_text(rec.get("k", "-")).encode("utf-8"), len(data), data)
                            for rec, data in records)
            return _ENVELOPE + xml_header(header) + _HEADER_END + msgs + _BODY_END
        parts = [tag_header(header), b"\x02"]
        for rec, data in records:
            rec["l"] = len(data)
            parts += [tag_header(rec), b"\x02", data, b"\x01"]
        return b"".join(parts)
    if c in _WITH_BODY or body:
        header = {**header, "l": len(body)}
    if xml:
        return _ENVELOPE + xml_header(header) + _HEADER_END + body + _BODY_END
    return tag_header(header) + b"\x02" + body


def from_amps_frames(protocol: str, data: bytes) -> bytes:
    """The frames the server wrote (length-prefixed ``amps`` payloads) in ``protocol``."""
    out: list[bytes] = []
    for payload in payloads_of(data):
        end = header_end(payload)
        if end < 0:
            continue  # not produced by this server; never expected
        try:
            header = _json_decode(payload[:end])
        except (msgspec.DecodeError, UnicodeDecodeError):
            continue
        legacy = _legacy_payload(protocol, header, payload[end:])
        out.append(len(legacy).to_bytes(4, "big") + legacy)
    return b"".join(out)
