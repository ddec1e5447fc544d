"""The git repository of a working directory: toplevel and origin, read from ``.git`` directly.

No ``git`` process: walk up from the cwd to the first ``.git`` (a directory, or a file saying
``gitdir: ...`` for worktrees and submodules), follow ``commondir`` for linked worktrees, and
read ``remote "origin"``'s url from that config. Answers are cached per cwd for the life of
the resolver (one reconcile). A cwd that no longer exists has no repo.

The repo's *identity* (``repo``) is its origin normalised to ``host/owner/name`` (so an SSH
and an HTTPS clone are the same repo), else the toplevel path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_SCP = re.compile(r"^(?:[^@/]+@)?([^:/]+):(?!/)(.+)$")
_URL = re.compile(r"^[a-z][a-z0-9+.-]*://(?:[^@/]+@)?([^/:]+)(?::\d+)?/(.+)$", re.IGNORECASE)


@dataclass(frozen=True)
class RepoInfo:
    root: str
    origin: str | None

    @property
    def repo(self) -> str:
        return normalize_origin(self.origin) if self.origin else self.root


def normalize_origin(url: str) -> str:
    """``git@github.com:acme/widget.git`` and ``https://github.com/acme/widget`` alike become
    ``github.com/acme/widget``; a local path stays a path."""
    text = url.strip()
    match = _URL.match(text)
    if match and not text.lower().startswith("file://"):
        host, path = match.group(1), match.group(2)
    else:
        scp = _SCP.match(text)
        if scp and not text.startswith("/"):
            host, path = scp.group(1), scp.group(2)
        else:
            return text.removeprefix("file://").rstrip("/")
    path = path.strip("/").removesuffix(".git")
    return f"{host}/{path}".lower()


def normalize_repo_query(value: str) -> str:
    """A repo filter as the user typed it, in the form ``repo`` is stored in."""
    text = value.strip()
    if not text:
        return text
    if text.startswith("/"):
        return text.rstrip("/") or "/"
    if "://" in text or _SCP.match(text):
        return normalize_origin(text)
    return text.rstrip("/").removesuffix(".git").lower() if "/" in text else text


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _origin_from_config(text: str) -> str | None:
    section: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]").strip()
            continue
        if section is None:
            continue
        name, sep, value = line.partition("=")
        if not sep:
            continue
        head, _, sub = section.partition(" ")
        is_origin = head.lower() == "remote" and sub.strip().strip('"') == "origin"
        if is_origin and name.strip().lower() == "url":
            return value.strip().strip('"')
    return None


def find_repo(cwd: str) -> RepoInfo | None:
    start = Path(cwd)
    if not start.is_absolute() or not start.is_dir():
        return None
    for directory in (start, *start.parents):
        dot = directory / ".git"
        if dot.is_dir():
            gitdir = dot
        elif dot.is_file():
            text = _read(dot) or ""
            if not text.startswith("gitdir:"):
                continue
            target = Path(text[len("gitdir:") :].strip())
            gitdir = target if target.is_absolute() else (directory / target).resolve()
        else:
            continue
        common = gitdir
        commondir = _read(gitdir / "commondir")
        if commondir and commondir.strip():
            candidate = Path(commondir.strip())
            common = candidate if candidate.is_absolute() else (gitdir / candidate).resolve()
        config = _read(common / "config")
        origin = _origin_from_config(config) if config else None
        return RepoInfo(root=str(directory), origin=origin)
    return None


class RepoResolver:
    """``find_repo`` with a per-cwd cache."""

    def __init__(self) -> None:
        self._cache: dict[str, RepoInfo | None] = {}

    def __call__(self, cwd: str | None) -> RepoInfo | None:
        if not cwd:
            return None
        if cwd not in self._cache:
            self._cache[cwd] = find_repo(cwd)
        return self._cache[cwd]
