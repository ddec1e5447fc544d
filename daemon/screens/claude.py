"""Claude Code's screen.

Theory of operation
-------------------
Claude Code draws its composer as a box: a rule of ``─``, a line starting ``❯`` (followed by
a no-break space) holding the draft, another rule; the footer sits below the box. The parser
finds the last such box and reads:

* busy: ``esc to interrupt`` in the footer or on the spinner line just above the box (the
  ``✻ Crunched for 8s`` line after a finished turn has no such marker);
* menu: a slash-command list under a composer that starts with ``/``, or no composer and a
  dialog with a selected numbered option (``❯ 1. Yes``), such as the permission prompt; the
  dialog is also read as a ``Menu`` (question, the tool call it shows, numbered options, each
  picked by pressing its number);
* idle: the composer box with neither of the above;
* exited: tmux says the pane is dead, an exit marker ends the screen, or the start-up failure
  page ("Unable to connect to Anthropic services") is all there is;
* anything else: unknown.

The live status file, when present and proven to belong to this process, refines a screen the
parser recognized: a ``busy`` status makes an idle-looking screen busy (the turn started and
the screen has not caught up), a ``waiting`` status under an idle-looking screen is a conflict
and reads ``unknown``. It never turns an unrecognized screen into a state.
"""

from __future__ import annotations

import itertools
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

_RULE = re.compile(r"^\s*─{8,}\s*$")
_PROMPT = re.compile(r"^❯[\u00a0 ]?(.*)$")
_OPTION_SELECTED = re.compile(r"^\s*❯\s*\d+\.\s+\S")
_SLASH_ITEM = re.compile(r"^/[\w:-]+(?:\s{2,}\S.*)?$")
_SPINNER = re.compile(r"^[^\w\s❯●⎿│]\s+(\S.*….*)$")
_PLACEHOLDER = re.compile(r'^Try "[^"]*"$')
_OFFLINE = "Unable to connect to Anthropic services"


def _composer(lines: list[str]) -> tuple[int, int] | None:
    """(top rule, bottom rule) of the last composer box on screen."""
    rules = [i for i, line in enumerate(lines) if _RULE.match(line)]
    for top, bottom in reversed(list(itertools.pairwise(rules))):
        if (
            bottom - top >= 2
            and _PROMPT.match(lines[top + 1])
            and not _OPTION_SELECTED.match(lines[top + 1])
        ):
            return top, bottom
    return None


def _last_reply(lines: list[str]) -> str:
    for line in reversed(lines):
        if line.startswith("● "):
            return line[2:]
    for line in reversed(lines):
        m = _PROMPT.match(line)
        if m and m.group(1).strip():
            return "asked: " + m.group(1).strip()
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
        offline = next((line.strip() for line in lines if _OFFLINE in line), "")
        return reading("exited", None, offline or "exited")

    box = _composer(lines)
    if box is None:
        question = next(
            (line.strip() for line in reversed(lines) if line.strip().endswith("?")), ""
        )
        if any(_OPTION_SELECTED.match(line) for line in lines[-15:]):
            state: State = "menu"
            if ev.claude_status is not None and ev.claude_status.status == "busy":
                state = "unknown"
            menu = numbered_menu(lines, _OPTION_SELECTED) if state == "menu" else None
            return reading(state, None, question or "a menu is open", menu)
        if any(_OFFLINE in line for line in lines):
            return reading("exited", None, _OFFLINE)
        return reading("unknown", None, "")

    top, bottom = box
    draft_lines = [lines[top + 1], *lines[top + 2 : bottom]]
    m = _PROMPT.match(draft_lines[0])
    draft = (
        " ".join([m.group(1) if m else ""] + [d.strip() for d in draft_lines[1:]])
        .replace("\u00a0", " ")
        .strip()
    )
    composer_empty = not draft or bool(_PLACEHOLDER.match(draft))
    footer = [line.strip() for line in lines[bottom + 1 :] if line.strip()]
    near = nonblank_above(lines, top, 2)

    if draft.startswith("/") and footer and _SLASH_ITEM.match(footer[0]):
        return reading("menu", False, "slash command menu")

    busy_marker = any("esc to interrupt" in line.lower() for line in footer[:3] + near)
    spinner = next((sm.group(1) for line in near if (sm := _SPINNER.match(line))), "")
    status = ev.claude_status.status if ev.claude_status is not None else None
    if busy_marker:
        return reading("busy", composer_empty, "working: " + (spinner or "…"))
    if status == "busy":
        return reading("busy", composer_empty, "working (status file)")
    if status == "waiting":
        return reading(
            "unknown", composer_empty, "status file says waiting; screen shows the composer"
        )
    summary = _last_reply(lines[:top]) or "ready"
    return reading("idle", composer_empty, summary)
