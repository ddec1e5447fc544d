"""A child's worktree: made with real git that runs none of the repository's hooks or filters."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from openbus.daemon.sessions import worktree
from openbus.kernel.errors import Forbidden
from tests.daemon.sessions.conftest import git as run
from tests.daemon.sessions.conftest import make_repo


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "proj")


def test_a_worktree_is_made_on_its_branch_and_a_planted_hook_does_not_run(
    repo: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "hook-ran"
    hook = repo / ".git" / "hooks" / "post-checkout"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    root = tmp_path / "trees"

    made = asyncio.run(worktree.create(asyncio.run(worktree.check(repo / ".")), root, "pong"))

    assert made.path == root / "proj" / "pong"
    assert made.branch == "openbus/pong"
    assert (made.path / "README").read_text() == "hello\n"
    assert run(made.path, "branch", "--show-current") == "openbus/pong"
    assert run(repo, "config", "branch.openbus/pong.openbusBase") == "main"
    assert not marker.exists()
    # the hook is real: plain git runs it
    run(repo, "worktree", "add", "-q", "-b", "plain", str(tmp_path / "plain"))
    assert marker.exists()


def test_two_starts_with_one_title_at_once_get_two_names(repo: Path, tmp_path: Path) -> None:
    async def both() -> list[worktree.Worktree]:
        found = await worktree.check(repo)
        return list(
            await asyncio.gather(*(worktree.create(found, tmp_path / "t", "x") for _ in range(3)))
        )

    made = asyncio.run(both())
    assert sorted(w.branch for w in made) == ["openbus/x", "openbus/x-2", "openbus/x-3"]
    for w in made:  # none lost its base to another's config write
        assert run(repo, "config", f"branch.{w.branch}.openbusBase") == "main"


def test_a_create_waits_out_a_lock_file_the_users_own_git_holds(repo: Path, tmp_path: Path) -> None:
    held = repo / ".git" / "config.lock"
    held.write_text("")

    async def create() -> worktree.Worktree:
        asyncio.get_running_loop().call_later(0.3, held.unlink)  # the user's git finishes
        return await worktree.create(await worktree.check(repo), tmp_path / "t", "held")

    made = asyncio.run(create())
    assert run(repo, "config", f"branch.{made.branch}.openbusBase") == "main"


def test_a_branch_the_user_already_has_takes_the_next_suffix(repo: Path, tmp_path: Path) -> None:
    run(repo, "branch", "openbus/taken")
    made = asyncio.run(worktree.create(asyncio.run(worktree.check(repo)), tmp_path / "t", "taken"))
    assert made.branch == "openbus/taken-2"


def test_a_repository_with_a_checkout_filter_gets_no_worktree(repo: Path, tmp_path: Path) -> None:
    marker = tmp_path / "filter-ran"
    run(repo, "config", "filter.evil.smudge", f"touch {marker}; cat")
    with pytest.raises(Forbidden, match="checkout filter"):
        asyncio.run(worktree.check(repo))
    assert not (tmp_path / "t").exists()
    assert not marker.exists()


def test_a_checkout_filter_set_through_an_included_file_gets_no_worktree(
    repo: Path, tmp_path: Path
) -> None:
    included = tmp_path / "included.cfg"
    included.write_text(f'[filter "evil"]\n\tsmudge = touch {tmp_path / "ran"}; cat\n')
    run(repo, "config", "include.path", str(included))
    with pytest.raises(Forbidden, match="checkout filter"):
        asyncio.run(worktree.check(repo))


def test_a_folder_outside_git_gets_no_worktree(tmp_path: Path) -> None:
    with pytest.raises(Forbidden, match="not in a git repository"):
        asyncio.run(worktree.check(tmp_path))
