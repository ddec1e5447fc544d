"""Synthetic Claude Code config dirs and Codex homes, in the real transcript formats.

The line shapes follow the real transcripts in ``data/`` (Claude Code 2.1.197, Codex 0.171.0):
only the fields the index reads vary; the rest is kept so the parsers see realistic noise.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from openbus.daemon import compose
from openbus.daemon.compose import Daemon
from openbus.daemon.config import parse_config
from openbus.kernel.testing import FixedClock, SeededRandom

DATA = Path(__file__).parent / "data"
T0 = datetime(2026, 11, 30, 6, 0, 0, tzinfo=UTC)


def _ts(offset: float) -> str:
    return (
        (T0 + timedelta(seconds=offset)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )


def _write(path: Path, records: Sequence[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def project_dir_name(cwd: str) -> str:
    return cwd.replace("/", "-").replace(".", "-")


class ClaudeHome:
    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "projects").mkdir(parents=True, exist_ok=True)

    def _line(
        self,
        kind: str,
        session_id: str,
        cwd: str,
        branch: str,
        offset: float,
        message: dict[str, Any],
        **extra: Any,
    ) -> dict[str, Any]:
        return {
            "parentUuid": None,
            "isSidechain": False,
            "type": kind,
            "message": message,
            "uuid": str(uuid.uuid4()),
            "timestamp": _ts(offset),
            "userType": "external",
            "entrypoint": "cli",
            "cwd": cwd,
            "sessionId": session_id,
            "version": "2.1.197",
            "gitBranch": branch,
            **extra,
        }

    def session(
        self,
        session_id: str,
        cwd: str,
        prompts: Sequence[str],
        *,
        branches: Sequence[str] = ("HEAD",),
        replies: Sequence[str] = (),
        ai_title: str | None = None,
        summary: str | None = None,
        start: float = 0.0,
    ) -> Path:
        records: list[dict[str, Any]] = [
            {"type": "permission-mode", "permissionMode": "default", "sessionId": session_id}
        ]
        offset = start
        for i, prompt in enumerate(prompts):
            branch = branches[min(i, len(branches) - 1)]
            records.append(
                self._line(
                    "user",
                    session_id,
                    cwd,
                    branch,
                    offset,
                    {"role": "user", "content": prompt},
                    origin={"kind": "human"},
                    promptSource="typed",
                )
            )
            reply = replies[i] if i < len(replies) else f"done: {i}"
            records.append(
                self._line(
                    "assistant",
                    session_id,
                    cwd,
                    branch,
                    offset + 1,
                    {
                        "role": "assistant",
                        "type": "message",
                        "content": [{"type": "text", "text": reply}],
                    },
                )
            )
            # a tool result: never a prompt
            records.append(
                self._line(
                    "user",
                    session_id,
                    cwd,
                    branch,
                    offset + 2,
                    {
                        "role": "user",
                        "content": [
                            {"tool_use_id": "toolu_1", "type": "tool_result", "content": "ok"}
                        ],
                    },
                    toolUseResult="ok",
                )
            )
            offset += 10
        if ai_title:
            records.append({"type": "ai-title", "aiTitle": ai_title, "sessionId": session_id})
        if summary:
            records.append({"type": "summary", "summary": summary, "leafUuid": "x"})
        path = self.root / "projects" / project_dir_name(cwd) / f"{session_id}.jsonl"
        return _write(path, records)

    def subagent(
        self,
        parent_id: str,
        agent_id: str,
        cwd: str,
        task: str,
        *,
        nested: bool = True,
        start: float = 5.0,
    ) -> Path:
        first = self._line("user", parent_id, cwd, "HEAD", start, {"role": "user", "content": task})
        reply = self._line(
            "assistant",
            parent_id,
            cwd,
            "HEAD",
            start + 1,
            {"role": "assistant", "content": [{"type": "text", "text": "subagent findings"}]},
        )
        for rec in (first, reply):
            rec["isSidechain"] = True
            rec["agentId"] = agent_id
        base = self.root / "projects" / project_dir_name(cwd)
        path = (
            base / parent_id / "subagents" / f"agent-{agent_id}.jsonl"
            if nested
            else base / f"agent-{agent_id}.jsonl"
        )
        return _write(path, [first, reply])

    def status(self, pid: int, session_id: str, cwd: str, proc_start: str | None) -> Path:
        data: dict[str, Any] = {
            "pid": pid,
            "sessionId": session_id,
            "cwd": cwd,
            "startedAt": 1796020888653,
            "version": "2.1.197",
            "kind": "interactive",
            "entrypoint": "cli",
            "status": "idle",
        }
        if proc_start is not None:
            data["procStart"] = proc_start
        path = self.root / "sessions" / f"{pid}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data))
        return path

    def history_line(self, session_id: str, text: str) -> None:
        path = self.root / "history.jsonl"
        with path.open("a") as handle:
            rec = {"display": text, "timestamp": 1, "project": "/x", "sessionId": session_id}
            handle.write(json.dumps(rec) + "\n")


class CodexHome:
    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "sessions").mkdir(parents=True, exist_ok=True)

    def rollout(
        self,
        session_id: str,
        cwd: str,
        prompts: Sequence[str],
        *,
        source: Any = "cli",
        git: dict[str, str] | None = None,
        replies: Sequence[str] = (),
        old_format: bool = False,
        day: str = "2026/11/30",
        start: float = 0.0,
    ) -> Path:
        meta: dict[str, Any] = {
            "session_id": session_id,
            "id": session_id,
            "timestamp": _ts(start),
            "cwd": cwd,
            "originator": "codex_exec" if source == "exec" else "codex-tui",
            "cli_version": "0.171.0",
            "source": source,
            "thread_source": "user",
            "model_provider": "stub",
        }
        if git:
            meta["git"] = git
        records: list[dict[str, Any]] = [
            {"timestamp": _ts(start), "type": "session_meta", "payload": meta},
            {
                "timestamp": _ts(start),
                "type": "response_item",
                "payload": {
                    "type": "message",
                    "role": "user",
                    "content": [
                        {
                            "type": "input_text",
                            "text": f"<environment_context>\n  <cwd>{cwd}</cwd>\n"
                            "</environment_context>",
                        }
                    ],
                },
            },
        ]
        offset = start + 1
        for i, prompt in enumerate(prompts):
            records.append(
                {
                    "timestamp": _ts(offset),
                    "type": "turn_context",
                    "payload": {"cwd": cwd, "approval_policy": "never"},
                }
            )
            records.append(
                {
                    "timestamp": _ts(offset),
                    "type": "response_item",
                    "payload": {
                        "type": "message",
                        "role": "user",
                        "content": [{"type": "input_text", "text": prompt}],
                    },
                }
            )
            if old_format:
                event = {"type": "user_message", "message": prompt}
            else:
                event = {
                    "type": "item_completed",
                    "item": {
                        "type": "UserMessage",
                        "content": [{"type": "text", "text": prompt, "text_elements": []}],
                    },
                }
            records.append({"timestamp": _ts(offset), "type": "event_msg", "payload": event})
            reply = replies[i] if i < len(replies) else f"STUB-REPLY: {i}"
            records.append(
                {
                    "timestamp": _ts(offset + 1),
                    "type": "response_item",
                    "payload": {
                        "type": "message",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": reply, "annotations": []}],
                    },
                }
            )
            offset += 10
        stamp = (T0 + timedelta(seconds=start)).strftime("%Y-%m-%dT%H-%M-%S")
        path = self.root / "sessions" / day / f"rollout-{stamp}-{session_id}.jsonl"
        return _write(path, records)

    def name(self, session_id: str, thread_name: str) -> None:
        path = self.root / "session_index.jsonl"
        with path.open("a") as handle:
            rec = {"id": session_id, "thread_name": thread_name, "updated_at": _ts(0)}
            handle.write(json.dumps(rec) + "\n")

    def history_line(self, session_id: str, text: str) -> None:
        path = self.root / "history.jsonl"
        with path.open("a") as handle:
            handle.write(json.dumps({"session_id": session_id, "ts": 1, "text": text}) + "\n")


@contextlib.contextmanager
def history_daemon(
    tmp: Path, history: dict[str, Any], launchers: dict[str, Any] | None = None
) -> Iterator[Daemon]:
    """The composed daemon (no server) over these history sources, reconciled once."""
    section: dict[str, Any] = {
        "daemon": {"state_dir": str(tmp / "state"), "socket": str(tmp / "d.sock")},
        "history": history,
    }
    if launchers:
        section["launchers"] = launchers
    built = compose.build(
        parse_config(section, "<test>"), clock=FixedClock(), random=SeededRandom(1)
    )
    built.history.index.reconcile()
    try:
        yield built
    finally:
        built.history.index.close()
        built.foundation.db.close()


def opencode_database(
    data: Path,
    session_id: str,
    prompt: str,
    cwd: str = "/w/app",
    also: Sequence[tuple[str, str]] = (),
) -> Path:
    """``<data>/opencode.db`` in OpenCode's shape (the tables and columns the index reads, as
    1.18 writes them) with one session and its one prompt (and the sessions ``also`` names
    with theirs, in the same cwd), closed: a WAL database nobody has open, as OpenCode leaves
    it."""
    data.mkdir(parents=True, exist_ok=True)
    db = data / "opencode.db"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(
        "CREATE TABLE session (id TEXT PRIMARY KEY, parent_id TEXT, directory TEXT, title TEXT,"
        " time_created INTEGER, time_updated INTEGER);"
        "CREATE TABLE message (id TEXT PRIMARY KEY, session_id TEXT, time_created INTEGER,"
        " time_updated INTEGER, data TEXT);"
        "CREATE TABLE part (id TEXT PRIMARY KEY, message_id TEXT, session_id TEXT,"
        " time_created INTEGER, time_updated INTEGER, data TEXT);"
    )
    start = int(T0.timestamp() * 1000)
    for sid, text in [(session_id, prompt), *also]:
        conn.execute(
            "INSERT INTO session VALUES (?, NULL, ?, ?, ?, ?)",
            (sid, cwd, f"New session - {T0.isoformat()}", start, start + 5000),
        )
        message = {"role": "user", "time": {"created": start + 1000}}
        conn.execute(
            "INSERT INTO message VALUES (?, ?, ?, ?, ?)",
            (f"msg_{sid}", sid, start + 1000, start + 1000, json.dumps(message)),
        )
        conn.execute(
            "INSERT INTO part VALUES (?, ?, ?, ?, ?, ?)",
            (
                f"prt_{sid}",
                f"msg_{sid}",
                sid,
                start + 1000,
                start + 1000,
                json.dumps({"type": "text", "text": text}),
            ),
        )
    conn.commit()
    conn.close()  # the last connection: SQLite folds the WAL in and removes it
    return db
