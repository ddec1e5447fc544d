"""omp's (oh-my-pi) screen.

Theory of operation
-------------------
omp ends its screen with the composer: a status line (`` π > ⬢ MODEL > cwd ▶──…``) and under
it the input line, which starts ``╰─`` and holds the draft (``╰─ hello``; an empty composer is
``╰─`` alone). A draft of several lines (typed or pasted line breaks, or one long line wrapped)
goes on below it, each further line indented three columns (``   rest``). Nothing else is drawn
below the composer, so it is found from the end of the screen: the last ``╰─`` line with only
such continuation lines under it.

* menu: a box whose top border carries its question (``╭─ Allow tool: bash ──``) drawn at the
  bottom of the screen, with its options (``❯ Approve`` selected, ``Deny``) and the hint
  ``enter select  esc cancel``: Enter picks the selected option, Escape cancels (denies);
* busy: the status line starts with a spinner and the elapsed time (`` ⠋ 7s > …``) instead of
  ``π``, or a ``Working…`` line sits just above it;
* idle: the composer under a ``π`` status line;
* exited: tmux says dead or an exit marker ends the screen;
* anything else (the setup wizard, a selector, a screen without the composer): unknown.

The pane title is ``π > TITLE`` (``π ⠋ TITLE`` while working); it names the directory until the
session has a title.
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

_MESSAGE = re.compile(r"^ \S")  # a message line (right-aligned titles and boxes are not)
_TURN_FOOTER = " Wall time:"  # omp's own line after a turn that ran tools
_INPUT = re.compile(r"^╰─(?: (.*))?$")
_CONTINUATION = "   "  # a further line of a draft, under the input line
_STATUS_IDLE = re.compile(r"^ π > ")
_STATUS_BUSY = re.compile(r"^ [\u2800-\u28ff] \d+[smh]")
_BOX_TOP = re.compile(r"^╭─ (.+?) ─")
_BOX_OPTION = re.compile(r"^│  (❯| ) (\S.*?)\s*(?:│|\ufffd)?$")
_BOX_DETAIL = re.compile(r"^│ (\S.*?)\s*(?:│|\ufffd)?$")
_MENU_HINT = "enter select"
_DENY = frozenset({"Deny", "Reject", "No", "Cancel"})
_TITLE = re.compile(r"^π\s+(?:>|!|[\u2800-\u28ff])\s+(.+)$")


def _title(ev: Evidence) -> str | None:
    m = _TITLE.match(ev.pane_title.strip())
    return m.group(1).strip() if m else None


def _menu(lines: list[str]) -> Menu | None:
    """The selector box ending the screen, if its hint says Enter selects."""
    if not lines or not lines[-1].startswith("╰"):
        return None
    top = next((i for i in range(len(lines) - 1, -1, -1) if _BOX_TOP.match(lines[i])), None)
    if top is None or not any(_MENU_HINT in line for line in lines[top:]):
        return None
    m = _BOX_TOP.match(lines[top])
    question = m.group(1).strip() if m else ""
    details: list[str] = []
    options: list[MenuOption] = []
    for line in lines[top + 1 : -1]:
        option = _BOX_OPTION.match(line)
        if option:
            label = option.group(2)
            key = "Enter" if option.group(1) == "❯" else "Escape" if label in _DENY else ""
            if key:
                options.append(MenuOption(label, key))
            continue
        detail = _BOX_DETAIL.match(line)
        if detail and _MENU_HINT not in line and not options:
            details.append(detail.group(1))
    if details:
        question = f"{question} ({'; '.join(details)})"
    return Menu(question, tuple(options))


def _composer(lines: list[str]) -> int | None:
    """The index of the input line: the last ``╰─`` line with nothing under it but a draft's
    further lines (indented, or blank between them); None when the screen ends otherwise."""
    for i in range(len(lines) - 1, 0, -1):
        line = lines[i]
        if _INPUT.match(line):
            return i
        if line and not line.startswith(_CONTINUATION):
            return None
    return None


RULES = {
    "exited": EXITED,
    "menu-selector": Rule(
        f"a box ending the screen (╭─ QUESTION ─ … ╰) whose hint says '{_MENU_HINT}'",
        "picking an option (Enter the selected one, Escape the one that denies), after which "
        "the input line returns",
    ),
    "unknown-no-input": Rule(
        "the screen does not end with omp's input line (╰─, with a draft's indented further "
        "lines under it) and no selector box ends the screen",
        "the screen redrawn with the input line",
    ),
    "busy-status": Rule(
        "the status line above the input shows a spinner and elapsed time (⠹ 3s), or "
        "'Working…' just above it",
        "the turn ending: the status line shows the π > prompt again",
    ),
    "idle-status": Rule(
        "the input line under a status line starting ' π > '; the input is empty when nothing "
        "follows ╰─ and no further line of a draft is under it",
        "a submitted prompt (busy), a selector box (menu), or text typed in (a draft)",
    ),
    "unknown-status": Rule(
        "the input line, but the status line above it is neither the idle π > nor a spinner",
        "the status line redrawn",
    ),
}


def parse(text: str, ev: Evidence) -> Reading:
    lines = screen_lines(text)
    reading = reader(_title(ev), pr_links(text))

    if ev.dead or shows_exit(lines):
        return reading("exited", None, "exited", "exited", lines[-1:])
    if len(lines) < 2:
        return reading("unknown", None, "", "unknown-no-input", lines)
    menu = _menu(lines)
    if menu is not None:
        shown = [line for line in lines if _BOX_TOP.match(line)][-1:]
        return reading("menu", None, menu.question, "menu-selector", shown, menu=menu)
    at = _composer(lines)
    if at is None:
        return reading("unknown", None, "", "unknown-no-input", lines[-2:])
    m = _INPUT.match(lines[at])
    assert m is not None
    status = lines[at - 1]
    composer_empty = not (m.group(1) or "").strip() and not any(lines[at + 1 :])
    working = at > 1 and "Working…" in lines[at - 2]
    if _STATUS_BUSY.match(status) or working:
        return reading("busy", composer_empty, "working", "busy-status", lines[at - 2 : at])
    if _STATUS_IDLE.match(status):
        said = [
            line.strip()
            for line in lines[: at - 1]
            if _MESSAGE.match(line) and not line.startswith(_TURN_FOOTER)
        ]
        summary = said[-1] if said else "ready"
        return reading("idle", composer_empty, summary, "idle-status", lines[at - 1 : at + 1])
    return reading("unknown", None, "", "unknown-status", lines[at - 1 : at + 1])
