"""What every screen parser shares: the reading it returns, the evidence it weighs, helpers.

Theory of operation
-------------------
A parser is a pure function ``(screen text, Evidence) -> Reading``. The screen is what
``capture-pane -p`` printed (escape sequences are stripped here if a capture kept them); the
evidence is everything else the daemon knows about the pane without looking at the screen:
the harness found in its process tree, tmux's dead flag and pane title, copy mode, and for
Claude Code its live status file. A parser answers only what it recognizes: a screen it cannot
place is ``unknown`` (never a guess), and a footer is never taken for work.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

State = Literal["idle", "busy", "menu", "shell", "exited", "unknown"]
STATES: tuple[State, ...] = ("idle", "busy", "menu", "shell", "exited", "unknown")
HARNESSES = ("claude", "codex", "opencode", "omp", "gemini", "shell", "unknown")

_ANSI = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC
    r"|\x1b[PX^_][^\x1b]*\x1b\\"  # DCS, SOS, PM, APC
    r"|\x1b[@-Z\\-_]"  # two-byte escapes
    r"|[\x00-\x08\x0b-\x1f\x7f]"  # remaining C0 controls except tab and newline
)


@dataclass(frozen=True)
class ClaudeStatus:
    """Claude Code's live status file (``<config>/sessions/<pid>.json``), already checked to
    belong to the running process."""

    status: str  # "idle" | "busy" | "waiting" | anything newer
    waiting_for: str | None = None
    session_id: str | None = None
    name: str | None = None
    since: float | None = None  # when the status was set (epoch seconds; None: not said)


@dataclass(frozen=True)
class Evidence:
    harness: str = "unknown"
    pane_title: str = ""
    hostname: str = ""
    dead: bool = False
    in_mode: bool = False  # copy mode or another tmux mode covers the pane
    claude_status: ClaudeStatus | None = None
    # seconds since the screen text last changed (None: not known); a harness at work redraws
    # its spinner several times a second, so a still screen outweighs a status file's ``busy``
    screen_still: float | None = None
    # when the screen text last changed (epoch seconds, as ``ClaudeStatus.since``; None: not
    # known): a ``busy`` status set before an idle-looking screen was drawn is left behind
    screen_changed: float | None = None


# How long an idle-looking screen must stay unchanged before a ``busy`` status file (which
# can lag the screen, or be left behind by a turn that ended) no longer makes it busy.
STILL_SCREEN_SECONDS = 3.0


@dataclass(frozen=True)
class MenuOption:
    """One choice of an on-screen menu, with the key that picks it (``"1"``, ``"y"``,
    ``"Enter"``, ``"Escape"``: tmux ``send-keys`` names)."""

    label: str
    key: str


@dataclass(frozen=True)
class Menu:
    """A screen waiting for a person (permission prompt, question, picker, trust dialog), as
    the parser read it: the question and its options, in screen order."""

    question: str
    options: tuple[MenuOption, ...] = ()
    detail: str = ""  # what the dialog shows besides question and options (the command...)

    def to_dict(self) -> dict[str, object]:
        return {
            "question": self.question,
            "options": [{"label": o.label, "key": o.key} for o in self.options],
            "detail": self.detail,
            "fingerprint": self.fingerprint(),
        }

    def fingerprint(self) -> str:
        """A digest of what the person is asked (question, detail, options): an answer given
        to one screen is refused on another, even one with the same question."""
        shown = [self.question, self.detail, [(o.label, o.key) for o in self.options]]
        blob = json.dumps(shown, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:20]


@dataclass(frozen=True)
class Reading:
    state: State
    composer_empty: bool | None = None
    title: str | None = None
    summary: str = ""
    pr_links: tuple[str, ...] = field(default_factory=tuple)
    menu: Menu | None = None  # only with state "menu", and only when the parser read one
    rule: str = ""  # which of the parser's rules (its ``RULES``) produced this reading
    lines: tuple[str, ...] = ()  # the screen lines that rule rests on

    def to_dict(self) -> dict[str, object]:
        return {
            "state": self.state,
            "composer_empty": self.composer_empty,
            "title": self.title,
            "summary": self.summary,
            "pr_links": list(self.pr_links),
            "menu": self.menu.to_dict() if self.menu else None,
        }


@dataclass(frozen=True)
class Rule:
    """One way a parser reaches a state: why it holds, and what would change the reading."""

    because: str
    changes: str


# The rule every parser shares: the pane's process is gone.
EXITED = Rule(
    "tmux says the pane's process is dead (or /proc no longer knows it), or an exit marker "
    "ends the screen",
    "a new process in the pane (a new incarnation)",
)


def reader(title: str | None, links: tuple[str, ...]) -> Callable[..., Reading]:
    """A parser's ``reading(state, composer_empty, summary, rule, lines=(), menu=None)`` for
    one screen: the title and PR links are the screen's, the summary is cut to one line."""

    def reading(
        state: State,
        composer_empty: bool | None,
        summary: str,
        rule: str,
        shown: Sequence[str] = (),
        *,
        menu: Menu | None = None,
    ) -> Reading:
        return Reading(
            state,
            composer_empty,
            title,
            one_line(summary),
            links,
            menu,
            rule=rule,
            lines=tuple(shown),
        )

    return reading


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text) if ("\x1b" in text or "\r" in text) else text


def screen_lines(text: str) -> list[str]:
    """The screen as lines without escapes or trailing blanks (trailing empty lines dropped)."""
    # (trailing blanks off the whole screen first: the blank lines below its last text are
    # never split out one by one)
    plain = _plain(text)
    return [line.rstrip() for line in plain.split("\n")] if plain else []


def last_line(text: str) -> str:
    """The screen's last non-blank line, stripped: ``last_nonblank(screen_lines(text))``
    without splitting the lines above it."""
    plain = _plain(text)
    return plain[plain.rfind("\n") + 1 :].strip()


def _plain(text: str) -> str:
    """The screen without escapes, carriage returns or the blanks after its last text."""
    return strip_ansi(text).replace("\r", "").rstrip()


def one_line(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def last_nonblank(lines: list[str]) -> str:
    for line in reversed(lines):
        if line.strip():
            return line.strip()
    return ""


# --------------------------------------------------------------------------- PR links

_GITHUB_PR = re.compile(r"https?://github\.com/[\w.-]+/[\w.-]+/pull/\d+")
_GITLAB_MR = re.compile(r"https?://[\w.-]+(?:/[\w.-]+)+/-/merge_requests/\d+")
_LABELLED = re.compile(
    r"(?<![\w/])(?:PR|MR|pull request|merge request)\s+(?:[\w.-]+/[\w.-]+)?(#|!)(\d+)\b",
    re.IGNORECASE,
)


def nonblank_above(lines: list[str], index: int, count: int) -> list[str]:
    """Up to ``count`` non-blank lines above ``index``, nearest first, stripped."""
    out: list[str] = []
    for line in reversed(lines[:index]):
        if line.strip():
            out.append(line.strip())
            if len(out) == count:
                break
    return out


def pr_links(text: str) -> tuple[str, ...]:
    """GitHub PR and GitLab MR URLs on screen, in order of first appearance, plus ``#123``
    only where a label makes it unambiguous (``PR #123``, ``pull request #123``, ``MR !7``)."""
    plain = strip_ansi(text)
    found: list[tuple[int, str]] = []
    if "http" in plain:  # (each URL pattern starts with it: a screen without one is not scanned)
        for pattern in (_GITHUB_PR, _GITLAB_MR):
            found.extend((m.start(), m.group(0).rstrip(".")) for m in pattern.finditer(plain))
    if "#" in plain or "!" in plain:  # (a labelled number has one or the other)
        for m in _LABELLED.finditer(plain):
            found.append((m.start(), f"{m.group(1)}{m.group(2)}"))
    seen: dict[str, None] = {}
    for _, link in sorted(found):
        seen.setdefault(link.replace("http://", "https://", 1), None)
    return tuple(seen)


# --------------------------------------------------------------------------- titles

_TITLE_GLYPHS = "✳✻✽✶✢·*⠂⠐⠁⠈⠄⠠⠀⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏◐◓◑◒ "


def clean_title(evidence: Evidence) -> str | None:
    """The pane title as the harness set it, without spinner glyphs; None when it is only
    tmux's default (the host name) or empty."""
    title = evidence.pane_title.strip().lstrip(_TITLE_GLYPHS).strip()
    if not title or (evidence.hostname and title == evidence.hostname):
        return None
    return title


# --------------------------------------------------------------------------- generic exit

_EXIT_MARKERS = (
    re.compile(r"^Pane is dead\b"),
    re.compile(r"^\[(?:exited|process completed|Process exited.*)\]$", re.IGNORECASE),
    re.compile(r"^EXIT=\d+$"),
)


def shows_exit(lines: list[str]) -> bool:
    return is_exit_line(last_nonblank(lines))


def is_exit_line(line: str) -> bool:
    """Whether a screen's last non-blank line (stripped) says its process ended."""
    return any(p.search(line) for p in _EXIT_MARKERS)


# --------------------------------------------------------------------------- menus

_NUMBERED = re.compile(r"^(\s*)(?:[❯›>]\s*)?(\d{1,2})\.\s+(\S.*?)\s*$")
_COLUMNS = re.compile(r"\s{2,}")  # a label and its description, in two columns
_FULL_RULE = re.compile(r"^\s*─{8,}\s*$")
_DASHED_RULE = re.compile(r"^\s*[╌┄-]{8,}\s*$")
_MENU_REACH = 20  # lines above the options that may still belong to the dialog


def numbered_menu(lines: list[str], selected: re.Pattern[str]) -> Menu | None:
    """The numbered menu around the last line matching ``selected`` (the harness's pointer on
    an option, ``❯ 1. Yes``): its options numbered 1, 2, … in screen order (a wrapped label's
    continuation joined, a second column of description dropped), each picked by its number;
    the question (the nearest line above ending in ``?``, else the dialog's first line) and the
    dialog's other lines as its detail. The dialog reaches up to a full-width rule, a run of
    blank lines or ``_MENU_REACH`` lines. None when there is no such option."""
    at = next((i for i in range(len(lines) - 1, -1, -1) if selected.match(lines[i])), None)
    if at is None:
        return None
    start = at
    while start > 0 and _NUMBERED.match(lines[start - 1]):
        start -= 1
    options: list[tuple[str, str]] = []
    indent = 0
    for line in lines[start:]:
        m = _NUMBERED.match(line)
        if m and int(m.group(2)) == len(options) + 1:
            indent = len(m.group(1))
            options.append((m.group(2), _COLUMNS.split(m.group(3))[0]))
        elif options and line.strip() and len(line) - len(line.lstrip()) > indent + 2:
            key, label = options[-1]
            options[-1] = (key, f"{label} {_COLUMNS.split(line.strip())[0]}")
        else:
            break
    if not options:
        return None
    region: list[str] = []
    blanks = 0
    for line in reversed(lines[max(0, start - _MENU_REACH) : start]):
        if _FULL_RULE.match(line):
            break
        blanks = blanks + 1 if not line.strip() else 0
        if blanks >= 3:
            break
        if line.strip() and not _DASHED_RULE.match(line):
            region.append(line.strip())
    region.reverse()
    question = next((line for line in reversed(region) if line.endswith("?")), "")
    if not question and region:
        question = region[0]
    detail = [line for line in region if line != question]
    return Menu(
        question=one_line(question, 300),
        options=tuple(MenuOption(one_line(label, 200), key) for key, label in options),
        detail=one_line(" · ".join(detail), 400),
    )
