"""Control's MCP tools: ``wait_for_changes`` (scope read) and the act tools (scope ``act``,
listed to the control session only: an ordinary agent never sees them, and calling one is
refused by the gate)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from openbus.daemon.control.feed import MAX_WAIT_SECONDS
from openbus.daemon.mcp.tools import McpTool, ToolContext
from openbus.kernel.errors import BadRequest

SOURCE = "openbus control"


def _only(*names: str) -> Any:
    def params(args: Mapping[str, Any], ctx: ToolContext) -> Mapping[str, Any]:
        unknown = sorted(set(args) - set(names))
        if unknown:
            raise BadRequest(f"unknown argument {unknown[0]}", field=unknown[0])
        return {k: args.get(k) for k in names if k in args}

    return params


def _schema(required: tuple[str, ...], **props: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {k: dict(v) for k, v in props.items()},
        "required": list(required),
        "additionalProperties": False,
    }


_TEXT = {"type": "string"}

WAIT_FOR_CHANGES = McpTool(
    name="wait_for_changes",
    action="directory.wait",
    title="Wait for the fleet to change",
    description=(
        "Block until the fleet changes after revision `since` (pass the revision the last "
        "answer gave; omit it to start from now), at most timeout_seconds (0 to "
        f"{int(MAX_WAIT_SECONDS)}). Changes: panes added and gone, state and title "
        "transitions, the tmux server, and (for control) requests waiting for it. While "
        "nothing changes it costs nothing: call it again between tasks instead of polling. "
        "resync: true means read list_panes again."
    ),
    source=SOURCE,
    input_schema=_schema(
        (),
        since={"type": "integer", "minimum": 0},
        timeout_seconds={"type": "number", "minimum": 0, "maximum": MAX_WAIT_SECONDS},
    ),
    params=_only("since", "timeout_seconds"),
)

REPLY = McpTool(
    name="reply",
    action="control.reply",
    title="Answer a request in its thread",
    description=(
        "Answer a front-end request (or ask its requester a clarifying question) in the "
        "requester's thread. thread is the request id (like r12)."
    ),
    source=SOURCE,
    input_schema=_schema(("thread", "text"), thread=_TEXT, text=_TEXT),
    params=_only("thread", "text"),
    read_only=False,
)

HAND_OFF = McpTool(
    name="hand_off",
    action="control.hand_off",
    title="Hand a request to a project pane",
    description=(
        "Send a self-contained brief for request `thread` to one agent pane. Give exactly one "
        "of `to` and `open`. `to`: a pane that runs, as a pane id (with `incarnation` from "
        "list_panes) or a workstream handle naming exactly one pane. `open`: a new window "
        "for it instead, {launcher (a configured one), cwd?, title?}; it opens as open_window "
        'opens one (a card the human approves, or at once once they allowed "control may '
        'open panes"), and the brief is sent when its agent is first idle, with an input '
        "entry in the thread naming the new pane; if the human declines, nothing is sent and "
        "the thread says so. Do not call open_window first and then look for the pane. The "
        "brief arrives under a stamp naming control and the request (its origin link). "
        "Project work always goes to a project pane, never done by control."
    ),
    source=SOURCE,
    input_schema=_schema(
        ("thread", "brief"),
        thread=_TEXT,
        to=_TEXT,
        incarnation=_TEXT,
        open={
            "type": "object",
            "properties": {"launcher": _TEXT, "cwd": _TEXT, "title": _TEXT},
            "required": ["launcher"],
            "additionalProperties": False,
        },
        brief=_TEXT,
    ),
    params=_only("thread", "to", "incarnation", "open", "brief"),
    read_only=False,
)

PRESS_KEY = McpTool(
    name="press_key",
    action="control.press_key",
    title="Press a key in a pane",
    description=(
        "Press one key (tmux name: 1, y, Enter, Escape, Up, Down) in a pane, given the "
        "incarnation and screen revision you read (read_pane). A key answering another "
        "agent's menu (a permission prompt) or sent to a shell pane is a card for the human: "
        "nothing is typed until they approve."
    ),
    source=SOURCE,
    input_schema=_schema(
        ("pane", "incarnation", "revision", "key"),
        pane=_TEXT,
        incarnation=_TEXT,
        revision={"type": "integer", "minimum": 0},
        key=_TEXT,
        thread=_TEXT,
    ),
    params=_only("pane", "incarnation", "revision", "key", "thread"),
    read_only=False,
)

OPEN_WINDOW = McpTool(
    name="open_window",
    action="control.open_window",
    title="Open a window running a configured launcher",
    description=(
        "Ask to open a new tmux window running one of the configured launchers (never an "
        "arbitrary command), optionally in cwd and for a title. The human approves it on a "
        'card, then the window opens; once they allowed "control may open panes" it opens '
        "at once."
    ),
    source=SOURCE,
    input_schema=_schema(("launcher",), launcher=_TEXT, cwd=_TEXT, title=_TEXT),
    params=_only("launcher", "cwd", "title"),
    read_only=False,
)

RESUME_SESSION = McpTool(
    name="resume_session",
    action="control.resume_session",
    title="Resume a past session in a new window",
    description=(
        "Ask to resume a past session (harness and session_id, from search_history) in a new "
        "tmux window, with its old grant. The human approves it on a card, then it opens; "
        'once they allowed "control may open panes" it opens at once.'
    ),
    source=SOURCE,
    input_schema=_schema(("harness", "session_id"), harness=_TEXT, session_id=_TEXT),
    params=_only("harness", "session_id"),
    read_only=False,
)

CONTROL_TOOLS = (WAIT_FOR_CHANGES, REPLY, HAND_OFF, PRESS_KEY, OPEN_WINDOW, RESUME_SESSION)
