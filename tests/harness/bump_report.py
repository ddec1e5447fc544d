"""What a new harness version changes in the screen parsers' eval set.

Run: ``.venv/bin/python -m tests.harness.bump_report PIN`` after ``capture_screens PIN`` (``make
harness-bump PIN=...`` runs both). For every case captured from PIN it prints how the parsers read
the new screen against the state it was captured in (``ok`` / ``WRONG``), and whether the screen
and the reading differ from the same case captured from the pin in use (``same``, ``screen
changed``, ``reading changed``, ``new case``). Exits 1 while any case reads wrong.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from openbus.daemon.screens import ClaudeStatus, Evidence, parse
from tests.support.harnesses import pin

CAPTURED = Path(__file__).resolve().parents[1] / "daemon" / "screens" / "captured"
CHECKED = ("state", "composer_empty")


def _reading(screen: Path) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """The screen's text, its expected reading and the parsers' reading of it."""
    doc = json.loads(screen.with_suffix(".json").read_text(encoding="utf-8"))
    raw = doc.get("evidence") or {}
    status = raw.get("claude_status")
    evidence = Evidence(
        harness=doc["harness"],
        pane_title=raw.get("pane_title", ""),
        dead=bool(raw.get("dead", False)),
        claude_status=(
            ClaudeStatus(status=status["status"], waiting_for=status.get("waiting_for"))
            if status
            else None
        ),
    )
    text = screen.read_text(encoding="utf-8", errors="replace")
    expected = doc.get("expect") or doc
    return text, {k: expected.get(k) for k in CHECKED}, parse(text, evidence).to_dict()


def _baseline(name: str, case: str) -> Path | None:
    """The same case captured from the pin in use (its folder, else the older flat file)."""
    in_use = pin(name)
    for path in (CAPTURED / in_use.id / f"{case}.txt", CAPTURED / f"{name}-{case}.txt"):
        if path.exists():
            return path
    return None


def report(pin_id: str) -> int:
    folder = CAPTURED / pin_id
    screens = sorted(folder.glob("*.txt"))
    if not screens:
        print(f"nothing captured in {folder} (run capture_screens {pin_id})", file=sys.stderr)
        return 2
    name = pin_id.partition("-")[0]
    wrong = 0
    print(f"{'case':32} {'expected':22} {'read':22} {'verdict':7} against {pin(name).id}")
    for screen in screens:
        text, expected, got = _reading(screen)
        read = {k: got[k] for k in CHECKED}
        verdict = "ok" if read == expected else "WRONG"
        wrong += verdict == "WRONG"
        base = _baseline(name, screen.stem)
        if base is None:
            change = "new case"
        else:
            base_text, _, base_got = _reading(base)
            if {k: base_got[k] for k in CHECKED} != read:
                change = f"reading changed (was {base_got['state']}/{base_got['composer_empty']})"
            else:
                change = "screen changed" if base_text != text else "same"
        shown = [
            f"{expected['state']}/{expected['composer_empty']}",
            f"{got['state']}/{got['composer_empty']}",
        ]
        print(f"{screen.stem:32} {shown[0]:22} {shown[1]:22} {verdict:7} {change}")
    print(f"{len(screens) - wrong}/{len(screens)} read right")
    return 1 if wrong else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -m tests.harness.bump_report PIN", file=sys.stderr)
        raise SystemExit(2)
    raise SystemExit(report(sys.argv[1]))
