"""The fast dispatcher: direct only to exactly one agent pane on workstream identity, with
plain, harmless text; everything else to control, with the reason."""

from __future__ import annotations

import pytest

from openbus.daemon.core.dispatch import (
    PaneFacts,
    Route,
    RoutingIndex,
    decide,
    pr_keys,
    words,
)
from openbus.kernel.errors import BadRequest


def pane(pane: str, **fields: object) -> PaneFacts:
    base: dict[str, object] = {
        "incarnation": f"inc_{pane[1:]}",
        "revision": 7,
        "harness": "claude",
        "state": "idle",
        "cwd": f"/home/alice/p{pane[1:]}",
    }
    base.update(fields)
    return PaneFacts(pane=pane, **base)  # type: ignore[arg-type]


FLEET = RoutingIndex.build(
    [
        pane("%1", branch="auth-review", title="auth review"),
        pane(
            "%2", pr_links=("https://github.com/acme/example-app/pull/12",), cwd="/src/example-app"
        ),
        pane("%3", harness="shell", state="shell", cwd="/src/billing"),
        pane("%4", branch="feature/docs", title="docs pass"),
        pane("%5", branch="feature/docs-two", cwd="/src/shared"),
        pane("%6", cwd="/src/shared"),
        pane("%7", harness="codex", state="exited", branch="old-work"),
    ]
)


def test_a_request_naming_one_panes_branch_goes_direct_to_it() -> None:
    decision = decide("tell auth-review to add a test for the expiry path", FLEET)
    assert decision.route is Route.DIRECT
    assert (decision.pane, decision.incarnation, decision.revision) == ("%1", "inc_1", 7)
    assert "branch auth-review" in decision.reason


def test_a_pr_reference_in_any_form_names_the_pane_tracking_it() -> None:
    for text in (
        "add a test for #12",
        "add a test for example-app#12",
        "add a test for acme/example-app#12",
        "add a test for https://github.com/acme/example-app/pull/12.",
    ):
        decision = decide(text, FLEET)
        assert decision.route is Route.DIRECT, text
        assert decision.pane == "%2"


def test_a_multi_word_title_matches_as_a_phrase() -> None:
    decision = decide("Ask the Auth Review pane to explain its plan", FLEET)
    assert decision.pane == "%1"
    assert decision.matched[0].kind == "title"


def test_a_working_directory_matches_by_its_last_part() -> None:
    assert decide("in example-app, rename the helper", FLEET).pane == "%2"


def test_two_matching_panes_go_to_control_naming_both() -> None:
    decision = decide("in shared, add a comment", FLEET)
    assert decision.route is Route.CONTROL
    assert decision.candidates == ("%5", "%6")
    assert "ambiguous" in decision.reason


def test_a_request_matching_only_a_shell_goes_to_control() -> None:
    decision = decide("in billing, list the files", FLEET)
    assert decision.route is Route.CONTROL
    assert "%3 (shell)" in decision.reason


def test_an_exited_agent_is_no_target() -> None:
    assert decide("continue old-work", FLEET).route is Route.CONTROL


def test_a_request_no_pane_matches_goes_to_control() -> None:
    decision = decide("make the login page faster", FLEET)
    assert decision.route is Route.CONTROL
    assert "no pane" in decision.reason


@pytest.mark.parametrize(
    "text",
    [
        "tell auth-review to push its branch",
        "tell auth-review to merge it",
        "ask auth-review to delete the old fixtures",
        "auth-review: deploy to staging",
        "auth-review should publish the package",
        "auth-review, force the update",
        "auth-review: rm the build dir",
        "auth-review: ship.",
    ],
)
def test_destructive_or_outward_facing_requests_go_to_control(text: str) -> None:
    decision = decide(text, FLEET)
    assert decision.route is Route.CONTROL
    assert "destructive or outward-facing" in decision.reason


@pytest.mark.parametrize(
    "text",
    [
        "open a new pane for auth-review",
        "resume the auth-review session",
        "auth-review: add a test, then run the suite",
        "auth-review: add a test; run it",
        "auth-review: add a test\nand document it",
    ],
)
def test_pane_work_and_several_steps_go_to_control(text: str) -> None:
    assert decide(text, FLEET).route is Route.CONTROL


def test_generic_branches_and_folders_are_no_identity() -> None:
    fleet = RoutingIndex.build([pane("%1", branch="main", cwd="/home/alice/src")])
    assert decide("on main, in src, fix the typo", fleet).route is Route.CONTROL


def test_the_decision_is_deterministic_and_serializable() -> None:
    a = decide("tell auth-review to add a test", FLEET).to_dict()
    b = decide("tell auth-review to add a test", FLEET).to_dict()
    assert a == b
    assert a["route"] == "direct"
    assert a["matched"] == [{"pane": "%1", "kind": "branch", "value": "auth-review"}]


def test_an_empty_request_is_bad_input() -> None:
    with pytest.raises(BadRequest):
        decide("   ", FLEET)


def test_pr_keys_read_urls_and_references() -> None:
    assert pr_keys("https://gitlab.com/g/sub/proj/-/merge_requests/4") == (
        "#4",
        "g/sub/proj#4",
        "proj#4",
    )
    assert pr_keys("#9") == ("#9",)
    assert pr_keys("not a pr") == ()


def test_a_risky_word_inside_an_identity_is_no_risk() -> None:
    fleet = RoutingIndex.build([pane("%1", branch="fix-release-notes")])
    assert decide("on fix-release-notes, reword the intro", fleet).route is Route.DIRECT
    assert decide("fix-release-notes: release it", fleet).route is Route.CONTROL


@pytest.mark.parametrize(
    "text",
    [
        "tell auth-review to add a test",
        "on auth-review, add a test",
        "tell auth-review to push it",
        "reword the intro in shared",
        "check example-app#12 please",
        "the docs pass needs a table",
        "billing: run the tests",
        "old-work: rerun it",
        "auth-review and docs-two: sync up",
        "no pane here",
    ],
)
def test_the_quick_path_gives_what_the_full_scan_gives(text: str) -> None:
    tokens = words(text)
    quick = FLEET.quick(text.lower(), tokens)
    refusal, matched = FLEET.scan(tokens)
    if quick is not None:
        assert refusal is None and matched == [quick.matched[0]]
        assert quick == FLEET.direct[matched[0]]


def test_a_request_naming_one_agent_pane_takes_the_quick_path() -> None:
    decision = FLEET.quick(
        "tell auth-review to add a test", words("tell auth-review to add a test")
    )
    assert decision is not None and decision.pane == "%1"
