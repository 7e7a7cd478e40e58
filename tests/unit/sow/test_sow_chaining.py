"""The chaining key generator alone: chains, refusals, Validation, the FileName."""

from __future__ import annotations

import pytest

from amps_emulator.protocol.reasons import CommandError
from amps_emulator.sow.auxiliary import ChainingKeyGenerator, ChainSpec
from amps_emulator.sow.keys import generate_sow_key


def gen(tmp_path=None, validation=False) -> ChainingKeyGenerator:
    name = None if tmp_path is None else str(tmp_path / "sub" / "t.chain")
    return ChainingKeyGenerator("t", ChainSpec("/doc", ("/parent", "/related"), name, validation))


def key(head) -> str:
    return generate_sow_key("t", (str(head),))


def test_every_document_of_a_chain_gets_the_key_of_its_head():
    g = gen()
    assert g({"doc": 1}) == key(1)
    assert g({"doc": 2, "parent": 1}) == key(1)
    assert g({"doc": 3, "parent": "2"}) == key(1)  # (identifiers compare as text)
    assert g({"doc": 4, "related": 3}) == key(1)
    assert g({"doc": 9, "parent": 8}) == key(8)  # an unknown parent names a chain of its own
    assert g({"doc": 8}) == key(8)
    assert g({"doc": 1}) == key(1)


@pytest.mark.parametrize("doc", [{"doc": 3, "parent": 1, "related": 2}, {"doc": 1, "parent": 2},
                                 {"other": 1}, {"doc": ""}, "not an object"])
def test_a_message_of_two_chains_or_of_none_is_refused(doc):
    g = gen()
    g({"doc": 1})
    g({"doc": 2})
    with pytest.raises(CommandError) as info:
        g(doc)
    assert info.value.reason == "bad sow key"
    assert g({"doc": 5, "parent": 1}) == key(1)  # (nothing of the refused one was recorded)


def test_validation_refuses_what_arrival_order_would_have_joined():
    for validation, refused in ((False, False), (True, True)):
        g = gen(validation=validation)
        assert g({"doc": 3, "parent": 2}) == key(2)
        if refused:  # 2 was referenced as the head of a chain: 2 naming 1 joins two chains
            with pytest.raises(CommandError):
                g({"doc": 2, "parent": 1})
        else:
            assert g({"doc": 2, "parent": 1}) == key(1)


def test_the_chains_outlive_the_generator_in_its_file(tmp_path):
    g = gen(tmp_path)
    g({"doc": 1})
    g({"doc": 2, "parent": 1})
    path = tmp_path / "sub" / "t.chain"
    with open(path, "ab") as f:
        f.write(b'["7", "')  # a line cut short by a crash
    again = gen(tmp_path)
    assert again({"doc": 3, "parent": 2}) == key(1)
    assert gen(tmp_path)({"doc": 4, "parent": 3}) == key(1)
