"""Codex CLI's screen.

Theory of operation
-------------------
Codex draws its composer as a line starting ``›`` at column 0 near the bottom, followed only by
its indented status and footer lines (``model · cwd``, ``? for shortcuts``). Earlier prompts
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
    Evidence,
    Menu,
    Reading,
    State,
    clean_title,
    nonblank_above,
    numbered_menu,
    one_line,
    pr_links,
    screen_lines,
    shows_exit,
)

_PROMPT = re.compile(r"^›\s?(.*)$")
_OPTION_SELECTED = re.compile(r"^\s+›\s*\d+\.\s+\S")
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
_MAX_FOOTER = 5


def _composer(lines: list[str]) -> int | None:
    for index in range(len(lines) - 1, -1, -1):
        line = lines[index]
        if _PROMPT.match(line):
            after = [tail for tail in lines[index + 1 :] if tail.strip()]
            if len(after) <= _MAX_FOOTER and all(tail.startswith("  ") for tail in after):
                return index
            return None
        if line.strip() and not line.startswith("  "):
            return None
    return None


def _last_reply(lines: list[str]) -> str:
    for line in reversed(lines):
        if line.startswith("• "):
            return line[2:]
    return ""


def parse(text: str, ev: Evidence) -> Reading:
    lines = screen_lines(text)
    title = clean_title(ev)
    links = pr_links(text)

    def reading(
        state: State, composer_empty: bool | None, summary: str, menu: Menu | None = None
    ) -> Reading:
        return Reading(state, composer_empty, title, one_line(summary), links, menu)

    if ev.dead or shows_exit(lines):
        return reading("exited", None, "exited")

    index = _composer(lines)
    if index is None:
        if any(_OPTION_SELECTED.match(line) for line in lines[-15:]):
            question = next((ln.strip() for ln in reversed(lines) if ln.strip().endswith("?")), "")
            menu = numbered_menu(lines, _OPTION_SELECTED)
            return reading("menu", None, question or "a menu is open", menu)
        tail = [line for line in lines[-6:] if line.strip()]
        if any("codex resume" in line for line in tail):
            return reading("exited", None, "exited; resumable")
        return reading("unknown", None, "")

    m = _PROMPT.match(lines[index])
    draft = (m.group(1) if m else "").strip()
    composer_empty = not draft or draft in PLACEHOLDERS
    for line in nonblank_above(lines, index, 2):
        working = _WORKING.match(line)
        if working or "esc to interrupt" in line.lower():
            what = f"{working.group(1)} ({working.group(2)})" if working else line
            return reading("busy", composer_empty, "working: " + what)
    return reading("idle", composer_empty, _last_reply(lines[:index]) or "ready")
