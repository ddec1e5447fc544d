"""Reconcile and push: the index follows the transcripts, parsing only what changed."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import pytest

from openbus.daemon.history import reconcile
from openbus.kernel.errors import BadRequest
from tests.daemon.history.conftest import World, populate


def test_reconcile_indexes_every_session_with_repo_branches_prs_and_resume(world: World) -> None:
    populate(world)
    stats = world.index.reconcile()
    assert (stats.scanned, stats.indexed, stats.errors) == (5, 5, [])
    login = world.index.get("claude", "c-login")
    assert login.repo == "github.com/acme/widget"
    assert login.repo_root == str(world.widget)
    assert login.branches == ("fix/login-flake",)
    assert login.prs == ("https://github.com/acme/widget/pull/4955",)
    assert login.title == "Fix flaky login test"
    assert login.resume_argv == ("claude", "--resume", "c-login")
    sub = world.index.get("claude", "agent1")
    assert sub.subagent and sub.parent_session_id == "c-login" and sub.resume_argv is None
    assert sub.prompts == ("Find every caller of authenticate()",)
    billing = world.index.get("codex", "x-billing")
    assert billing.title == "Billing migration"
    assert billing.repo == "github.com/acme/gadget"
    assert billing.resume_argv == ("codex", "resume", "x-billing")
    assert world.index.get("codex", "x-exec").prompts == ("run the linter and report",)


def test_a_second_reconcile_parses_only_the_files_that_changed(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    populate(world)
    world.index.reconcile()
    parsed: list[Path] = []
    original = reconcile.read_file

    def spy(harness, path, names):  # type: ignore[no-untyped-def]
        parsed.append(Path(path))
        return original(harness, path, names)

    monkeypatch.setattr(reconcile, "read_file", spy)
    assert world.index.reconcile().changed == 0
    assert parsed == []

    changed = world.claude.session(
        "c-docs", str(world.gadget), ["write the release notes for version two", "add a changelog"]
    )
    progress: list[tuple[int, int]] = []
    stats = world.index.reconcile(progress=lambda done, total: progress.append((done, total)))
    assert (stats.scanned, stats.changed, stats.indexed) == (5, 1, 1)
    assert parsed == [changed]
    assert progress == [(0, 1), (1, 1)]
    assert world.index.get("claude", "c-docs").prompts[-1] == "add a changelog"


def test_a_replaced_file_with_the_same_size_and_mtime_is_still_seen_by_its_inode(
    world: World,
) -> None:
    path = world.claude.session("c-x", "/w", ["alpha"])
    world.index.reconcile()
    st = path.stat()
    replacement = path.with_suffix(".new")
    replacement.write_bytes(path.read_bytes().replace(b"alpha", b"omega"))
    os.utime(replacement, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(replacement, path)
    assert world.index.reconcile().changed == 1
    assert world.index.get("claude", "c-x").prompts == ("omega",)


def test_a_vanished_transcript_keeps_its_entry_but_loses_its_resume_argv(world: World) -> None:
    path = world.claude.session("c-gone", "/w", ["something to remember"])
    world.index.reconcile()
    path.unlink()
    assert world.index.reconcile().gone == 1
    entry = world.index.get("claude", "c-gone")
    assert entry.transcript is None and entry.resume_argv is None
    assert entry.prompts == ("something to remember",)


def test_a_renamed_codex_thread_is_retitled_without_its_rollout_changing(world: World) -> None:
    populate(world)
    world.index.reconcile()
    world.codex.name("x-billing", "Postgres billing cutover")
    world.index.reconcile()
    assert world.index.get("codex", "x-billing").title == "Postgres billing cutover"
    assert world.index.search("cutover")[0].entry.session_id == "x-billing"


def test_a_codex_thread_renamed_with_a_lone_surrogate_is_retitled_with_a_replacement_character(
    world: World,
) -> None:
    populate(world)
    world.index.reconcile()
    world.codex.name("x-billing", "Billing \ud83d cutover")  # a name cut inside an emoji
    stats = world.index.reconcile()
    assert stats.errors == []
    assert world.index.get("codex", "x-billing").title == "Billing \ufffd cutover"
    assert world.index.search("cutover")[0].entry.session_id == "x-billing"


def test_a_stop_hook_push_indexes_that_transcript_at_once(world: World) -> None:
    path = world.claude.session("c-hook", "/w", ["pushed by the hook"])
    entries = world.index.push_hook(
        {"session_id": "c-hook", "transcript_path": str(path), "hook_event_name": "Stop"}
    )
    assert [e.session_id for e in entries] == ["c-hook"]
    assert world.index.search("pushed")[0].entry.session_id == "c-hook"
    assert world.index.reconcile().changed == 0  # the push recorded the file too


def test_a_subagent_stop_hook_push_indexes_the_subagent_and_its_parent(world: World) -> None:
    parent = world.claude.session("c-par", "/w", ["parent work"])
    child = world.claude.subagent("c-par", "ag7", "/w", "child task")
    entries = world.index.push_hook(
        {
            "session_id": "c-par",
            "transcript_path": str(parent),
            "agent_id": "ag7",
            "agent_transcript_path": str(child),
            "hook_event_name": "SubagentStop",
        }
    )
    assert {e.session_id for e in entries} == {"c-par", "ag7"}


def test_a_hook_push_by_session_id_alone_finds_the_transcript(world: World) -> None:
    world.claude.session("c-byid", "/w", ["found by id"])
    entries = world.index.push_hook({"session_id": "c-byid", "hook_event_name": "SessionEnd"})
    assert [e.session_id for e in entries] == ["c-byid"]


def test_a_hook_push_without_a_transcript_or_session_is_refused(world: World) -> None:
    with pytest.raises(BadRequest):
        world.index.push_hook({"hook_event_name": "Stop"})


def test_an_entry_keeps_its_repo_after_its_cwd_is_gone(world: World) -> None:
    cwd = world.tmp / "src" / "gone"
    cwd.mkdir()
    subprocess.run(["git", "init", "-q", str(cwd)], check=True)
    subprocess.run(
        ["git", "-C", str(cwd), "remote", "add", "origin", "https://h.example/t/gone"], check=True
    )
    path = world.claude.session("c-cwd", str(cwd), ["one"])
    world.index.reconcile()
    subprocess.run(["rm", "-rf", str(cwd)], check=True)
    world.claude.session("c-cwd", str(cwd), ["one", "two"])
    assert path.exists()
    world.index.reconcile()
    assert world.index.get("claude", "c-cwd").repo == "h.example/t/gone"


def test_a_lone_surrogate_in_a_transcript_is_indexed_as_a_replacement_character(
    world: World,
) -> None:
    # a harness that cuts a string inside an emoji writes half of its JSON surrogate pair
    world.claude.session("c-cut", "/w", ["fix the \ud83d", "then the \udca5 tests"])
    world.claude.session("c-fine", "/w", ["an ordinary prompt"])
    stats = world.index.reconcile()
    assert (stats.indexed, stats.errors) == (2, [])
    cut = world.index.get("claude", "c-cut")
    assert cut.prompts == ("fix the \ufffd", "then the \ufffd tests")
    assert cut.title == "fix the \ufffd"
    assert [hit.entry.session_id for hit in world.index.search("tests")] == ["c-cut"]


def test_a_line_nested_deeper_than_any_decoder_goes_is_skipped_and_the_reindex_goes_on(
    world: World,
) -> None:
    # json's decoder raises RecursionError (not a ValueError) on such a line
    deep = world.claude.session("c-deep", "/w", ["the prompt before the deep line"])
    with deep.open("ab") as f:
        f.write(b'{"type": "user", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n")
    world.claude.session("c-next", "/w", ["an ordinary prompt"])
    stats = world.index.reconcile()
    assert (stats.indexed, stats.errors) == (2, [])
    assert world.index.get("claude", "c-deep").prompts == ("the prompt before the deep line",)


def _seven_notes_written_two_a_batch(world: World, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Seven one-prompt sessions, s-0 to s-6, and a reconcile that writes two a transaction."""
    monkeypatch.setattr(reconcile, "WRITE_BATCH", 2)
    return [world.claude.session(f"s-{i}", "/w", [f"note number {i}"]) for i in range(7)]


def _rowids(world: World) -> dict[str, int]:
    rows = world.index.store._db.execute("SELECT session_id, id FROM sessions").fetchall()
    return {str(sid): int(rowid) for sid, rowid in rows}


def test_a_reconcile_of_many_batches_writes_them_all_oldest_first_and_counts_its_progress(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i, path in enumerate(_seven_notes_written_two_a_batch(world, monkeypatch)):
        os.utime(path, ns=(10**18 + i, 10**18 + i))  # oldest first: s-0 .. s-6
    seen: list[tuple[int, int]] = []
    stats = world.index.reconcile(progress=lambda done, total: seen.append((done, total)))
    assert (stats.indexed, stats.errors) == (7, [])
    assert seen[0] == (0, 7) and seen[-1] == (7, 7)
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)
    rowids = _rowids(world)
    assert sorted(rowids, key=rowids.__getitem__) == [f"s-{i}" for i in range(7)]
    assert world.index.search("note", limit=1)[0].entry.session_id == "s-6"


def test_a_cancelled_reconcile_keeps_the_batches_written_and_the_next_one_indexes_the_rest(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    _seven_notes_written_two_a_batch(world, monkeypatch)
    cancel = threading.Event()

    def progress(done: int, total: int) -> None:
        if done >= 2:
            cancel.set()

    stats = world.index.reconcile(progress=progress, cancel=cancel)
    assert 2 <= stats.indexed < 7 and stats.errors == []
    assert world.index.store.count() == stats.indexed  # each batch written whole or not at all
    again = world.index.reconcile()
    assert again.indexed == 7 - stats.indexed
    assert world.index.store.count() == 7


def test_a_transcript_whose_name_is_not_utf8_is_reported_and_the_pass_goes_on(
    world: World,
) -> None:
    populate(world)
    folder = world.claude.root / "projects" / os.fsdecode(b"-w-\xff")
    odd = world.claude.session("c-odd", "/w", ["a folder name that is not UTF-8"])
    folder.mkdir()
    odd.rename(folder / "c-odd.jsonl")
    stats = world.index.reconcile()
    assert stats.indexed == 5
    assert stats.errors == [
        f"{world.claude.root}/projects/-w-\\xff/c-odd.jsonl: its name is not UTF-8; not indexed"
    ]


def test_a_fifo_or_a_device_named_like_a_transcript_is_reported_and_the_pass_goes_on(
    world: World,
) -> None:
    populate(world)
    folder = world.claude.root / "projects" / "-w"
    folder.mkdir()
    os.mkfifo(folder / "c-fifo.jsonl")  # nobody writes it: a blocking open would wait forever
    (folder / "c-zero.jsonl").symlink_to("/dev/zero")  # a read that never ends
    stats = world.index.reconcile()
    assert stats.indexed == 5
    assert sorted(stats.errors) == [
        f"{folder}/c-fifo.jsonl: [Errno 22] not a regular file: '{folder}/c-fifo.jsonl'",
        f"{folder}/c-zero.jsonl: [Errno 22] not a regular file: '{folder}/c-zero.jsonl'",
    ]


def test_a_full_pass_asked_during_a_pass_re_reads_every_file_once_that_one_has_ended(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    _seven_notes_written_two_a_batch(world, monkeypatch)
    paused, resume = threading.Event(), threading.Event()

    def pause_once(done: int, _total: int) -> None:
        if done == 2 and not paused.is_set():
            paused.set()
            resume.wait(timeout=30)

    first = threading.Thread(target=world.index.reconcile, kwargs={"progress": pause_once})
    first.start()
    assert paused.wait(timeout=30)
    full: list[reconcile.ReconcileStats] = []
    second = threading.Thread(target=lambda: full.append(world.index.reconcile(full=True)))
    second.start()
    resume.set()
    first.join(timeout=30)
    second.join(timeout=30)
    assert [(s.changed, s.indexed) for s in full] == [(7, 7)]
