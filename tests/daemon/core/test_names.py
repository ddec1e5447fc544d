"""Names people read: agents by title, harness, pane and branch; the rest in plain words."""

from __future__ import annotations

from openbus.daemon.core.names import (
    actor_harness,
    agent_name,
    composer_words,
    event_words,
    hop_words,
)


def test_an_agent_is_named_by_harness_title_pane_and_branch() -> None:
    assert agent_name("claude", "auth review", "%10", "fix/login") == (
        'claude "auth review" %10 on fix/login'
    )


def test_the_parts_not_known_are_left_out() -> None:
    assert agent_name("codex", None, "%3", None) == "codex %3"
    assert agent_name("unknown", "  ", "%3", "main") == "agent %3 on main"
    assert agent_name(None, None, None, None) == "agent"


def test_a_long_title_is_cut_and_flattened() -> None:
    name = agent_name("claude", "a\nvery " + "long " * 30, "%1", None)
    assert "\n" not in name and "\u2026" in name and len(name) < 80


def test_an_agent_actor_names_its_harness_and_nothing_else_is_an_agent() -> None:
    assert actor_harness("agent:claude:5f1c3c1e-8d1c-4a57-9d53-8f8f4c3b2a10") == "claude"
    assert actor_harness("agent:codex:pane:%3:123") == "codex"
    assert actor_harness("human:root") is None


def test_plain_words_instead_of_unknown_hop_0_and_none_arrows() -> None:
    assert composer_words(None) == "composer not visible on this screen"
    assert composer_words(True) == "composer empty" and composer_words(False).startswith("draft")
    assert hop_words(0) == "a new conversation" and hop_words(3) == "reply 3 in a conversation"
    assert event_words({"kind": "title", "from": None, "to": "auth review"}) == (
        'title set to "auth review"'
    )
    assert event_words({"kind": "title", "from": "a", "to": None}) == 'title "a" cleared'
    assert event_words({"kind": "state", "from": "idle", "to": "working"}) == (
        "now working (was idle)"
    )
    assert event_words({"kind": "appeared", "harness": "claude"}) == "appeared, running claude"
    assert event_words({"kind": "stale", "why": "its control client exited"}) == (
        "stale, last seen as shown: its control client exited"
    )
    assert "no longer stale" in event_words({"kind": "fresh"})
    for event in (
        {"kind": "title", "from": None, "to": "x"},
        {"kind": "state", "from": "unknown", "to": "idle"},
        {"kind": "harness", "from": "unknown", "to": "claude"},
    ):
        assert "None" not in event_words(event) and "->" not in event_words(event)
