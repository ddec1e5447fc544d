"""omp's (oh-my-pi) screen.

Theory of operation
-------------------
omp ends its screen with the composer: a status line (`` π > ⬢ MODEL > cwd ▶──…``) and under
it the input line, which starts ``╰─`` and holds the draft (``╰─ hello``; an empty composer is
``╰─`` alone). Nothing is drawn below the input line, so the composer is found only as the last
non-blank line.

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
    Reading,
    State,
    one_line,
    pr_links,
    screen_lines,
    shows_exit,
)

_INPUT = re.compile(r"^╰─(?: (.*))?$")
_STATUS_IDLE = re.compile(r"^ π > ")
_STATUS_BUSY = re.compile(r"^ [\u2800-\u28ff] \d+[smh]")
_TITLE = re.compile(r"^π\s+(?:>|[\u2800-\u28ff])\s+(.+)$")


def _title(ev: Evidence) -> str | None:
    m = _TITLE.match(ev.pane_title.strip())
    return m.group(1).strip() if m else None


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
    m = _INPUT.match(lines[-1])
    status = lines[-2]
    if m is None:
        return reading("unknown", None, "")
    composer_empty = not (m.group(1) or "").strip()
    working = len(lines) > 2 and "Working…" in lines[-3]
    if _STATUS_BUSY.match(status) or working:
        return reading("busy", composer_empty, "working")
    if _STATUS_IDLE.match(status):
        return reading("idle", composer_empty, "ready")
    return reading("unknown", None, "")
