"""Pane ids and session ids have one form, checked in one place."""

from __future__ import annotations

import pytest

from openbus.kernel.errors import BadRequest
from openbus.kernel.ids import SESSION_ID, check_pane_id, is_pane_id


@pytest.mark.parametrize("value", ["%0", "%3", "%123456789"])
def test_a_tmux_pane_id_is_a_percent_and_ascii_digits(value: str) -> None:
    assert is_pane_id(value) and check_pane_id(value) == value


@pytest.mark.parametrize("value", ["3", "%", "%1234567890", "%\u0663", "%3 ", "%3\n", None, 3])
def test_anything_else_is_refused_naming_the_field(value: object) -> None:
    assert not is_pane_id(value)
    with pytest.raises(BadRequest) as caught:
        check_pane_id(value, field="target")
    assert caught.value.field == "target"


def test_a_session_id_starts_with_a_letter_or_digit_and_is_at_most_128_characters() -> None:
    assert SESSION_ID.fullmatch("7f3c-9a.b:c_d")
    assert SESSION_ID.fullmatch("a" * 128)
    assert not SESSION_ID.fullmatch("a" * 129)
    assert not SESSION_ID.fullmatch("-leading")
