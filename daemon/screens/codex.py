"""Codex CLI's screen.

Theory of operation
-------------------
Codex draws its composer as a line starting ``›`` at column 0 near the bottom, followed only by
indented lines: a draft's further lines (wrapped, or a multi-line draft's), then its status and
footer lines (``model · cwd``, ``? for shortcuts``). Earlier prompts
in the history also start with ``›``, so the composer is the last such line with nothing but
indented footer lines after it. An empty composer shows a dim placeholder; without colours
the placeholder is told apart by its known texts.

* busy: ``esc to interrupt`` on the status line just above the composer
  (``• Working (2s • esc to interrupt)``);
* menu: no composer and a selected numbered option (``› 1. Allow``), as in the MCP approval,
  read as a ``Menu`` too (question, the call's arguments, options without their description
  column, each picked by its number);
* idle: the composer with no busy marker;
* exited: tmux says dead, an exit marker ends the screen, or Codex's resume hint
  (``codex resume``) is the last thing it printed;
* anything else: unknown.
"""

from __future__ import annotations

import re

from openbus.daemon.screens.base import (
    EXITED,
    Evidence,
    Reading,
    Rule,
    clean_title,
    nonblank_above,
    numbered_menu,
    pr_links,
    reader,
    screen_lines,
    shows_exit,
)

_PROMPT = re.compile(r"^›\s?(.*)$")
_OPTION_SELECTED = re.compile(r"^\s*›\s*\d+\.\s+\S")
_OPTION = re.compile(r"^\s+\d+\.\s+\S")
_MENU_LINES = 30  # how far up from the bottom a menu's selected option is looked for
_WORKING = re.compile(r"^•\s+(.*?)\s*\(([^()]*?)\s*•\s*esc to interrupt\)")
PLACEHOLDERS = frozenset(
    {
        "Ask Codex to do anything",
        "Find and fix a bug in @filename",
        "Explain this codebase",
        "Summarize recent commits",
        "Implement {feature}",
        "Write tests for @filename",
        "Improve documentation in @filename",
        "Run /review on my current changes",
        "Use /skills to list available skills",
    }
)


def _composer(lines: list[str]) -> int | None:
    """The composer's first line: the last ``›`` line at column 0 with only indented lines
    (the draft's wrapped or further lines, the status and footer lines) below it. A picker's
    selected option (``› 1. …`` with ``  2. …`` just below) is not a composer."""
    for index in range(len(lines) - 1, -1, -1):
        line = lines[index]
        if _PROMPT.match(line):
            after = [tail for tail in lines[index + 1 :] if tail.strip()]
            if _OPTION_SELECTED.match(line) and any(_OPTION.match(t) for t in after[:4]):
                return None
            return index if all(tail.startswith("  ") for tail in after) else None
        if line.strip() and not line.startswith("  "):
            return None
    return None


def _last_reply(lines: list[str]) -> str:
    for line in reversed(lines):
        if line.startswith("• "):
            return line[2:]
    return ""


RULES = {
    "exited": EXITED,
    "menu-dialog": Rule(
        "no composer, and a selected numbered option (› 1. …): an approval or a picker",
        "answering it (its keys), after which the composer returns",
    ),
    "exited-resume-hint": Rule(
        "no composer, and Codex's parting 'codex resume' hint at the bottom",
        "a new process in the pane",
    ),
    "unknown-no-composer": Rule(
        "no composer line (› at column 0 with only indented lines below) and no menu",
        "the composer drawn again",
    ),
    "busy-marker": Rule(
        "the composer with 'esc to interrupt' on the status line just above it",
        "the turn ending ('Worked for …' replaces the status line)",
    ),
    "idle-composer": Rule(
        "the composer with no busy status line above it; empty when it shows only a known "
        "placeholder",
        "a submitted prompt (busy), an approval or picker (menu), or text typed (a draft)",
    ),
}


def parse(text: str, ev: Evidence) -> Reading:
    lines = screen_lines(text)
    title = clean_title(ev)
    links = pr_links(text)

    reading = reader(title, links)

    if ev.dead or shows_exit(lines):
        return reading("exited", None, "exited", "exited", lines[-1:])

    index = _composer(lines)
    if index is None:
        options = [ln.strip() for ln in lines[-_MENU_LINES:] if _OPTION_SELECTED.match(ln)]
        if options:
            question = next((ln.strip() for ln in reversed(lines) if ln.strip().endswith("?")), "")
            shown = [question, *options] if question else options
            return reading(
                "menu",
                None,
                question or "a menu is open",
                "menu-dialog",
                shown,
                menu=numbered_menu(lines, _OPTION_SELECTED),
            )
        tail = [line for line in lines[-6:] if line.strip()]
        hint = [line for line in tail if "codex resume" in line]
        if hint:
            return reading("exited", None, "exited; resumable", "exited-resume-hint", hint)
        return reading("unknown", None, "", "unknown-no-composer", tail[-3:])

    m = _PROMPT.match(lines[index])
    draft = (m.group(1) if m else "").strip()
    composer_empty = not draft or draft in PLACEHOLDERS
    for line in nonblank_above(lines, index, 2):
        working = _WORKING.match(line)
        if working or "esc to interrupt" in line.lower():
            what = f"{working.group(1)} ({working.group(2)})" if working else line
            return reading("busy", composer_empty, "working: " + what, "busy-marker", [line])
    summary = _last_reply(lines[:index]) or "ready"
    return reading("idle", composer_empty, summary, "idle-composer", lines[index : index + 3])
