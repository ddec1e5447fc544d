"""A git worktree for a child session, made with git that runs nothing of the repository's.

Theory of operation
-------------------
``check(cwd)`` finds the repository around ``cwd`` (its top level, project name and current
branch) and refuses one whose own config (or a file it includes) sets a checkout filter
(``filter.<name>.smudge`` or ``.process``): making a worktree would run that command.
``create`` then claims ``<root>/<project>/<name>`` with an atomic ``mkdir`` and ``git
worktree add -b openbus/<name>`` into it; a folder or branch that already exists takes the
next suffix (``-2``, ``-3``, ...), so two starts with one title never race for a name. The base
branch is recorded in the repository's config as ``branch.openbus/<name>.openbusBase``. The
daemon's creates in one repository run one at a time (git's own lock files would refuse a
second writer at the same moment), and a git that found a lock file held by someone else (the
user's own git) is run again, a few times, shortly after.

Every git runs with ``core.hooksPath=/dev/null`` (no hook of the repository runs, e.g. its
post-checkout), ``core.fsmonitor=false`` (no fsmonitor command), ``submodule.recurse=false``
and ``GIT_CONFIG_NOSYSTEM=1``; nothing the agent supplies reaches its argv except the name,
which ``core.sessions.worktree_name`` made branch-safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import weakref
from dataclasses import dataclass
from pathlib import Path

from openbus.kernel.errors import Forbidden, Unavailable

HARDENING = (
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "submodule.recurse=false",
)
BRANCH_PREFIX = "openbus/"
MAX_SUFFIX = 100
LOCK_RETRIES = 20
LOCK_RETRY_SECONDS = 0.1
# One create at a time per repository in this process (kept while some create holds it).
_CREATING: weakref.WeakValueDictionary[Path, asyncio.Lock] = weakref.WeakValueDictionary()


@dataclass(frozen=True)
class Repo:
    top: Path
    project: str
    base: str  # the branch the worktree starts from (or HEAD's commit when detached)


@dataclass(frozen=True)
class Worktree:
    path: Path
    branch: str
    base: str


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    env["GIT_TERMINAL_PROMPT"] = "0"
    return env


async def git(cwd: Path, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        "git",
        *HARDENING,
        *args,
        cwd=str(cwd),
        env=_env(),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await proc.communicate()
    finally:
        if proc.returncode is None:  # cancelled: leave no git running, and reap it
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await asyncio.shield(proc.wait())
    return proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace")


def _held_lock(err: str) -> bool:
    """Whether git refused because another git holds one of its lock files."""
    return "could not lock" in err or (".lock" in err and "File exists" in err)


async def _git_writing(cwd: Path, *args: str) -> tuple[int, str, str]:
    """``git``, run again shortly while another git holds a lock it needs (bounded)."""
    for _ in range(LOCK_RETRIES):
        code, out, err = await git(cwd, *args)
        if code == 0 or not _held_lock(err):
            break
        await asyncio.sleep(LOCK_RETRY_SECONDS)
    return code, out, err


async def check(cwd: Path) -> Repo:
    """The repository a worktree would be made from, or ``Forbidden`` saying why not."""
    code, out, err = await git(cwd, "rev-parse", "--show-toplevel")
    if code != 0:
        raise Forbidden(f"{cwd} is not in a git repository: no worktree", field="worktree")
    top = Path(out.strip())
    code, out, _ = await git(
        top, "config", "--local", "--includes", "--get-regexp", r"^filter\..*\.(smudge|process)$"
    )
    if code == 0 and out.strip():
        name = out.split()[0]
        raise Forbidden(
            f"the repository's config sets a checkout filter ({name}), which making a worktree "
            "would run: no worktree; ask the user",
            field="worktree",
        )
    code, out, _ = await git(top, "symbolic-ref", "--quiet", "--short", "HEAD")
    base = out.strip()
    if code != 0 or not base:
        code, out, err = await git(top, "rev-parse", "HEAD")
        if code != 0:
            raise Forbidden(f"the repository has no commit to branch from: {err.strip()}")
        base = out.strip()
    return Repo(top=top, project=top.name, base=base)


async def create(repo: Repo, root: Path, name: str) -> Worktree:
    """``<root>/<project>/<name>`` on ``openbus/<name>``, the next free suffix if taken."""
    lock = _CREATING.get(repo.top)
    if lock is None:
        lock = _CREATING[repo.top] = asyncio.Lock()
    async with lock:
        return await _create(repo, root, name)


async def _create(repo: Repo, root: Path, name: str) -> Worktree:
    parent = root / repo.project
    parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    for n in range(1, MAX_SUFFIX + 1):
        candidate = name if n == 1 else f"{name}-{n}"
        path = parent / candidate
        try:
            path.mkdir(mode=0o755)  # the atomic claim of the folder
        except FileExistsError:
            continue
        branch = BRANCH_PREFIX + candidate
        code, _, err = await _git_writing(
            repo.top, "worktree", "add", "-b", branch, str(path), repo.base
        )
        if code == 0:
            await _git_writing(repo.top, "config", f"branch.{branch}.openbusBase", repo.base)
            return Worktree(path=path, branch=branch, base=repo.base)
        with contextlib.suppress(OSError):
            path.rmdir()
        if "already exists" in err or "cannot lock ref" in err:
            continue  # the branch is taken (by another start, or the user): next suffix
        raise Unavailable(f"git could not make the worktree: {err.strip()[:300]}")
    raise Unavailable(f"no free worktree name for {name} under {parent}")


async def remove(repo_top: Path, worktree: Worktree) -> None:
    """Take back a worktree whose child never started (the branch goes with it)."""
    await git(repo_top, "worktree", "remove", "--force", str(worktree.path))
    await git(repo_top, "branch", "-D", worktree.branch)
