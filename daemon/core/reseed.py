"""When the control session is re-seeded: read from its own transcript, never trusted to it.

Theory of operation
-------------------
Control keeps its charter by being restarted fresh (charter plus the current directory),
not by the harness's compaction. ``ReseedWatch`` reads the control session's transcript
records as they are appended and keeps two facts:

* the context size, what the next request would carry:

  - Claude Code's JSONL: an ``assistant`` record's ``usage``, the last turn's input tokens,
    cache reads and cache writes together;
  - Codex's rollout: an ``event_msg`` of type ``token_count``, whose ``info`` holds the last
    request's ``last_token_usage``; its ``total_tokens`` is what Codex itself counts against
    the model's context window (``model_context_window`` beside it);
  - Gemini CLI's chat file (0.59, 0.61): a ``gemini`` message's ``tokens``, whose ``input`` is
    the request's prompt tokens, cached ones included;

* drift: a tool call that edits files or runs commands means control started doing project
  work, which its charter forbids: Claude Code's ``tool_use`` blocks named ``Edit``,
  ``Write``, ``Bash``, ...; Codex's ``response_item`` calls of its own shell and patch tools
  (``shell``, ``exec_command``, ``apply_patch``, ...; an MCP tool's call carries its server's
  ``namespace`` and is never drift); a Gemini CLI message's ``toolCalls`` of its own shell,
  edit and write tools (``run_shell_command``, ``replace``, ``write_file``).

The file's order is not always the conversation's: when a turn ends within milliseconds of
the next (a request typed while control answers), Claude Code 2.1 has appended the second
turn's records before the first's. So the first and the latest context are the records'
``timestamp`` order (the file's order for records without one), and nothing is decided on size
while the transcript has a gap: a record naming a ``parentUuid`` not read yet means an earlier
record is still to come (its first request may be among them). Claude Code also writes parents
it never writes (phantoms, after a resume or a lost text block), so a gap still open when the
reader has read to the file's end twice (``read_to_end``, a look a second) no longer holds
decisions back: records out of order arrive within milliseconds.

``verdict(limit)`` is ``None`` while neither holds, else the reason to re-seed. A control
whose first request already passed the limit (a fleet whose directory alone is that large)
is not re-seeded for size: its fresh successor would start as large and be restarted again
and again; ``born_over`` says so, for the daemon to tell once. A watch is for
one control session; a re-seeded control gets a new one. Plain rules over values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

DRIFT_TOOLS = frozenset({"Edit", "MultiEdit", "Write", "NotebookEdit", "Bash", "BashOutput"})
CODEX_DRIFT_TOOLS = frozenset(
    {"shell", "shell_command", "exec_command", "write_stdin", "apply_patch", "local_shell"}
)
GEMINI_DRIFT_TOOLS = frozenset({"run_shell_command", "replace", "write_file"})
CLAUDE_CONTEXT = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
CODEX_CALLS = frozenset({"function_call", "custom_tool_call", "local_shell_call"})


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _stamp(record: Mapping[str, Any]) -> datetime | None:
    """A record's ``timestamp`` (ISO 8601; without a zone, UTC); None when absent or odd."""
    value = record.get("timestamp")
    if not isinstance(value, str):
        return None
    try:
        stamp = datetime.fromisoformat(value)
    except ValueError:
        return None
    return stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=UTC)


def _later(stamp: datetime | None, than: datetime | None) -> bool:
    """Whether a record stamped ``stamp`` comes after one stamped ``than`` (read earlier):
    by time when both have one, else in the file's order."""
    return stamp is None or than is None or stamp >= than


@dataclass
class ReseedWatch:
    context_tokens: int = 0  # the latest request's context
    first_context: int = 0  # the fresh session's first request: the charter and directory
    drifted: list[str] = field(default_factory=list)
    _latest_at: datetime | None = field(default=None, init=False, repr=False)
    _first_at: datetime | None = field(default=None, init=False, repr=False)
    _seen: set[str] = field(default_factory=set, init=False, repr=False)  # records' uuids
    _missing: set[str] = field(default_factory=set, init=False, repr=False)  # named, unread
    _at_last_end: set[str] = field(default_factory=set, init=False, repr=False)

    @property
    def complete(self) -> bool:
        """No record read names a parent not read yet: nothing earlier is still to come."""
        return not self._missing

    def read_to_end(self) -> None:
        """The reader has read all the file holds now: parents missing at the last end too
        were never written, and are given up."""
        self._missing -= self._at_last_end
        self._at_last_end = set(self._missing)

    def _context(self, total: int, stamp: datetime | None) -> None:
        if not total:
            return
        if _later(stamp, self._latest_at):
            self.context_tokens, self._latest_at = total, stamp
        if not self.first_context or not _later(stamp, self._first_at):
            self.first_context, self._first_at = total, stamp

    def _link(self, record: Mapping[str, Any]) -> None:
        uuid, parent = record.get("uuid"), record.get("parentUuid")
        if isinstance(uuid, str):
            self._seen.add(uuid)
            self._missing.discard(uuid)
        if isinstance(parent, str) and parent not in self._seen:
            self._missing.add(parent)

    def observe(self, record: Mapping[str, Any]) -> None:
        kind = record.get("type")
        if kind in ("event_msg", "response_item"):
            self._codex(record.get("payload"), _stamp(record))
            return
        if kind == "gemini":
            self._gemini(record)
            return
        self._link(record)
        if kind != "assistant":
            return
        message = record.get("message")
        if not isinstance(message, Mapping):
            return
        usage = message.get("usage")
        if isinstance(usage, Mapping):
            total = sum(_count(usage.get(key)) for key in CLAUDE_CONTEXT)
            self._context(total, _stamp(record))
        content = message.get("content")
        if isinstance(content, list):
            for block in content:
                if (
                    isinstance(block, Mapping)
                    and block.get("type") == "tool_use"
                    and block.get("name") in DRIFT_TOOLS
                ):
                    self.drifted.append(str(block["name"]))

    def _codex(self, payload: object, stamp: datetime | None) -> None:
        if not isinstance(payload, Mapping):
            return
        kind = payload.get("type")
        if kind == "token_count":
            info = payload.get("info")
            last = info.get("last_token_usage") if isinstance(info, Mapping) else None
            if isinstance(last, Mapping):
                total = _count(last.get("total_tokens")) or _count(last.get("input_tokens"))
                self._context(total, stamp)
        elif kind in CODEX_CALLS and not payload.get("namespace"):
            name = "local_shell" if kind == "local_shell_call" else payload.get("name")
            if name in CODEX_DRIFT_TOOLS:
                self.drifted.append(str(name))

    def _gemini(self, record: Mapping[str, Any]) -> None:
        tokens = record.get("tokens")
        if isinstance(tokens, Mapping):
            self._context(_count(tokens.get("input")), _stamp(record))
        calls = record.get("toolCalls")
        for call in calls if isinstance(calls, list) else ():
            if isinstance(call, Mapping) and call.get("name") in GEMINI_DRIFT_TOOLS:
                self.drifted.append(str(call["name"]))

    def verdict(self, limit: int) -> str | None:
        if self.drifted:
            return f"its charter drifted: it called {', '.join(sorted(set(self.drifted)))}"
        if self.complete and self.context_tokens > limit and not self.born_over(limit):
            return f"its context reached {self.context_tokens} tokens (limit {limit})"
        return None

    def born_over(self, limit: int) -> bool:
        """Its first request already passed the limit (the charter and the directory alone):
        a fresh control would be no smaller, so re-seeding for size would only repeat."""
        return self.complete and self.first_context > limit
