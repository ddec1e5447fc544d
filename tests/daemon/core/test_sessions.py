"""Session tools' rules: the family, admission of a start, and a start's life."""

from __future__ import annotations

from pathlib import PurePosixPath as P

import pytest

from openbus.daemon.core.sessions import (
    BRIEF_SETTLE_SECONDS,
    Family,
    SpawnLedger,
    SpawnLimits,
    Start,
    StartRequest,
    StartState,
    Trust,
    TrustMark,
    admit,
    brief_ready,
    child_preset,
    cut,
    folder_verdict,
    full_access,
    worktree_name,
)
from openbus.kernel.errors import Forbidden, InvalidTransition, RateLimited
from openbus.kernel.scopes import Preset

FAMILY = Family({"c1": "p", "c2": "p", "g1": "c1", "other": "q"})


def test_a_parent_reaches_its_children_and_not_its_grandchildren() -> None:
    assert FAMILY.members("p") == ["c1", "c2"]
    assert FAMILY.reaches("p", "c1")
    assert not FAMILY.reaches("p", "g1")


def test_a_child_reaches_its_parent_and_siblings_and_its_own_children() -> None:
    assert FAMILY.members("c1") == ["g1", "p", "c2"]
    assert FAMILY.relation("c1", "p") == "parent"
    assert FAMILY.relation("c1", "c2") == "sibling"
    assert FAMILY.relation("p", "c1") == "child"


def test_nobody_reaches_itself_or_another_family() -> None:
    assert not FAMILY.reaches("c1", "c1")
    assert not FAMILY.reaches("p", "other")
    assert FAMILY.relation("p", "other") is None
    assert FAMILY.members("stranger") == []


def test_a_child_preset_is_at_most_the_callers_and_the_cap() -> None:
    assert child_preset(Preset.COLLABORATE, Preset.COLLABORATE) is Preset.COLLABORATE
    assert child_preset(Preset.COLLABORATE, Preset.OBSERVE) is Preset.OBSERVE
    assert child_preset(Preset.COLLABORATE, Preset.COLLABORATE, Preset.OBSERVE) is Preset.OBSERVE
    with pytest.raises(Forbidden, match="never gets more than its parent"):
        child_preset(Preset.OBSERVE, Preset.COLLABORATE, Preset.COLLABORATE)


@pytest.mark.parametrize(
    ("harness", "argv", "env"),
    [
        ("claude", ["claude", "--dangerously-skip-permissions"], {}),
        ("claude", ["claude", "--permission-mode", "bypassPermissions"], {}),
        ("claude", ["claude", "--permission-mode=bypassPermissions"], {}),
        ("codex", ["codex", "--dangerously-bypass-approvals-and-sandbox"], {}),
        ("codex", ["codex", "--yolo"], {}),
        ("codex", ["codex", "-s", "danger-full-access"], {}),
        ("codex", ["codex", "--sandbox=danger-full-access"], {}),
        ("codex", ["codex", "-c", 'sandbox_mode="danger-full-access"'], {}),
        ("gemini", ["gemini", "-y"], {}),
        ("gemini", ["gemini", "--approval-mode", "yolo"], {}),
        ("opencode", ["opencode"], {"OPENCODE_PERMISSION": '{"*": "allow"}'}),
        ("omp", ["omp", "--dangerously-allow-all"], {}),
    ],
)
def test_full_access_launchers_are_recognised(
    harness: str, argv: list[str], env: dict[str, str]
) -> None:
    assert full_access(harness, argv, env) is not None


@pytest.mark.parametrize(
    ("harness", "argv"),
    [
        ("claude", ["claude", "--permission-mode", "acceptEdits"]),
        ("codex", ["codex", "-s", "workspace-write", "-c", 'model="o3"']),
        ("codex", ["codex", "--full-auto"]),
        ("gemini", ["gemini", "--approval-mode", "default"]),
        ("claude", ["claude", "--", "--yolo"]),  # a positional prompt, not the flag
    ],
)
def test_ordinary_launchers_are_not_full_access(harness: str, argv: list[str]) -> None:
    assert full_access(harness, argv, {}) is None


def trusted(path: str, source: str = "[sessions] trusted_dirs") -> TrustMark:
    return TrustMark(P(path), Trust.TRUSTED, source)


def untrusted(path: str) -> TrustMark:
    return TrustMark(P(path), Trust.UNTRUSTED, "Codex trust_level")


def test_a_folder_inside_the_callers_is_allowed() -> None:
    mark = folder_verdict(P("/w/proj/sub"), P("/w/proj"), [])
    assert mark.source == "inside your folder"


def test_a_folder_under_a_trusted_dir_is_allowed() -> None:
    assert folder_verdict(P("/trees/x/y"), P("/w/proj"), [trusted("/trees")]).folder == P("/trees")


def test_a_folder_nobody_trusts_is_refused_with_ask_the_user() -> None:
    with pytest.raises(Forbidden, match="ask the user"):
        folder_verdict(P("/etc"), P("/w/proj"), [trusted("/trees")])
    with pytest.raises(Forbidden, match="ask the user"):
        folder_verdict(P("/w"), P("/w/proj"), [])  # the parent of the caller's folder


def test_an_untrusted_mark_on_the_way_refuses_even_inside_a_trusted_folder() -> None:
    with pytest.raises(Forbidden, match=r"marked untrusted.*ask the user"):
        folder_verdict(P("/w/proj/vendor/x"), P("/w/proj"), [untrusted("/w/proj/vendor")])
    with pytest.raises(Forbidden, match="marked untrusted"):
        folder_verdict(P("/trees"), None, [trusted("/trees"), untrusted("/trees")])


def test_a_nearer_trusted_mark_under_an_untrusted_one_decides() -> None:
    mark = folder_verdict(P("/a/b/c"), None, [untrusted("/a"), trusted("/a/b", "Claude trust")])
    assert mark.source == "Claude trust"


def test_the_ledger_refuses_past_the_live_children_limit() -> None:
    ledger = SpawnLedger(SpawnLimits(max_children=2, starts_per_hour=10))
    for child in ("c1", "c2"):
        ledger.check("p", 0.0)
        ledger.admitted("p", 0.0)
        ledger.settled("p", child)
    with pytest.raises(RateLimited, match="2 running or pending"):
        ledger.check("p", 1.0)
    ledger.child_ended("c1")
    ledger.check("p", 1.0)
    ledger.check("q", 1.0)  # another agent is untouched


def test_pending_starts_count_towards_the_children_limit() -> None:
    ledger = SpawnLedger(SpawnLimits(max_children=1, starts_per_hour=10))
    ledger.admitted("p", 0.0)
    with pytest.raises(RateLimited):
        ledger.check("p", 0.0)
    ledger.settled("p", None)  # declined: no child
    ledger.check("p", 0.0)


def test_the_ledger_refuses_past_the_starts_per_hour_until_the_hour_moves() -> None:
    ledger = SpawnLedger(SpawnLimits(max_children=10, starts_per_hour=2))
    for t in (0.0, 10.0):
        ledger.admitted("p", t)
        ledger.settled("p", None)
    with pytest.raises(RateLimited, match="next start is allowed in 3590 s"):
        ledger.check("p", 10.0)
    ledger.check("p", 3600.5)


def request(**overrides: object) -> StartRequest:
    fields: dict[str, object] = {
        "parent": "p",
        "caller_preset": Preset.COLLABORATE,
        "cap": Preset.COLLABORATE,
        "caller_full_access": None,
        "harness": "claude",
        "argv": ["claude"],
        "env": {},
        "cwd": P("/w/proj"),
        "caller_cwd": P("/w/proj"),
    }
    fields.update(overrides)
    return StartRequest(**fields)  # type: ignore[arg-type]


def test_an_ordinary_start_is_admitted_at_the_callers_preset() -> None:
    admission = admit(request(), SpawnLedger(), 0.0)
    assert admission.preset is Preset.COLLABORATE
    assert admission.full_access is None


def test_a_full_access_launcher_is_refused_for_a_normal_caller() -> None:
    with pytest.raises(Forbidden, match="approvals and sandbox off"):
        admit(request(argv=["claude", "--dangerously-skip-permissions"]), SpawnLedger(), 0.0)


def test_a_full_access_caller_may_start_a_full_access_child() -> None:
    admission = admit(
        request(argv=["codex", "--yolo"], harness="codex", caller_full_access="--yolo"),
        SpawnLedger(),
        0.0,
    )
    assert admission.full_access == "--yolo"


def test_limits_are_judged_before_anything_else() -> None:
    ledger = SpawnLedger(SpawnLimits(max_children=0))
    with pytest.raises(RateLimited):
        admit(request(cwd=P("/etc")), ledger, 0.0)


def test_a_cap_of_off_refuses_the_start() -> None:
    with pytest.raises(Forbidden, match="caps this user at off"):
        admit(request(cap=Preset.OFF), SpawnLedger(), 0.0)


def test_a_start_moves_along_its_table_only() -> None:
    start = Start("s1", "p", StartState.CONSENT)
    start.move(StartState.APPROVED)
    start.move(StartState.LAUNCHING)
    start.move(StartState.BOUND)
    assert start.state.final
    with pytest.raises(InvalidTransition):
        start.move(StartState.CANCELLED)
    declined = Start("s2", "p", StartState.CONSENT)
    declined.move(StartState.DECLINED, "the human declined")
    assert declined.reason == "the human declined"
    with pytest.raises(InvalidTransition):
        Start("s3", "p", StartState.CONSENT).move(StartState.LAUNCHING)


def test_a_cut_is_at_a_character_and_says_so() -> None:
    assert cut("abc", 10) == ("abc", False)
    text, was_cut = cut("é" * 10, 5)
    assert was_cut and text == "éé"


def test_worktree_names_come_from_the_title() -> None:
    assert worktree_name("Pong check!", "s1") == "pong-check"
    assert worktree_name("../..", "s1") == "s1"
    assert worktree_name(None, "child-1") == "child-1"


def test_a_child_is_ready_for_its_brief_only_idle_empty_and_settled() -> None:
    settled = BRIEF_SETTLE_SECONDS
    assert brief_ready("idle", True, None, settled)
    assert brief_ready("idle", True, "idle", 0.0)  # its own status says it waits for input
    assert not brief_ready("idle", True, None, settled / 2)  # just drawn: not settled
    assert brief_ready("idle", True, None, 0.0, tools_listed=True)  # its harness is up
    assert not brief_ready("busy", True, None, settled, tools_listed=True)
    assert not brief_ready("idle", True, "busy", settled)  # its status says it is working
    assert not brief_ready("idle", True, "waiting", settled)
    assert not brief_ready("idle", False, None, settled)  # text in the composer
    assert not brief_ready("idle", None, None, settled)  # composer not seen
    assert not brief_ready("working", True, None, settled)
