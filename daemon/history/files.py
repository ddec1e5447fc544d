"""One transcript file read into the session it holds: what a reconcile does with each changed
file of a harness that keeps files (every one but OpenCode, whose sessions are rows of its
database: ``opencode``).

It imports only the parsers and the model, so the parse helper (``parse_helper``) starts in a
few tens of milliseconds: no store, no configuration, no sources.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from openbus.daemon.history.model import CLAUDE, GEMINI, OMP, ParsedSession
from openbus.daemon.history.parse import (
    parse_claude,
    parse_codex,
    parse_gemini,
    parse_omp,
    split_lines,
)
from openbus.kernel.regular_files import open_regular, read_regular

FileKey = tuple[int, int, int]  # (size, mtime_ns, inode)


def read_file(
    harness: str, path: str | Path, names: Mapping[str, str]
) -> tuple[ParsedSession | None, FileKey]:
    """The session the transcript at ``path`` holds (None if none) and the file's key as
    read; ``names``: Codex's thread names of the home it is under. OSError when it cannot be
    read, or is not a regular file (``open_regular``)."""
    fd, st = open_regular(path)
    try:  # the key of the file read, not of one seen before
        lines = split_lines(read_all(fd, st.st_size))
    finally:
        os.close(fd)
    parsed: ParsedSession | None
    if harness == CLAUDE:
        parsed = parse_claude(lines, file_name=os.path.basename(path))
    elif harness == OMP:
        parsed = parse_omp(lines)
    elif harness == GEMINI:
        parsed = parse_gemini(lines, cwd=gemini_project_root(Path(path)))
    else:
        parsed = parse_codex(lines, thread_names=names)
    if parsed is not None and parsed.last_active is None:
        parsed = replace(parsed, last_active=st.st_mtime, started=parsed.started or st.st_mtime)
    return parsed, file_key(st)


def gemini_project_root(chat: Path) -> str | None:
    """The cwd of a Gemini CLI chat: its project's ``.project_root`` (beside ``chats/``)."""
    try:
        raw = read_regular(chat.parent.parent / ".project_root", 8192)
    except OSError:
        return None
    text = raw.decode("utf-8", "replace").strip()
    return text if text.startswith("/") and "\n" not in text else None


def file_key(st: os.stat_result) -> FileKey:
    return (st.st_size, st.st_mtime_ns, st.st_ino)


def read_all(fd: int, size: int) -> bytes:
    """What an open file holds from where it is read to its end (``size``: what it held when
    opened; it may have grown since)."""
    data = os.read(fd, size + 1)
    more = os.read(fd, 1 << 16) if data else b""
    if not more:
        return data
    chunks = [data, more]
    while more:
        more = os.read(fd, 1 << 16)
        chunks.append(more)
    return b"".join(chunks)
