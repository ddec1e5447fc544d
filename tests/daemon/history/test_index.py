"""Search and get through the history index, over synthetic Claude Code and Codex homes."""

from __future__ import annotations

import pytest

from openbus.daemon.history.index import HistoryIndex, watched_liveness
from openbus.daemon.history.model import LiveState
from openbus.kernel.errors import BadRequest, NotFound
from openbus.kernel.testing import FixedClock
from tests.daemon.history.conftest import World, populate
from tests.support.fds import open_to


def test_search_ranks_title_matches_first_and_names_the_matched_terms(world: World) -> None:
    populate(world)
    world.claude.session(
        "c-other", "/w", ["tidy the readme", "the login page copy mentions a flaky network"]
    )
    world.index.reconcile()
    hits = world.index.search("flaky login")
    assert [h.entry.session_id for h in hits][:2] == ["c-login", "c-other"]
    assert hits[0].matched_terms == ("flaky", "login")
    assert world.index.search("4955")[0].entry.session_id == "c-login"  # the PR number
    assert world.index.search("login-flake")[0].entry.session_id == "c-login"  # the branch


def test_the_repo_filter_applies_before_ranking_not_after_the_limit(world: World) -> None:
    for i in range(5):
        world.claude.session(
            f"w-{i}", str(world.widget), [f"deploy deploy the deploy pipeline run {i}"]
        )
    world.claude.session(
        "g-1",
        str(world.gadget),
        ["a long prompt about many other things where deploy appears only once " * 3],
    )
    world.index.reconcile()
    top3 = [h.entry.session_id for h in world.index.search("deploy", limit=3)]
    assert "g-1" not in top3  # post-filtering this top 3 would find nothing in gadget
    for repo in (
        "github.com/acme/gadget",
        "https://github.com/acme/gadget.git",
        str(world.gadget),
        "acme/gadget",
    ):
        hits = world.index.search("deploy", repo=repo, limit=3)
        assert [h.entry.session_id for h in hits] == ["g-1"], repo


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("login NOT flow", "login not flow"),
        ("login OR flow", "login or flow"),
        ("title:login", "title login"),
        ("log*", "log"),
        ('"login', "login"),
        ("login*", "login"),
        ("-login", "login"),
        ("NEAR(login flaky)", "near login flaky"),
        ("a AND OR NOT b", "a and or not b"),
        ('"unbalanced', "unbalanced"),
        ("^x {y}", "x y"),
    ],
)
def test_user_text_is_never_fts_syntax(world: World, query: str, words: str) -> None:
    populate(world)
    world.claude.session("c-flow", "/w", ["document the login flow"])
    world.claude.session("c-cash", "/w", ["draw the cash flow chart"])
    world.claude.session("c-later", "/w", ["tidy the readme", "then check the login page"])
    world.claude.session("c-logs", "/w", ["rotate the log files"])
    world.index.reconcile()
    assert world.index.search(query) == world.index.search(words)


def test_a_query_with_no_words_is_a_bad_request(world: World) -> None:
    with pytest.raises(BadRequest):
        world.index.search("?!* ")


def test_get_of_an_unknown_session_or_an_unknown_harness_says_so(world: World) -> None:
    with pytest.raises(NotFound):
        world.index.get("claude", "nope")
    with pytest.raises(NotFound):
        world.index.get("opencode", "nope")
    with pytest.raises(BadRequest, match="must be one of claude, codex, omp, gemini, opencode"):
        world.index.get("aider", "x")


def test_a_word_past_ascii_is_found_as_written_and_named_among_the_matched_terms(
    world: World,
) -> None:
    world.claude.session("c-de", "/w", ["Die Straße vor dem Büro ist gesperrt"])
    world.claude.session("c-tr", "/w", ["İstanbul deploy: 5µs ﬁlter"])
    world.index.reconcile()
    for query, found in (("Straße", "c-de"), ("buro", "c-de"), ("istanbul", "c-tr")):
        hits = world.index.search(query)
        assert [h.entry.session_id for h in hits] == [found], query
        assert hits[0].matched_terms, query
    assert [h.entry.session_id for h in world.index.search("5µs ﬁlter")] == ["c-tr"]


def test_a_codex_sessions_liveness_is_kept_while_nothing_opens_or_closes_its_rollouts(
    world: World,
) -> None:
    populate(world)
    world.index.reconcile()
    assert world.index.liveness_probe.watched_folders() >= 3
    clock = world.index.clock
    assert isinstance(clock, FixedClock)
    hit = world.index.search("billing postgres")[0]
    assert hit.entry.harness == "codex"
    assert world.index.liveness(hit.entry).state is LiveState.NOT_RUNNING
    scans = world.index.liveness_probe.scans
    clock.advance(3600)
    assert world.index.liveness(hit.entry).state is LiveState.NOT_RUNNING
    assert world.index.liveness_probe.scans == scans


def test_an_index_opened_without_a_probe_starts_no_watch_and_closing_one_ends_its_watch(
    world: World,
) -> None:
    """The CLI's offline commands (status, reindex) open the index without a probe: they never
    ask for liveness, so no inotify watch is started for them."""
    populate(world)
    inotify = "anon_inode:inotify"
    sources, clock = world.index.sources, FixedClock()
    before = open_to(inotify)
    watched = HistoryIndex(
        world.tmp / "watched.db", sources, clock=clock, liveness=watched_liveness(sources, clock)
    )
    started = open_to(inotify) - before
    assert len(started) == 1 and watched.liveness_probe.watched_folders() >= 3
    offline = HistoryIndex(world.tmp / "offline.db", sources, clock=clock)
    try:
        assert offline.liveness_probe.watched_folders() == 0
        assert open_to(inotify) - before == started
    finally:
        offline.close()
    watched.close()
    assert not open_to(inotify) & started


def test_a_search_without_prompts_reads_none_for_full_matches_and_a_partial_ones_whole(
    world: World,
) -> None:
    world.claude.session("c-both", str(world.widget), ["rotate keys", "then flaky retries"])
    world.claude.session("c-one", str(world.widget), ["tidy up", "only the flaky one here"])
    world.index.reconcile()
    shown = {h.entry.session_id: h for h in world.index.search("rotate flaky")}
    slim = {h.entry.session_id: h for h in world.index.search("rotate flaky", prompts=False)}
    assert list(shown) == ["c-both", "c-one"]
    # the same page, in the same order, naming the same terms
    assert [(k, h.score, h.matched_terms) for k, h in slim.items()] == [
        (k, h.score, h.matched_terms) for k, h in shown.items()
    ]
    assert shown["c-both"].entry.prompts and slim["c-both"].entry.prompts == ()
    assert slim["c-one"].entry.prompts == shown["c-one"].entry.prompts  # looked through
    assert slim["c-one"].matched_terms == ("flaky",)  # a term of its prompts only
