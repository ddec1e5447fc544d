"""Shells and harnesses without a dedicated parser.

A shell pane is ``shell`` (whether its prompt holds a typed command is not knowable from the
text alone, so ``composer_empty`` is unknown); a harness we do not parse yet is ``unknown``.
Both are ``exited`` when tmux says the pane is dead or an exit marker ends the screen.
"""

from __future__ import annotations

from openbus.daemon.screens.base import (
    Evidence,
    Reading,
    State,
    clean_title,
    last_nonblank,
    one_line,
    pr_links,
    screen_lines,
    shows_exit,
)


def parse_shell(text: str, ev: Evidence) -> Reading:
    lines = screen_lines(text)
    state: State = "exited" if ev.dead or shows_exit(lines) else "shell"
    return Reading(state, None, clean_title(ev), one_line(last_nonblank(lines)), pr_links(text))


def parse_unknown(text: str, ev: Evidence) -> Reading:
    lines = screen_lines(text)
    state: State = "exited" if ev.dead or shows_exit(lines) else "unknown"
    return Reading(state, None, clean_title(ev), one_line(last_nonblank(lines)), pr_links(text))
