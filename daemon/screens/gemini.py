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
    EXITED,
    Evidence,
    Menu,
    MenuOption,
    Reading,
    Rule,
    pr_links,
    reader,
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


RULES = {
    "exited": EXITED,
    "menu-box": Rule(
        "a box ending the screen with numbered options (● 1. Allow once …) under its question",
        "answering it (the digit of an option, or Esc), after which the composer returns",
    ),
    "unknown-no-composer": Rule(
        "no composer (a ' > ' line with a ─ rule just above it near the bottom) and no option "
        "box: a dialog or screen this parser does not recognise",
        "the screen redrawn with the composer",
    ),
    "busy-esc-to-cancel": Rule(
        "'(esc to cancel' on a line just above the composer's rule (⠹ Thinking... (esc to "
        "cancel, 6s))",
        "the turn ending: that line leaves the screen",
    ),
    "idle-composer": Rule(
        "the composer with no busy line above its rule; it is empty when it holds only the "
        f"placeholder ({PLACEHOLDER})",
        "a submitted prompt (busy), a confirmation box (menu), or text typed in (a draft)",
    ),
}


def parse(text: str, ev: Evidence) -> Reading:
    lines = screen_lines(text)
    reading = reader(None, pr_links(text))

    if ev.dead or shows_exit(lines):
        return reading("exited", None, "exited", "exited", lines[-1:])
    menu = _menu(lines)
    if menu is not None:
        shown = lines[-len(menu.options) - 2 :]
        return reading(
            "menu", None, menu.question or "a menu is open", "menu-box", shown, menu=menu
        )
    index = _composer(lines)
    if index is None:
        return reading("unknown", None, "", "unknown-no-composer", lines[-3:])
    m = _PROMPT.match(lines[index])
    draft = (m.group(1) if m else "").strip()
    composer_empty = not draft or draft == PLACEHOLDER
    rule = max(i for i in range(max(0, index - _RULE_DISTANCE), index) if _is_rule(lines[i]))
    for line in lines[max(0, rule - 3) : rule]:
        if "(esc to cancel" in line:
            return reading(
                "busy", composer_empty, "working: " + line.strip(), "busy-esc-to-cancel", [line]
            )
    replies = [line[1:].strip() for line in lines[:rule] if line.startswith("✦")]
    summary = replies[-1] if replies else "ready"
    return reading("idle", composer_empty, summary, "idle-composer", [lines[index]])
