"""``make harness-bump``'s report over the captures committed for each pin."""

from __future__ import annotations

import pytest

from tests.harness.bump_report import report
from tests.support.harnesses import PINS


@pytest.mark.parametrize("pin_id", [p.id for p in PINS])
def test_every_pins_captures_read_as_captured_and_the_report_says_what_changed(
    pin_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert report(pin_id) == 0
    out = capsys.readouterr().out
    lines = out.strip().splitlines()
    total = len(lines) - 2  # the header and the tally
    # every state of a Claude Code or Codex pin, in three sizes; the newer harnesses' fewer
    least = 20 if pin_id.startswith(("claude-", "codex-")) else 10
    assert lines[-1] == f"{total}/{total} read right" and total >= least
    assert "WRONG" not in out
    if pin_id == "claude-2.1.332":  # compared with the pin in use, 2.1.197
        assert "screen changed" in out and "idle/True" in out


def test_a_pin_without_captures_is_refused_with_the_step_to_take(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert report("claude-0.0.1") == 2
    assert "run capture_screens claude-0.0.1" in capsys.readouterr().err
