"""JSON from outside: anything that does not read is a ValueError, however deep it nests."""

from __future__ import annotations

import pytest

from openbus.kernel.json_text import TooDeep, loads


def test_json_reads_as_json_loads_reads_it() -> None:
    assert loads(b'{"a": [1, "x"]}') == {"a": [1, "x"]}
    assert loads('["\\ud800"]') == ["\ud800"]


@pytest.mark.parametrize("opening", ["[", '{"a":'])
def test_a_value_nested_past_the_decoders_depth_is_a_value_error(opening: str) -> None:
    closing = "]" if opening == "[" else "}"
    with pytest.raises(TooDeep) as caught:
        loads(opening * 100_000 + closing * 100_000)
    assert isinstance(caught.value, ValueError)


def test_text_that_is_not_json_is_a_value_error_as_before() -> None:
    with pytest.raises(ValueError):
        loads("{")
    with pytest.raises(ValueError):
        loads(b"\xff")
