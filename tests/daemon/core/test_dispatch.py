"""The fast dispatcher: direct only to exactly one agent pane on workstream identity, with
plain, harmless text; everything else to control, with the reason."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openbus.daemon.core.dispatch import (
    Lexicon,
    PaneFacts,
    Route,
    RoutingIndex,
    decide,
    pieces,
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
    quick = FLEET.quick(tokens)
    refusal, matched = FLEET.scan(tokens)
    if quick is not None:
        assert refusal is None and matched == [quick.matched[0]]
        assert quick == FLEET.decision(matched[0])


def test_a_request_naming_one_agent_pane_takes_the_quick_path() -> None:
    decision = FLEET.quick(words("tell auth-review to add a test"))
    assert decision is not None and decision.pane == "%1"


# Words of the fleet above, stop words, risky stems and the characters that sit at a word's
# edge, for texts that take every path.
VOCABULARY = [
    *[
        "auth-review",
        "auth",
        "review",
        "docs",
        "pass",
        "docs-two",
        "shared",
        "example-app",
        "billing",
        "old-work",
    ],
    *[
        "#12",
        "example-app#12",
        "acme/example-app#12",
        "https://github.com/acme/example-app/pull/12",
    ],
    *[
        "tell",
        "add",
        "a",
        "test",
        "then",
        "open",
        "pushing",
        "merged",
        "rm",
        "the",
        "to",
        "in",
        "on",
    ],
    *["-v", "a/", "x.", "y:", "_z", "+q", "..", "/", "é", "\u212a", "\u0130", ",", "(", ")"],
]
texts = st.one_of(
    st.lists(st.sampled_from(VOCABULARY), max_size=8).map(" ".join),
    st.lists(st.sampled_from(VOCABULARY), max_size=8).map("".join),
    st.text(alphabet="abdeiortuvwAEKZ-_./:#+~ ,\u00e9\u212a", max_size=30),
)


@given(texts)
@settings(max_examples=400, deadline=None)
def test_pieces_all_known_harmless_are_the_patterns_words(text: str) -> None:
    runs = pieces(text)
    if Lexicon().all_harmless(runs):
        assert runs == words(text)


@given(texts)
@settings(max_examples=400, deadline=None)
def test_a_decision_is_the_same_on_first_sight_and_once_its_words_are_known(text: str) -> None:
    if not text.strip():
        return
    warm = Lexicon()
    first = decide(text, FLEET, warm)
    assert decide(text, FLEET, warm) == first
    assert decide(text, FLEET, Lexicon(limit=2)) == first  # a full memory starts again
    quick = FLEET.quick(words(text), Lexicon())
    if quick is not None:
        refusal, matched = FLEET.scan(words(text))
        assert refusal is None and matched == [quick.matched[0]]


def test_a_known_word_is_judged_once_and_stop_words_never_become_known() -> None:
    lexicon = Lexicon()
    assert decide("tell auth-review to add a test", FLEET, lexicon).pane == "%1"
    assert {"tell", "auth-review", "add"} <= lexicon.harmless
    decide("auth-review: push it", FLEET, lexicon)
    assert "push" not in lexicon.harmless and "auth-review:" not in lexicon.harmless
    assert decide("tell auth-review to push it", FLEET, lexicon).route is Route.CONTROL
