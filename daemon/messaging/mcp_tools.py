"""The messaging MCP tools: ``send_message`` and ``message_status`` (scope ``message``).

Both are declarations over gate actions (``message.send``, ``message.status``); the gate
checks scope and audits, the messaging service decides. A message is queued, never typed on
the call: the answer is ``queued`` (the only interim outcome) or a refusal, and
``message_status`` gives the final outcome, waiting at most 50 s per call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from openbus.daemon.mcp.tools import McpTool, ToolContext
from openbus.daemon.messaging.service import MAX_WAIT_SECONDS
from openbus.kernel.errors import BadRequest

SOURCE = "openbus messaging"


def _send_params(args: Mapping[str, Any], ctx: ToolContext) -> Mapping[str, Any]:
    unknown = sorted(set(args) - {"target", "text", "message_id", "incarnation"})
    if unknown:
        raise BadRequest(f"unknown argument {unknown[0]}", field=unknown[0])
    return {k: args.get(k) for k in ("target", "text", "message_id", "incarnation")}


def _status_params(args: Mapping[str, Any], ctx: ToolContext) -> Mapping[str, Any]:
    unknown = sorted(set(args) - {"message_id", "wait_seconds"})
    if unknown:
        raise BadRequest(f"unknown argument {unknown[0]}", field=unknown[0])
    return {"message_id": args.get("message_id"), "wait_seconds": args.get("wait_seconds", 0)}


SEND_MESSAGE = McpTool(
    name="send_message",
    action="message.send",
    title="Send a message to another agent",
    description=(
        "Send a plain-text message to a sibling agent the human set to Collaborate. target is "
        "a pane id like %12 (then incarnation, from list_panes, is required) or a workstream "
        "handle that names exactly one live pane: a PR (owner/repo#12 or its URL), a pane "
        "title, or control. message_id is yours to choose (letters, digits, . _ : -); it is "
        "used at most once an hour, so a retry with the same id is never typed twice. Text is "
        "printable characters and newlines only. The message waits until the recipient is "
        "idle with an empty composer, then arrives as a prompt under a line naming you. The "
        "first message of a new pair needs the human's consent. The answer is 'queued' or a "
        "refusal; ask message_status for the final outcome (delivered, declined, refused, "
        "cancelled, expired or unconfirmed). Send only when the user asked you to."
    ),
    source=SOURCE,
    input_schema={
        "type": "object",
        "properties": {
            "target": {"type": "string", "description": "pane id like %12, or a handle"},
            "text": {"type": "string", "description": "the message: printable text and newlines"},
            "message_id": {"type": "string", "description": "your id for this message"},
            "incarnation": {
                "type": "string",
                "description": "required with a pane id: the incarnation list_panes reported",
            },
        },
        "required": ["target", "text", "message_id"],
        "additionalProperties": False,
    },
    params=_send_params,
    read_only=False,
)

MESSAGE_STATUS = McpTool(
    name="message_status",
    action="message.status",
    title="The outcome of a message you sent",
    description=(
        "The outcome of a message you sent, by your message_id: queued (the only interim "
        "answer) or final (delivered, declined, refused, cancelled, expired, unconfirmed). "
        f"wait_seconds (0 to {int(MAX_WAIT_SECONDS)}) waits for the final outcome; ask once, do "
        "not poll. An id the daemon does not know is unconfirmed."
    ),
    source=SOURCE,
    input_schema={
        "type": "object",
        "properties": {
            "message_id": {"type": "string"},
            "wait_seconds": {"type": "number", "minimum": 0, "maximum": MAX_WAIT_SECONDS},
        },
        "required": ["message_id"],
        "additionalProperties": False,
    },
    params=_status_params,
    read_only=True,
)


MESSAGING_TOOLS = (SEND_MESSAGE, MESSAGE_STATUS)
