"""The screen helpers every parser shares."""

from __future__ import annotations

from pathlib import Path

import pytest

from openbus.daemon.screens.base import last_line, last_nonblank, screen_lines

CASES = sorted((Path(__file__).parent / "cases").glob("*.txt"))


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\n\n  \n",
        "one",
        "$ echo hi\nhi\n$ \n\n",
        "tick 1\r\ntick 2\r\n",
        "\x1b[1mbold\x1b[0m last  \n   \n",
        "  indented last line  ",
        "first\n\tsecond\t\n\n",
    ],
)
def test_the_last_line_is_the_last_non_blank_line_of_the_screen(text: str) -> None:
    assert last_line(text) == last_nonblank(screen_lines(text))


@pytest.mark.parametrize("case", CASES, ids=[case.stem for case in CASES])
def test_the_last_line_of_each_captured_screen_is_its_last_non_blank_line(case: Path) -> None:
    text = case.read_text()
    assert last_line(text) == last_nonblank(screen_lines(text))
