"""An agent's replies, read from its transcript as it grows.

Theory of operation
-------------------
A reply is the text the agent wrote in one turn: Claude Code's ``assistant`` text blocks, or
Codex's ``agent_message`` events (its ``response_item`` assistant messages when a rollout has
no such event), joined in order, between two of the human's (or a peer's) prompts, which the
transcript parsers (``history.parse``) tell from tool results and harness context.
``ReplyReader`` keeps, per file, the offset it has read to and the turns so far, and on each
``read`` parses only the complete lines appended since, so reading a long session's newest
reply (``last=1``) costs the new bytes, not the whole file. A file that shrank or was
replaced is read again from the start.

Claude Code can append a turn's records before the previous turn's (a prompt sent as the turn
before ends: the next prompt's records came first, then the earlier turn's). Its records carry
``timestamp``s (one ISO format), so each Claude prompt and reply text is also kept in time
order, and a record stamped before one already read puts it in its place and counts the turns
again from those (rare; the usual read stays the new bytes only).
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openbus.daemon.history.parse import (
    _CODEX_CONTEXT_PREFIXES,
    _claude_assistant_text,
    _claude_prompt,
    _codex_texts,
    _records,
)
from openbus.kernel.regular_files import open_regular

CHUNK = 1 << 20
HEAD_BYTES = 256


@dataclass
class _Turns:
    harness: str
    inode: int = 0
    head: bytes = b""  # the file's first bytes: a rewrite in place is another file
    offset: int = 0
    prompts: int = 0  # prompts seen (the first is the brief)
    replies: list[str] = field(default_factory=list)
    current: list[str] = field(default_factory=list)
    codex_events: bool = False  # the rollout has agent_message events: items are duplicates
    # Claude Code's prompts (None) and reply texts by their timestamps (one without takes
    # the latest read), for the turns to be counted again when one comes out of order
    events: list[tuple[str, list[str] | None]] = field(default_factory=list)

    def prompt(self) -> None:
        self.close()
        self.prompts += 1

    def close(self) -> None:
        text = "\n\n".join(t for t in self.current if t.strip()).strip()
        if text:
            self.replies.append(text)
        self.current = []

    def _take(self, texts: list[str] | None) -> None:
        if texts is None:
            self.prompt()
        else:
            self.current.extend(texts)

    def _claude(self, rec: Mapping[str, Any], texts: list[str] | None) -> None:
        """A prompt (``texts`` None) or a reply's texts, in the order of the timestamps."""
        latest = self.events[-1][0] if self.events else ""
        stamp = rec.get("timestamp")
        if not isinstance(stamp, str) or not stamp:
            stamp = latest
        if stamp >= latest:
            self.events.append((stamp, texts))
            self._take(texts)
            return
        bisect.insort(self.events, (stamp, texts), key=lambda event: event[0])
        self.prompts, self.replies, self.current = 0, [], []
        for _, taken in self.events:
            self._take(taken)

    def feed(self, rec: Mapping[str, Any]) -> None:
        if self.harness == "claude":
            kind = rec.get("type")
            if kind == "user" and not rec.get("isSidechain") and _claude_prompt(rec) is not None:
                self._claude(rec, None)
            elif kind == "assistant" and not rec.get("isSidechain"):
                self._claude(rec, list(_claude_assistant_text(rec)))
            return
        payload = rec.get("payload")
        if not isinstance(payload, dict):
            return
        kind = rec.get("type")
        if kind == "event_msg":
            ptype = payload.get("type")
            if ptype == "user_message":
                self.prompt()
            elif ptype == "agent_message" and isinstance(payload.get("message"), str):
                if not self.codex_events:
                    self.codex_events = True
                    self.current = []  # item texts of this turn were the same words
                self.current.append(payload["message"])
            elif ptype == "task_complete":
                self.close()
        elif kind == "response_item" and payload.get("type") == "message":
            role = payload.get("role")
            if role == "assistant" and not self.codex_events:
                self.current.extend(_codex_texts(payload.get("content"), ("output_text",)))
            elif role == "user" and not self.codex_events:
                text = "\n".join(_codex_texts(payload.get("content"), ("input_text",)))
                if not text.lstrip().startswith(_CODEX_CONTEXT_PREFIXES):
                    self.prompt()


@dataclass(frozen=True)
class Replies:
    replies: tuple[str, ...]  # finished turns' replies (the last ``last`` asked), oldest first
    pending: str | None  # the text of the turn still being written, if any
    prompts: int
    total: int = 0  # finished turns' replies in all (``replies`` may hold only the last few)


class ReplyReader:
    def __init__(self) -> None:
        self._files: dict[str, _Turns] = {}

    def read(self, path: Path, harness: str, last: int | None = None) -> Replies:
        """The replies in ``path`` so far: all, or with ``last`` only the newest ``last`` of
        them (a long session's copy of every reply is then not made)."""
        key = str(path)
        try:  # a regular file only: a FIFO or a device put at the path would never end
            fd, st = open_regular(path)
            handle = os.fdopen(fd, "rb")
        except OSError:
            self._files.pop(key, None)
            return Replies((), None, 0)
        turns = self._files.get(key)
        with handle:
            head = handle.read(HEAD_BYTES)
            if (
                turns is None
                or turns.inode != st.st_ino
                or st.st_size < turns.offset
                or head[: len(turns.head)] != turns.head
            ):
                turns = _Turns(harness, inode=st.st_ino, head=head)
                self._files[key] = turns
            if st.st_size > turns.offset:
                handle.seek(turns.offset)
                rest = b""
                while data := handle.read(CHUNK):
                    rest += data
                    end = rest.rfind(b"\n")
                    if end < 0:
                        continue  # one long line: keep reading until it is whole
                    for rec in _records(rest[: end + 1].split(b"\n")):
                        turns.feed(rec)
                    turns.offset += end + 1
                    rest = rest[end + 1 :]
        pending = "\n\n".join(t for t in turns.current if t.strip()).strip() or None
        done = turns.replies
        kept = tuple(done[-last:]) if last else tuple(done)
        return Replies(kept, pending, turns.prompts, len(done))
