"""``OPENBUS_REQUIRE``: a skip for a required real part fails the run; other skips stay skips."""

from __future__ import annotations

import pytest

INNER = """
import os

import pytest

from tests.support.require import skip_missing


@pytest.fixture
def cli():
    skip_missing("harness", "claude CLI not installed at /nonexistent/claude")


@pytest.mark.harness
def test_a_harness_test_whose_fixture_skips(cli):
    pass


@pytest.mark.harness
def test_a_harness_test_that_skips_in_its_body():
    pytest.skip("no CLI")


@pytest.mark.root
@pytest.mark.skipif(True, reason="needs root: creates real users")
def test_a_root_test_skipped_by_its_mark():
    pass


def test_an_unmarked_test_missing_tmux():
    skip_missing("tmux", "tmux is not installed")


def test_an_unmarked_test_skipping_for_its_platform():
    pytest.skip("no POSIX ACLs here")


@pytest.mark.harness
def test_a_harness_test_that_runs():
    pass
"""

NAMES = {
    "fixture": "test_a_harness_test_whose_fixture_skips",
    "body": "test_a_harness_test_that_skips_in_its_body",
    "root": "test_a_root_test_skipped_by_its_mark",
    "tmux": "test_an_unmarked_test_missing_tmux",
    "platform": "test_an_unmarked_test_skipping_for_its_platform",
    "runs": "test_a_harness_test_that_runs",
}


def run_inner(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, required: str | None
) -> dict[str, tuple[str, str]]:
    """Each inner test's outcome (passed, skipped, failed) and what its report says."""
    if required is None:
        monkeypatch.delenv("OPENBUS_REQUIRE", raising=False)
    else:
        monkeypatch.setenv("OPENBUS_REQUIRE", required)
    pytester.makepyfile(test_inner=INNER)
    reprec = pytester.inline_run("-p", "tests.support.require")
    found: dict[str, tuple[str, str]] = {}
    for report in reprec.getreports("pytest_runtest_logreport"):
        name = report.nodeid.split("::")[-1]
        if report.failed or (report.skipped and name not in found):
            found[name] = (report.outcome, report.longreprtext)
        elif report.when == "call":
            found.setdefault(name, (report.outcome, ""))
    return found


def test_unset_every_skip_stays_a_skip(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    found = run_inner(pytester, monkeypatch, None)
    assert {name: outcome for name, (outcome, _) in found.items()} == {
        **{name: "skipped" for name in NAMES.values()},
        NAMES["runs"]: "passed",
    }


def test_a_required_part_turns_its_skips_into_failures_naming_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    found = run_inner(pytester, monkeypatch, "harness")
    assert {name: outcome for name, (outcome, _) in found.items()} == {
        NAMES["fixture"]: "failed",  # the skip came from a fixture, in setup
        NAMES["body"]: "failed",
        NAMES["root"]: "skipped",  # root is not required
        NAMES["tmux"]: "skipped",
        NAMES["platform"]: "skipped",
        NAMES["runs"]: "passed",
    }
    assert found[NAMES["fixture"]][1] == (
        "OPENBUS_REQUIRE requires harness, but this test skipped: "
        "claude CLI not installed at /nonexistent/claude"
    )
    assert found[NAMES["body"]][1].endswith("this test skipped: no CLI")


def test_a_skipif_mark_and_a_named_part_count_without_touching_a_platform_skip(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    found = run_inner(pytester, monkeypatch, " root , tmux ")
    outcome = {name: outcome for name, (outcome, _) in found.items()}
    assert outcome[NAMES["root"]] == "failed"
    assert outcome[NAMES["tmux"]] == "failed"  # no marker: the skip itself names tmux
    assert outcome[NAMES["platform"]] == "skipped"
    assert outcome[NAMES["fixture"]] == outcome[NAMES["body"]] == "skipped"
    assert found[NAMES["root"]][1] == (
        "OPENBUS_REQUIRE requires root, but this test skipped: needs root: creates real users"
    )


def test_a_skip_for_a_missing_marked_part_in_an_unmarked_test_fails_even_unset(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENBUS_REQUIRE", raising=False)
    pytester.makepyfile(
        test_unmarked="""
        from tests.support.require import skip_missing

        def test_needs_root_but_says_nothing():
            skip_missing("root", "needs root")
        """
    )
    (failed,) = pytester.inline_run("-p", "tests.support.require").getfailures()
    assert "not marked @pytest.mark.root: mark it" in failed.longreprtext


def test_the_header_says_what_is_required_and_an_unknown_part_is_a_usage_error(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    monkeypatch.setenv("OPENBUS_REQUIRE", "root,harness")
    result = pytester.runpytest_inprocess("-p", "tests.support.require")
    result.stdout.fnmatch_lines(["OPENBUS_REQUIRE: harness, root"])
    monkeypatch.setenv("OPENBUS_REQUIRE", "harness,roots")
    result = pytester.runpytest_inprocess("-p", "tests.support.require")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*OPENBUS_REQUIRE names unknown part(s) roots; known: *"])
