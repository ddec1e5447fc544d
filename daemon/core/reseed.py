"""When the control session is re-seeded: read from its own transcript, never trusted to it.

Theory of operation
-------------------
Control keeps its charter by being restarted fresh (charter plus the current directory),
not by the harness's compaction. ``ReseedWatch`` reads the control session's transcript
records as they are appended (Claude Code's JSONL: ``assistant`` records carry the model's
``usage`` and the ``tool_use`` blocks it called) and keeps two facts:

* the context size: the last turn's input tokens, cache reads and cache writes together,
  which is what the next request would carry;
* drift: a tool call that edits files or runs commands (``Edit``, ``Write``, ``Bash``, ...)
  means control started doing project work, which its charter forbids.

``verdict(limit)`` is ``None`` while neither holds, else the reason to re-seed. A watch is for
one control session; a re-seeded control gets a new one. Plain rules over values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

DRIFT_TOOLS = frozenset({"Edit", "MultiEdit", "Write", "NotebookEdit", "Bash", "BashOutput"})


@dataclass
class ReseedWatch:
    context_tokens: int = 0
    drifted: list[str] = field(default_factory=list)

    def observe(self, record: Mapping[str, Any]) -> None:
        if record.get("type") != "assistant":
            return
        message = record.get("message")
        if not isinstance(message, Mapping):
            return
        usage = message.get("usage")
        if isinstance(usage, Mapping):
            total = 0
            for key in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
                value = usage.get(key)
                if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                    total += value
            if total:
                self.context_tokens = total
        content = message.get("content")
        if isinstance(content, list):
            for block in content:
                if (
                    isinstance(block, Mapping)
                    and block.get("type") == "tool_use"
                    and block.get("name") in DRIFT_TOOLS
                ):
                    self.drifted.append(str(block["name"]))

    def verdict(self, limit: int) -> str | None:
        if self.drifted:
            return f"its charter drifted: it called {', '.join(sorted(set(self.drifted)))}"
        if self.context_tokens > limit:
            return f"its context reached {self.context_tokens} tokens (limit {limit})"
        return None
