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
* idle: the composer and a footer without it; its summary is the last line of the last
  reply, the line above that turn's footer (``▣  Build · MODEL · 6.5s``), or ``ready`` before
  any turn;
* exited: tmux says dead or an exit marker ends the screen;
* anything else (dialogs, the empty screen it shows while starting): unknown.

The pane title is ``OpenCode`` until the session has a title, then ``OC | TITLE``.
"""

from __future__ import annotations

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

PLACEHOLDER = "Ask anything…"
_TITLE_PREFIX = "OC | "
_PERMISSION = "△ Permission required"
_CONFIRM = "enter confirm"
_TURN_FOOTER = "▣ "  # under each finished reply: agent, model, time


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


def _summary(lines: list[str]) -> str:
    """The last line of the last reply: the message line above the last turn footer."""
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].strip().startswith(_TURN_FOOTER):
            said = [
                line.strip()
                for line in lines[:i]
                if line.strip() and not line.lstrip().startswith(("┃", "╹", _TURN_FOOTER))
            ]
            return said[-1] if said else "ready"
    return "ready"


RULES = {
    "exited": EXITED,
    "menu-permission": Rule(
        f"'{_PERMISSION}' near the bottom with its '{_CONFIRM}' line",
        "answering it (Enter confirms; the other keys its line names), after which the "
        "composer returns",
    ),
    "unknown-no-composer": Rule(
        "no composer box (┃ lines closed by ╹▀ near the bottom) and no permission prompt: "
        "nothing this parser recognises",
        "the screen redrawn with the composer box",
    ),
    "busy-esc-interrupt": Rule(
        "'esc interrupt' in the line under the composer box",
        "the turn ending: the hint leaves the screen",
    ),
    "idle-composer": Rule(
        "the composer box with no 'esc interrupt' under it; it is empty when it shows only "
        f"the placeholder ({PLACEHOLDER}); the summary is the line above the last turn footer "
        f"({_TURN_FOOTER.strip()} Build · MODEL · TIME)",
        "a submitted prompt (busy), a permission prompt (menu), or text typed in (a draft)",
    ),
}


def parse(text: str, ev: Evidence) -> Reading:
    lines = screen_lines(text)
    reading = reader(_title(ev), pr_links(text))

    if ev.dead or shows_exit(lines):
        return reading("exited", None, "exited", "exited", lines[-1:])
    menu = _menu(lines)
    if menu is not None:
        shown = [line for line in lines[-16:] if _PERMISSION in line or _CONFIRM in line]
        return reading("menu", None, menu.question, "menu-permission", shown, menu=menu)
    bottom = next(
        (i for i in range(len(lines) - 1, -1, -1) if lines[i].lstrip().startswith("╹▀")), None
    )
    if bottom is None or bottom < 2:
        return reading("unknown", None, "", "unknown-no-composer", lines[-3:])
    box: list[str] = []
    for line in reversed(lines[:bottom]):
        if not line.lstrip().startswith("┃"):
            break
        box.insert(0, line.lstrip()[1:].strip())
    if len(box) < 2:
        return reading("unknown", None, "", "unknown-no-composer", lines[-3:])
    draft = [line for line in box[:-1] if line]
    composer_empty = not draft or draft[0].startswith(PLACEHOLDER)
    under = lines[bottom + 1 : bottom + 3]
    if "esc interrupt" in " ".join(under):
        return reading("busy", composer_empty, "working", "busy-esc-interrupt", under)
    summary = _summary(lines[: bottom - len(box)])
    return reading("idle", composer_empty, summary, "idle-composer", lines[bottom - 1 : bottom])
