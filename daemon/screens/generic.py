"""Shells and harnesses without a dedicated parser.

A shell pane is ``shell`` (whether its prompt holds a typed command is not knowable from the
text alone, so ``composer_empty`` is unknown); a harness we do not parse yet is ``unknown``.
Both are ``exited`` when tmux says the pane is dead or an exit marker ends the screen.
"""

from __future__ import annotations

from openbus.daemon.screens.base import (
    EXITED,
    Evidence,
    Reading,
    Rule,
    State,
    clean_title,
    is_exit_line,
    last_line,
    one_line,
    pr_links,
)

RULES = {
    "exited": EXITED,
    "shell": Rule(
        "the pane runs a shell (its process tree), whose screen says nothing more to rely on",
        "a harness started in the pane (found in its process tree)",
    ),
    "unknown-harness": Rule(
        "the pane runs a program without a screen parser",
        "a harness this daemon parses, or a parser for this one",
    ),
}


def _generic(text: str, ev: Evidence, state: State, rule: str) -> Reading:
    last = last_line(text)
    if ev.dead or is_exit_line(last):
        state, rule = "exited", "exited"
    return Reading(
        state, None, clean_title(ev), one_line(last), pr_links(text), rule=rule, lines=(last,)
    )


def parse_shell(text: str, ev: Evidence) -> Reading:
    return _generic(text, ev, "shell", "shell")


def parse_unknown(text: str, ev: Evidence) -> Reading:
    return _generic(text, ev, "unknown", "unknown-harness")
