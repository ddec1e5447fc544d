"""omp's (oh-my-pi) screen.

Theory of operation
-------------------
omp ends its screen with the composer: a status line (`` π > ⬢ MODEL > cwd ▶──…``) and under
it the input line, which starts ``╰─`` and holds the draft (``╰─ hello``; an empty composer is
``╰─`` alone). Nothing is drawn below the input line, so the composer is found only as the last
non-blank line.

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

_MESSAGE = re.compile(r"^ \S")  # a message line (right-aligned titles and boxes are not)
_TURN_FOOTER = " Wall time:"  # omp's own line after a turn that ran tools
_INPUT = re.compile(r"^╰─(?: (.*))?$")
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


def parse(text: str, ev: Evidence) -> Reading:
    lines = screen_lines(text)
    links = pr_links(text)
    title = _title(ev)

    def reading(state: State, composer_empty: bool | None, summary: str) -> Reading:
        return Reading(state, composer_empty, title, one_line(summary), links)

    if ev.dead or shows_exit(lines):
        return reading("exited", None, "exited")
    if len(lines) < 2:
        return reading("unknown", None, "")
    menu = _menu(lines)
    if menu is not None:
        return Reading("menu", None, title, one_line(menu.question), links, menu)
    m = _INPUT.match(lines[-1])
    status = lines[-2]
    if m is None:
        return reading("unknown", None, "")
    composer_empty = not (m.group(1) or "").strip()
    working = len(lines) > 2 and "Working…" in lines[-3]
    if _STATUS_BUSY.match(status) or working:
        return reading("busy", composer_empty, "working")
    if _STATUS_IDLE.match(status):
        said = [
            line.strip()
            for line in lines[:-2]
            if _MESSAGE.match(line) and not line.startswith(_TURN_FOOTER)
        ]
        return reading("idle", composer_empty, said[-1] if said else "ready")
    return reading("unknown", None, "")
