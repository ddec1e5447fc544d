"""What a message's text may hold: printable characters and newlines, under a byte cap."""

from __future__ import annotations

import pytest

from openbus.daemon.core.message_text import check_text
from openbus.kernel.errors import BadRequest, Refused


@pytest.mark.parametrize(
    "bad",
    [
        "\x1b[2J",
        "a\rb",
        "a\tb",
        "\x00",
        "\x7f",
        "\x85",
        "x\u202ey",
        "\u2066x\u2069",
        "\u200f",
        "\u200e",
        "\u061c",
        "\u200d",
        "\ufeff",
        "line\u2028sep",
        "\ue000",
        "\ud800",
    ],
)
def test_control_format_and_bidi_characters_are_refused_naming_the_code_point(bad: str) -> None:
    with pytest.raises(Refused, match=r"U\+[0-9A-F]{4}") as err:
        check_text("ok " + bad, 1000)
    assert err.value.field == "text"


@pytest.mark.parametrize(
    "good", ["hello\nworld", "caf\u00e9 \u00a0 \u3000 \u4e2d\u6587", "\U0001f600 ok", "a" * 10]
)
def test_printable_text_newlines_and_spaces_are_admitted(good: str) -> None:
    assert check_text(good, 1000) == len(good.encode())


def test_the_byte_cap_counts_utf8_bytes_not_characters() -> None:
    assert check_text("\u00e9" * 5, 10) == 10
    with pytest.raises(Refused, match="11 bytes"):
        check_text("\u00e9" * 5 + "x", 10)


def test_empty_or_non_string_text_is_a_bad_request() -> None:
    with pytest.raises(BadRequest):
        check_text("", 10)
    with pytest.raises(BadRequest):
        check_text(5, 10)
