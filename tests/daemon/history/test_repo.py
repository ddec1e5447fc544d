"""The repo of a cwd, read from real git checkouts' ``.git`` files."""

from __future__ import annotations

import subprocess
from pathlib import Path

from openbus.daemon.history.repo import RepoResolver, find_repo, normalize_origin


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def _repo(path: Path, origin: str | None) -> Path:
    path.mkdir(parents=True)
    _git("init", "-q", "-b", "main", cwd=path)
    if origin:
        _git("remote", "add", "origin", origin, cwd=path)
    return path


def test_a_subdirectory_of_a_checkout_finds_its_toplevel_and_origin(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "widget", "git@github.com:Acme/Widget.git")
    sub = repo / "src" / "pkg"
    sub.mkdir(parents=True)
    info = find_repo(str(sub))
    assert info is not None
    assert info.root == str(repo)
    assert info.origin == "git@github.com:Acme/Widget.git"
    assert info.repo == "github.com/acme/widget"


def test_a_linked_worktree_reads_the_main_checkouts_origin(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "main", "https://github.com/acme/widget.git")
    _git(
        "-c",
        "user.email=t@t",
        "-c",
        "user.name=t",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "x",
        cwd=repo,
    )
    worktree = tmp_path / "wt"
    _git("worktree", "add", "-q", str(worktree), "-b", "feat", cwd=repo)
    info = find_repo(str(worktree))
    assert info is not None
    assert info.root == str(worktree)
    assert info.repo == "github.com/acme/widget"


def test_a_checkout_without_origin_is_named_by_its_path(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "local", None)
    info = find_repo(str(repo))
    assert info is not None and info.origin is None and info.repo == str(repo)


def test_a_cwd_that_no_longer_exists_has_no_repo(tmp_path: Path) -> None:
    assert find_repo(str(tmp_path / "gone")) is None
    assert RepoResolver()(None) is None


def test_ssh_https_and_scp_origins_normalise_alike() -> None:
    forms = [
        "git@github.com:acme/widget.git",
        "https://github.com/acme/widget",
        "https://user@github.com/acme/widget.git/",
        "ssh://git@github.com:22/acme/widget.git",
    ]
    assert {normalize_origin(f) for f in forms} == {"github.com/acme/widget"}
