"""protocol.legacy: fix/nvfix and xml headers <-> the amps protocol's JSON header."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from amps_emulator.protocol.codec import ack, frame, header_end, sow_batch
from amps_emulator.protocol.legacy_headers import (
    LegacyFormatError,
    from_amps_frames,
    to_amps_payload,
)


def _split(payload: bytes) -> tuple[dict, bytes]:
    end = header_end(payload)
    return msgspec.json.decode(payload[:end]), payload[end:]


def test_fix_header_to_json():
    header, body = _split(to_amps_payload(
        "fix", b"20000=publish\x0120005=orders\x0120001=7\x0199999=x\x01\x0235=D\x0155=IBM\x01"))
    assert header == {"c": "publish", "t": "orders", "cid": "7"}
    assert body == b"35=D\x0155=IBM\x01"


def test_xml_header_to_json():
    header, body = _split(to_amps_payload(
        "xml", b"<SOAP-ENV:Envelope><SOAP-ENV:Header><Cmd>p</Cmd><Tpc><![CDATA[a<b]]></Tpc>"
               b"<ClntName>x&amp;y</ClntName><Other>1</Other></SOAP-ENV:Header>"
               b"<SOAP-ENV:Body><o/></SOAP-ENV:Body></SOAP-ENV:Envelope>"))
    assert header == {"c": "p", "t": "a<b", "client_name": "x&y"}
    assert body == b"<o/>"


def _frames(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        n = int.from_bytes(data[pos:pos + 4], "big")
        out.append(data[pos + 4:pos + 4 + n])
        pos += 4 + n
    return out


def test_outbound_fix_publish_ack_and_sow_batch():
    data = (frame({"c": "p", "t": "o", "s": 3}, b"55=IBM\x01") + ack("9", "processed")
            + sow_batch("o", "q1", [({"k": "1"}, b"a=1\x01"), ({"k": "2"}, b"a=22\x01")]))
    p, a, s = _frames(from_amps_frames("fix", data))
    assert p == b"20000=publish\x0120005=o\x0120036=3\x0120058=7\x01\x0255=IBM\x01"
    assert a.startswith(b"20000=ack\x0120001=9\x01") and a.endswith(b"\x02")
    assert s == (b"20000=sow\x0120005=o\x0120019=q1\x01\x02"
                 b"20059=1\x0120058=4\x01\x02a=1\x01\x01"
                 b"20059=2\x0120058=5\x01\x02a=22\x01\x01")


def test_outbound_xml_escapes_names_and_wraps_sow_records():
    data = frame({"c": "p", "t": "a&b"}, b"<x/>") + sow_batch("o", "q", [({"k": "5"}, b"<y/>")])
    p, s = _frames(from_amps_frames("xml", data))
    assert p == (b"<SOAP-ENV:Envelope><SOAP-ENV:Header><Cmd>publish</Cmd><Tpc>a&amp;b</Tpc>"
                 b"</SOAP-ENV:Header><SOAP-ENV:Body><x/></SOAP-ENV:Body>"
                 b"</SOAP-ENV:Envelope>")
    assert b'<SOAP-ENV:Body><Msg key="5" len="4"><y/></Msg></SOAP-ENV:Body>' in s


@pytest.mark.parametrize("payload", [b"", b"abc\x01\x02", b"20000\x01\x02", b"=x\x01",
                                     b"20005=t\x01\x02"])
def test_bad_fix_headers(payload):
    with pytest.raises(LegacyFormatError):
        to_amps_payload("fix", payload)


@given(st.binary(max_size=200), st.sampled_from(["fix", "nvfix", "xml"]))
def test_inbound_raises_only_format_errors(payload, protocol):
    try:
        out = to_amps_payload(protocol, payload)
    except LegacyFormatError:
        return
    assert _split(out)[0]["c"] is not None


_values = st.text(alphabet=st.characters(blacklist_categories=("Cs",),
                                         blacklist_characters="\x00\x01\x02<>&\"'"),
                  min_size=1, max_size=10)


@given(st.fixed_dictionaries({"c": st.sampled_from(["ack", "publish", "oof"]), "t": _values},
                             optional={"cid": _values, "client_name": _values,
                                       "sub_id": _values, "status": _values}),
       st.binary(max_size=30).filter(lambda b: b"\x02" not in b), st.sampled_from(["fix", "xml"]))
def test_round_trip_through_the_legacy_format(header, body, protocol):
    (legacy,) = _frames(from_amps_frames(protocol, frame(header, body)))
    back, back_body = _split(to_amps_payload(protocol, legacy))
    back.pop("l", None)
    assert back == header and back_body == body


def test_the_reference_spellings_are_read_too():
    header, _ = _split(to_amps_payload(
        "xml", b"<SOAP-ENV:Envelope><SOAP-ENV:Header><Cmd>p</Cmd><CorrelationId>c1</CorrelationId>"
               b"<LeasePeriod>5</LeasePeriod></SOAP-ENV:Header></SOAP-ENV:Envelope>"))
    assert header == {"c": "p", "x": "c1", "lp": "5"}
    header, _ = _split(to_amps_payload("fix", b"20000=p\x0120074=c2\x0120014=true\x01\x02"))
    assert header == {"c": "p", "x": "c2", "data_only": "true"}
