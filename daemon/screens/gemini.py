"""Gemini CLI's screen.

Theory of operation
-------------------
Gemini CLI draws its composer as a line `` > TEXT`` under a rule of ``─`` (with at most one
hint line between, ``Shift+Tab to accept edits``) and above its footer (``workspace
(/directory)``, the cwd, the model): the composer is the last `` > `` line with a rule just
above it and no more than a few footer lines below. An empty composer shows the placeholder
``Type your message or @path/to/file``. Earlier prompts in the history also start `` > ``, but
have no rule above them.

* menu: a box ending the screen with numbered options (``● 1. Allow once``, ``2. Allow for this
  session``, ``3. No, suggest changes (esc)``) under its question (``Allow execution of
  [Shell]?``); the digit picks each option;
* busy: ``(esc to cancel`` on a line between the history and the rule
  (``⠹ Thinking... (esc to cancel, 6s)``);
* idle: the composer with no busy line;
* exited: tmux says dead or an exit marker ends the screen;
* anything else (dialogs, a screen without the composer): unknown.

The pane title carries a state glyph and the directory (``◇  Ready (proj)``,
``✦  Working… (proj)``), not a session title, so the title is left unknown.
"""

from __future__ import annotations

import re

from openbus.daemon.screens.base import (
    Evidence,
    Menu,
    MenuOption,
    Reading,
    State,
    one_line,
    pr_links,
    screen_lines,
    shows_exit,
)

_PROMPT = re.compile(r"^ > ?(.*)$")
PLACEHOLDER = "Type your message or @path/to/file"
_MAX_FOOTER = 8  # the footer wraps to four lines (and blank ones) in a 60-column pane
_RULE_DISTANCE = 4


_BOX_OPTION = re.compile(r"^│ (?:●|\s)\s*(\d)\. (.+?)\s*(?:│|\ufffd)?$")
_BOX_TEXT = re.compile(r"^│ (\S.*?)\s*(?:│|\ufffd)?$")


def _menu(lines: list[str]) -> Menu | None:
    """The numbered choice box ending the screen (a confirmation), if any."""
    if not lines or not lines[-1].startswith("╰"):
        return None
    top = next((i for i in range(len(lines) - 2, -1, -1) if lines[i].startswith("╭")), None)
    if top is None:
        return None
    box = lines[top + 1 : -1]
    options = [
        MenuOption(m.group(2), m.group(1)) for m in map(_BOX_OPTION.match, box) if m is not None
    ]
    if not options:
        return None
    first = next(i for i, line in enumerate(box) if _BOX_OPTION.match(line))
    texts = [m.group(1) for m in map(_BOX_TEXT.match, box[:first]) if m is not None]
    question = next((t for t in reversed(texts) if t.endswith("?")), texts[-1] if texts else "")
    return Menu(question, tuple(options))


def _is_rule(line: str) -> bool:
    return line.startswith("─")


def _composer(lines: list[str]) -> int | None:
    for index in range(len(lines) - 1, max(-1, len(lines) - 2 - _MAX_FOOTER), -1):
        if _PROMPT.match(lines[index]):
            above = lines[max(0, index - _RULE_DISTANCE) : index]
            return index if any(_is_rule(line) for line in above) else None
    return None


def parse(text: str, ev: Evidence) -> Reading:
    lines = screen_lines(text)
    links = pr_links(text)

    def reading(state: State, composer_empty: bool | None, summary: str) -> Reading:
        return Reading(state, composer_empty, None, one_line(summary), links)

    if ev.dead or shows_exit(lines):
        return reading("exited", None, "exited")
    menu = _menu(lines)
    if menu is not None:
        return Reading("menu", None, None, one_line(menu.question or "a menu is open"), links, menu)
    index = _composer(lines)
    if index is None:
        return reading("unknown", None, "")
    m = _PROMPT.match(lines[index])
    draft = (m.group(1) if m else "").strip()
    composer_empty = not draft or draft == PLACEHOLDER
    rule = max(i for i in range(max(0, index - _RULE_DISTANCE), index) if _is_rule(lines[i]))
    for line in lines[max(0, rule - 3) : rule]:
        if "(esc to cancel" in line:
            return reading("busy", composer_empty, "working: " + line.strip())
    replies = [line[1:].strip() for line in lines[:rule] if line.startswith("✦")]
    return reading("idle", composer_empty, replies[-1] if replies else "ready")
