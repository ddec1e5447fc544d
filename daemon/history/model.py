"""The history index's values: one entry per session, a search hit, a liveness answer."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

CLAUDE = "claude"
CODEX = "codex"
OMP = "omp"
GEMINI = "gemini"
OPENCODE = "opencode"
HARNESSES = (CLAUDE, CODEX, OMP, GEMINI, OPENCODE)
PENDING_HARNESSES: tuple[str, ...] = ()

MAX_PROMPTS = 20  # the first and last ten when a session has more
MAX_PROMPT_CHARS = 1000
MAX_TITLE_CHARS = 80

# A lone UTF-16 surrogate: what a JSON escape like "\ud800" with no partner decodes to (a
# harness that cuts a string inside an emoji writes one); valid pairs decode to one code point
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_text(text: str) -> str:
    """``text`` with each lone surrogate as U+FFFD, so that it encodes as UTF-8 (the index,
    the API): one such character must not keep its whole transcript out of the index."""
    if text.isascii() or not _LONE_SURROGATE.search(text):
        return text
    return _LONE_SURROGATE.sub("\ufffd", text)


class LiveState(enum.StrEnum):
    RUNNING = "running"
    NOT_RUNNING = "not_running"
    RUNNING_UNKNOWN = "running_unknown"


@dataclass(frozen=True)
class Liveness:
    state: LiveState
    pane: str | None = None
    pid: int | None = None

    def for_routing(self) -> dict[str, Any]:
        """What routing needs and nothing more: the state and the pane."""
        return {"state": self.state.value, "pane": self.pane}


@dataclass(frozen=True)
class ParsedSession:
    """What a parser reads from one transcript file (no I/O, no repo lookup)."""

    harness: str
    session_id: str
    cwd: str | None
    branches: tuple[str, ...] = ()
    prs: tuple[str, ...] = ()
    title: str | None = None
    prompts: tuple[str, ...] = ()
    started: float | None = None
    last_active: float | None = None
    subagent: bool = False
    parent_session_id: str | None = None
    origin: str | None = None  # from the transcript itself (Codex git info), if any


@dataclass(frozen=True)
class SessionEntry:
    harness: str
    session_id: str
    repo: str | None  # origin as host/owner/name, else the git toplevel path
    repo_root: str | None
    origin: str | None
    cwd: str | None
    branches: tuple[str, ...]
    prs: tuple[str, ...]
    title: str | None
    prompts: tuple[str, ...]
    started: float | None
    last_active: float | None
    resume_argv: tuple[str, ...] | None
    subagent: bool
    parent_session_id: str | None = None
    transcript: str | None = None  # path; None once the transcript is gone
    extra_files: tuple[str, ...] = field(default=())
    # as read from the index: the fingerprint of the masking rules under which its shown text
    # (``project.shown_texts``) was screened and held nothing to mask; None: not so known. Set
    # by the store alone, as it reads the entry: not an argument, so an entry made from another
    # by ``dataclasses.replace`` (another title, say) never carries it over
    clean_under: int | None = field(default=None, compare=False, init=False)

    @property
    def key(self) -> tuple[str, str]:
        return (self.harness, self.session_id)

    def to_dict(self) -> dict[str, Any]:
        """The full entry, for the human API."""
        return {
            "harness": self.harness,
            "session_id": self.session_id,
            "repo": self.repo,
            "repo_root": self.repo_root,
            "origin": self.origin,
            "cwd": self.cwd,
            "branches": list(self.branches),
            "prs": list(self.prs),
            "title": self.title,
            "prompts": list(self.prompts),
            "started": iso(self.started),
            "last_active": iso(self.last_active),
            "resume_argv": list(self.resume_argv) if self.resume_argv else None,
            "subagent": self.subagent,
            "parent_session_id": self.parent_session_id,
            "transcript": self.transcript,
        }


@dataclass(frozen=True)
class Hit:
    entry: SessionEntry
    score: float  # bm25: lower is better
    matched_terms: tuple[str, ...]


def iso(ts: float | None) -> str | None:
    """``ts`` in UTC to the millisecond, as ``isoformat(timespec="milliseconds")`` with a
    ``Z``, written out by hand (that call costs several times this, on every search hit)."""
    if ts is None:
        return None
    d = datetime.fromtimestamp(ts, UTC)
    return "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ" % (  # noqa: UP031 - the quickest spelling
        d.year,
        d.month,
        d.day,
        d.hour,
        d.minute,
        d.second,
        d.microsecond // 1000,
    )


def parse_time(value: object) -> float | None:
    """An ISO 8601 string, epoch seconds or epoch milliseconds, as epoch seconds."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        seconds = float(value)
        return seconds / 1000.0 if seconds > 1e11 else seconds
    if not isinstance(value, str) or not value:
        return None
    try:  # the common case, as every harness writes it (Python 3.11 reads "Z" and nanoseconds)
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return _parse_time_loosely(value)
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()


def _parse_time_loosely(value: str) -> float | None:
    text = value.strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    # Python 3.11 fromisoformat takes up to 6 fractional digits; trim nanoseconds.
    head, dot, rest = text.partition(".")
    if dot:
        digits = ""
        tail = ""
        for i, ch in enumerate(rest):
            if not ch.isdigit():
                tail = rest[i:]
                break
            digits += ch
        text = f"{head}.{digits[:6] or '0'}{tail}"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()
