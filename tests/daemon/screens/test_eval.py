"""The parser eval: every committed and captured screen reads exactly as its JSON says."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from openbus.daemon.screens import ClaudeStatus, Evidence, parse, rule_of

HERE = Path(__file__).parent
SETS = ("cases", "captured")
CHECKED = ("state", "composer_empty", "title", "pr_links")
MENU_KEYS = ("menu_question", "menu_options", "menu_detail_contains")


def _cases() -> list[tuple[str, Path]]:
    found: list[tuple[str, Path]] = []
    for name in SETS:
        folder = HERE / name
        if folder.is_dir():
            found.extend(
                (f"{name}/{p.relative_to(folder).with_suffix('')}", p)
                for p in sorted(folder.rglob("*.txt"))
            )
    return found


def _evidence(doc: dict[str, Any], screen: Path) -> Evidence:
    raw = dict(doc.get("evidence") or {})
    status = raw.pop("claude_status", None)
    # a pin's folder (captured/claude-2.1.332/idle.txt) or the file (cases/claude-idle.txt)
    named = screen.parent.name if screen.parent.name not in SETS else screen.stem
    harness = doc.get("harness") or named.split("-", 1)[0]
    return Evidence(
        harness=harness,
        pane_title=raw.get("pane_title", ""),
        hostname=raw.get("hostname", ""),
        dead=bool(raw.get("dead", False)),
        in_mode=bool(raw.get("in_mode", False)),
        screen_still=raw.get("screen_still"),
        claude_status=(
            ClaudeStatus(status=status["status"], waiting_for=status.get("waiting_for"))
            if status
            else None
        ),
    )


CASES = _cases()


def test_the_eval_set_holds_every_shared_screen() -> None:
    names = {case_id for case_id, _ in CASES}
    assert len([n for n in names if n.startswith("cases/")]) >= 17
    for screen in ("claude-idle", "claude-running", "codex-permission-prompt"):
        assert f"cases/{screen}" in names


@pytest.mark.parametrize(("case_id", "screen"), CASES, ids=[c for c, _ in CASES])
def test_screen_reads_as_expected(case_id: str, screen: Path) -> None:
    meta = screen.with_suffix(".json")
    assert meta.exists(), f"{case_id}: no expected JSON beside the screen ({meta.name})"
    doc = json.loads(meta.read_text(encoding="utf-8"))
    expect: dict[str, Any] = doc.get("expect") or {
        k: v for k, v in doc.items() if k in (*CHECKED, *MENU_KEYS, "summary_contains")
    }
    evidence = _evidence(doc, screen)
    reading = parse(screen.read_text(encoding="utf-8", errors="replace"), evidence)
    got = reading.to_dict()
    # what `openbus explain` shows: the reading names one of its parser's rules
    assert rule_of(evidence.harness, reading.rule) is not None, (
        f"{case_id}: rule {reading.rule!r} is not one of the {evidence.harness} parser's RULES"
    )
    for key in CHECKED:
        if key in expect:
            assert got[key] == expect[key], (
                f"{case_id}: {key} is {got[key]!r}, expected {expect[key]!r}"
            )
    menu = got["menu"]
    if "menu_question" in expect:
        assert menu is not None, f"{case_id}: no menu read"
        assert menu["question"] == expect["menu_question"], f"{case_id}: {menu}"
    if "menu_options" in expect:
        assert menu is not None, f"{case_id}: no menu read"
        options = [[o["key"], o["label"]] for o in menu["options"]]
        assert options == expect["menu_options"], f"{case_id}: options {options}"
    if "menu_detail_contains" in expect:
        assert menu is not None and expect["menu_detail_contains"] in menu["detail"], (
            f"{case_id}: detail {menu}"
        )
    if got["state"] != "menu":
        assert menu is None, f"{case_id}: a menu outside the menu state"
    if "summary_contains" in expect:
        assert expect["summary_contains"] in reading.summary, (
            f"{case_id}: summary {reading.summary!r}"
        )
    assert "\n" not in reading.summary
