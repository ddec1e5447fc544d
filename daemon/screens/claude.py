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
the screen has not caught up) until that screen has stood still for ``STILL_SCREEN_SECONDS``
(a working Claude redraws its spinner: a still idle composer is idle, whatever a lagging or
left-behind status says), and never when the status was set before the screen last changed
(the file says when: the turn ended, and its idle status is written a moment after); a
``waiting`` status under an idle-looking screen is a conflict and reads ``unknown``. It never
turns an unrecognized screen into a state, with one exception that is still read from the
screen: a frame Claude Code left half redrawn (seen in a 15-row
pane after a permission was approved: the box's top rule overwritten, the busy footer of the
turn left above the prompt) that ends with the prompt line, the bottom rule and the idle
footer (``? for shortcuts``) reads ``idle`` once the status file says idle and the screen has
stood still ``STILL_SCREEN_SECONDS``; Claude redraws it only on its next output.
"""

from __future__ import annotations

import itertools
import re

from openbus.daemon.screens.base import (
    EXITED,
    STILL_SCREEN_SECONDS,
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

# a rule of the box; a draft taller than the box shows how much is above (``─── ↑ 2 more ───``)
_RULE = re.compile(r"^\s*(?:─+ ↑ \d+ more )?─{8,}\s*$")
_SCROLLED = re.compile(r"^\s*─+ ↑ \d+ more ─")
_PROMPT = re.compile(r"^❯[\u00a0 ]?(.*)$")
_OPTION_SELECTED = re.compile(r"^\s*❯\s*\d+\.\s+\S")
_SLASH_ITEM = re.compile(r"^/[\w:-]+(?:\s{2,}\S.*)?$")
_SPINNER = re.compile(r"^[^\w\s❯●⎿│]\s+(\S.*….*)$")
_PLACEHOLDER = re.compile(r'^Try "[^"]*"$')
_OFFLINE = "Unable to connect to Anthropic services"
_IDLE_FOOTER = "? for shortcuts"
# the rule reading busy on the status file alone, under a screen that looks idle
BUSY_ON_STATUS_FILE = "busy-status-file"


def _composer(lines: list[str]) -> tuple[int, int] | None:
    """(top rule, bottom rule) of the last composer box on screen."""
    rules = [i for i, line in enumerate(lines) if _RULE.match(line)]
    for top, bottom in reversed(list(itertools.pairwise(rules))):
        if bottom - top >= 2 and (
            _SCROLLED.match(lines[top])  # the draft's first lines (and ❯) scrolled out of the box
            or (_PROMPT.match(lines[top + 1]) and not _OPTION_SELECTED.match(lines[top + 1]))
        ):
            return top, bottom
    return None


def _prompt_over_footer(lines: list[str]) -> int | None:
    """The index of a prompt line (``❯ …``) right above the last rule, with Claude's idle
    footer (``? for shortcuts``, no ``esc to interrupt``) the first line under that rule: the
    bottom of the composer box, its top rule lost."""
    rules = [i for i, line in enumerate(lines) if _RULE.match(line)]
    if not rules or rules[-1] < 1:
        return None
    bottom = rules[-1]
    footer = next((line for line in lines[bottom + 1 :] if line.strip()), "")
    prompt = lines[bottom - 1]
    if (
        _IDLE_FOOTER not in footer
        or "esc to interrupt" in footer.lower()
        or not _PROMPT.match(prompt)
        or _OPTION_SELECTED.match(prompt)
    ):
        return None
    return bottom - 1


def _last_reply(lines: list[str]) -> str:
    for line in reversed(lines):
        if line.startswith("● "):
            return line[2:]
    for line in reversed(lines):
        m = _PROMPT.match(line)
        if m and m.group(1).strip():
            return "asked: " + m.group(1).strip()
    return ""


RULES = {
    "exited": EXITED,
    "menu-dialog": Rule(
        "no composer box, and a dialog with a selected numbered option (❯ 1. …)",
        "answering the dialog (its keys), after which the composer box returns",
    ),
    "unknown-dialog-while-busy": Rule(
        "a dialog with a selected option, but the status file says busy: the two disagree",
        "the status file saying waiting (a menu) or the dialog closing",
    ),
    "exited-offline": Rule(
        "the start-up failure page (Unable to connect to Anthropic services)",
        "starting Claude Code again where it can reach its API",
    ),
    "idle-half-redrawn": Rule(
        "no whole composer box, but the screen ends with the prompt line (❯), the box's bottom "
        f"rule and the idle footer ({_IDLE_FOOTER}); the status file says idle and the screen "
        f"stood still {STILL_SCREEN_SECONDS:g} s (a frame Claude left half redrawn)",
        "Claude's next output redrawing the frame, a busy or waiting status file, or the "
        "screen changing",
    ),
    "unknown-no-composer": Rule(
        "no composer box and no dialog on screen: nothing this parser recognises",
        "the screen redrawn with the composer box (Claude redraws on its next output)",
    ),
    "menu-slash": Rule(
        "the composer starts with / and the slash-command list shows next to it",
        "picking a command (Enter) or leaving the list (Esc)",
    ),
    "busy-marker": Rule(
        "'esc to interrupt' on the spinner line above the box or in the footer",
        "the turn ending: the marker leaves the screen",
    ),
    BUSY_ON_STATUS_FILE: Rule(
        "the composer box with no busy marker, but Claude's status file says busy and the "
        f"screen changed within {STILL_SCREEN_SECONDS:g} s (the screen has not caught up)",
        f"the status file saying idle, or the screen standing still {STILL_SCREEN_SECONDS:g} s",
    ),
    "unknown-status-waiting": Rule(
        "the composer box, but the status file says waiting (for a permission): they disagree",
        "the status file saying idle or busy, or the dialog showing",
    ),
    "idle-composer": Rule(
        "the composer box with no busy marker (and no busy status file, or one the still "
        "screen outweighs); the composer is empty when nothing but a placeholder follows ❯",
        "a submitted prompt (busy), a dialog (menu), or text typed into the composer (a draft)",
    ),
}


def parse(text: str, ev: Evidence) -> Reading:
    lines = screen_lines(text)
    title = clean_title(ev)
    links = pr_links(text)

    reading = reader(title, links)

    if ev.dead or shows_exit(lines):
        offline = next((line.strip() for line in lines if _OFFLINE in line), "")
        return reading("exited", None, offline or "exited", "exited", lines[-1:])

    box = _composer(lines)
    if box is None:
        question = next(
            (line.strip() for line in reversed(lines) if line.strip().endswith("?")), ""
        )
        options = [line.strip() for line in lines[-15:] if _OPTION_SELECTED.match(line)]
        if options:
            if ev.claude_status is not None and ev.claude_status.status == "busy":
                return reading(
                    "unknown", None, question, "unknown-dialog-while-busy", [question, *options]
                )
            return reading(
                "menu",
                None,
                question or "a menu is open",
                "menu-dialog",
                [question, *options],
                menu=numbered_menu(lines, _OPTION_SELECTED),
            )
        if any(_OFFLINE in line for line in lines):
            return reading("exited", None, _OFFLINE, "exited-offline", [_OFFLINE])
        prompt = _prompt_over_footer(lines)
        still = ev.screen_still is not None and ev.screen_still >= STILL_SCREEN_SECONDS
        status = ev.claude_status.status if ev.claude_status is not None else None
        if prompt is not None and status == "idle" and still:
            m = _PROMPT.match(lines[prompt])
            draft = (m.group(1) if m else "").replace("\u00a0", " ").strip()
            empty = not draft or bool(_PLACEHOLDER.match(draft))
            summary = _last_reply(lines[:prompt]) or "ready"
            shown = lines[prompt : prompt + 3]
            return reading("idle", empty, summary, "idle-half-redrawn", shown)
        return reading("unknown", None, "", "unknown-no-composer", lines[-3:])

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

    # the slash-command list: below the box (2.1.197), or above it (2.1.332)
    box_lines = lines[top + 1 : bottom]
    if draft.startswith("/") and (
        (footer and _SLASH_ITEM.match(footer[0])) or (near and _SLASH_ITEM.match(near[0]))
    ):
        return reading("menu", False, "slash command menu", "menu-slash", box_lines)

    marked = [line for line in footer[:3] + near if "esc to interrupt" in line.lower()]
    spinner = next((sm.group(1) for line in near if (sm := _SPINNER.match(line))), "")
    status = ev.claude_status.status if ev.claude_status is not None else None
    if marked:
        return reading(
            "busy", composer_empty, "working: " + (spinner or "…"), "busy-marker", marked
        )
    still = ev.screen_still is not None and ev.screen_still >= STILL_SCREEN_SECONDS
    since = ev.claude_status.since if ev.claude_status is not None else None
    # a busy status older than the idle-looking screen: the turn ended after it was set
    behind = since is not None and ev.screen_changed is not None and since < ev.screen_changed
    if status == "busy" and not still and not behind:
        return reading(
            "busy", composer_empty, "working (status file)", BUSY_ON_STATUS_FILE, box_lines
        )
    if status == "waiting":
        return reading(
            "unknown",
            composer_empty,
            "status file says waiting; screen shows the composer",
            "unknown-status-waiting",
            box_lines,
        )
    summary = _last_reply(lines[:top]) or "ready"
    return reading("idle", composer_empty, summary, "idle-composer", [*box_lines, *footer[:1]])
