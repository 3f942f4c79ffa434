"""The service's refusals name the route's field (the service itself knows no field), and what counts as an empty
text."""

from __future__ import annotations

import pytest

from bertkit.serve.core.checks import is_blank
from bertkit.serve.core.errors import InputRejected, fields


@pytest.mark.parametrize(
    "names,single,index,want",
    [
        ({}, False, 3, "inputs[3]"),
        ({"inputs": "texts"}, False, 3, "texts[3]"),
        ({"inputs": "texts"}, False, None, "texts"),
        ({"inputs": "inputs[{i}].question"}, False, 2, "inputs[2].question"),
        ({"inputs": "inputs[{i}].question"}, False, None, "inputs"),
        ({"inputs": "question"}, True, 0, "question"),
    ],
)
def test_refusals_take_the_routes_field_names(names, single, index, want):
    with pytest.raises(Exception) as err, fields(single=single, **names):
        raise InputRejected("inputs", index, "'{field}' is empty", "Empty")
    assert not isinstance(err.value, InputRejected)
    assert err.value.message == f"'{want}' is empty" and err.value.param == want and err.value.status == 400


def test_a_text_of_only_invisible_characters_is_blank():
    for text in ["", "   ", "\u200b", "\u0001\u0002", "\ufeff\u200d \t", "\ufffd"]:
        assert is_blank(text), repr(text)
    for text in ["a", " \u200bx", "é", "日"]:
        assert not is_blank(text), repr(text)
