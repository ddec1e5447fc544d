"""Why Connect cannot be honoured: each case has its own one-line reason (pure)."""

from __future__ import annotations

from typing import Any

from openbus.daemon.connect_refusals import (
    LaunchNote,
    PaneFacts,
    needs_new_token,
    refusal,
    why_not,
)
from openbus.kernel.errors import Conflict, NotFound

INC = "inc_1"


def note(launcher: str, harness: str, *, structured: bool = True, preset: str = "off") -> Any:
    return LaunchNote(launcher, harness, structured, preset, INC)


def facts(**given: Any) -> PaneFacts:
    return PaneFacts("%4", **{"shown": True, "incarnation": INC, **given})


def test_a_connected_pane_has_no_reason() -> None:
    assert why_not(facts(harness="claude", connected=True)) is None
    assert refusal(facts(harness="claude", connected=True)) is None


def test_each_pane_connect_cannot_honour_gets_its_own_reason() -> None:
    reasons = {
        "missing": why_not(PaneFacts("%4", shown=False)),
        "revoked": why_not(facts(harness="claude", revoked=True)),
        "shell": why_not(facts(harness="shell")),
        "opaque": why_not(
            facts(harness="unknown", launch=note("legacy", "codex", structured=False))
        ),
        "opencode": why_not(
            facts(harness="opencode", launch=note("o", "opencode", preset="observe"))
        ),
        "gemini here": why_not(
            facts(
                harness="gemini",
                launch=LaunchNote("g", "gemini", True, "observe", INC, "Gemini CLI refused here"),
            )
        ),
        "off": why_not(facts(harness="claude", launch=note("claude", "claude"))),
        "by hand": why_not(facts(harness="claude")),
        "gemini by hand": why_not(facts(harness="gemini")),
        "not an agent": why_not(facts(harness="unknown")),
    }
    assert reasons["missing"] == "no pane %4 in the fleet"
    assert "revoked" in reasons["revoked"]
    assert reasons["shell"] == "Connect is unavailable for a shell: it is not an agent"
    assert "'legacy'" in reasons["opaque"] and "opaque command launcher" in reasons["opaque"]
    assert reasons["opencode"].startswith("Connect is unavailable for OpenCode")
    assert reasons["gemini here"] == "Gemini CLI refused here"  # the launch's own reason
    assert "launched with preset Off" in reasons["off"]
    assert "started outside openbus" in reasons["by hand"]
    assert "could not reproduce its launch" in reasons["by hand"]
    assert "a running gemini is connected only at launch" in reasons["gemini by hand"]
    assert "no coding agent openbus recognises" in reasons["not an agent"]
    assert len(set(reasons.values())) == len(reasons)
    assert all("\n" not in r for r in reasons.values() if r)


def test_a_launch_note_of_an_earlier_incarnation_of_the_pane_does_not_count() -> None:
    stale = LaunchNote("claude", "claude", True, "off", "inc_old")
    assert "started outside openbus" in str(why_not(facts(harness="claude", launch=stale)))


def test_a_missing_pane_is_not_found_and_the_rest_are_conflicts() -> None:
    assert isinstance(refusal(PaneFacts("%4", shown=False)), NotFound)
    assert isinstance(refusal(facts(harness="shell")), Conflict)
    assert refusal(facts(harness="shell")).field == "pane"  # type: ignore[union-attr]


def test_how_openbus_launched_a_pane_outranks_what_its_screen_looks_like() -> None:
    assert "launched with preset Off" in str(
        why_not(facts(harness="shell", launch=note("claude", "claude")))
    )


def test_only_a_structured_launch_without_a_token_goes_to_restart_to_connect() -> None:
    assert needs_new_token(facts(harness="claude", launch=note("claude", "claude")))
    assert needs_new_token(facts(harness="claude", revoked=True))
    assert not needs_new_token(facts(harness="claude"))  # typed into a shell: nothing to redo
    assert not needs_new_token(facts(harness="codex"))
    assert not needs_new_token(facts(harness="shell"))
    assert not needs_new_token(facts(harness="claude", launch=note("x", "codex", structured=False)))
