"""OpenCode's screen.

Theory of operation
-------------------
OpenCode draws its composer as a box of lines starting ``┃`` closed by a ``╹▀▀▀`` line; inside
it, after a blank ``┃`` line, the draft (or the placeholder ``Ask anything…``), and as its last
line the agent and model (``Build · Stub Model Stub``). The line under the box is the footer:
while a turn runs it starts with a progress bar and ``esc interrupt``. Messages in the history
are drawn with ``┃`` too, so the composer is the ``┃`` block right above the last ``╹▀`` line.

* menu: ``△ Permission required`` in the last ``┃`` block, with its options on one line
  (``Allow once   Allow always   Reject``) and ``enter confirm``: Enter picks the first (the
  selected one; the others are reached with the arrow keys, so no single key is given for them);
* busy: ``esc interrupt`` in the footer under the composer;
* idle: the composer and a footer without it;
* exited: tmux says dead or an exit marker ends the screen;
* anything else (dialogs, the empty screen it shows while starting): unknown.

The pane title is ``OpenCode`` until the session has a title, then ``OC | TITLE``.
"""

from __future__ import annotations

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

PLACEHOLDER = "Ask anything…"
_TITLE_PREFIX = "OC | "
_PERMISSION = "△ Permission required"
_CONFIRM = "enter confirm"


def _menu(lines: list[str]) -> Menu | None:
    tail = [line.lstrip().removeprefix("┃").strip() for line in lines[-16:]]
    start = next((i for i in range(len(tail) - 1, -1, -1) if tail[i] == _PERMISSION), None)
    if start is None:
        return None
    confirm = next((t for t in tail[start:] if _CONFIRM in t), None)
    if confirm is None:
        return None
    details = [t for t in tail[start + 1 :] if t and t != confirm]
    question = "Permission required" + (f" ({'; '.join(details[:2])})" if details else "")
    labels = [w.strip() for w in confirm.split("   ") if w.strip()]
    first = labels[0] if labels else ""
    return Menu(question, (MenuOption(first, "Enter"),) if first else ())


def _title(ev: Evidence) -> str | None:
    title = ev.pane_title.strip()
    return title[len(_TITLE_PREFIX) :].strip() or None if title.startswith(_TITLE_PREFIX) else None


def parse(text: str, ev: Evidence) -> Reading:
    lines = screen_lines(text)
    links = pr_links(text)
    title = _title(ev)

    def reading(state: State, composer_empty: bool | None, summary: str) -> Reading:
        return Reading(state, composer_empty, title, one_line(summary), links)

    if ev.dead or shows_exit(lines):
        return reading("exited", None, "exited")
    menu = _menu(lines)
    if menu is not None:
        return Reading("menu", None, title, one_line(menu.question), links, menu)
    bottom = next(
        (i for i in range(len(lines) - 1, -1, -1) if lines[i].lstrip().startswith("╹▀")), None
    )
    if bottom is None or bottom < 2:
        return reading("unknown", None, "")
    box: list[str] = []
    for line in reversed(lines[:bottom]):
        if not line.lstrip().startswith("┃"):
            break
        box.insert(0, line.lstrip()[1:].strip())
    if len(box) < 2:
        return reading("unknown", None, "")
    draft = [line for line in box[:-1] if line]
    composer_empty = not draft or draft[0].startswith(PLACEHOLDER)
    footer = " ".join(lines[bottom + 1 : bottom + 3])
    if "esc interrupt" in footer:
        return reading("busy", composer_empty, "working")
    return reading("idle", composer_empty, "ready")
