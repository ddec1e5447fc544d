"""``openbus history``: the index of past agent sessions, from the command line.

* ``history reindex [--full]`` opens the index file directly (``<state dir>/history.db``), so
  it works with or without a running daemon; both may write it at once (SQLite WAL). It only
  re-derives the index from transcripts the user can read already, which is not an action on
  anyone's behalf, so it is not audited. A progress bar goes to stderr on a terminal, else a
  line per tenth.
* ``history push`` is for Claude Code's Stop, SessionEnd and SubagentStop hooks: it reads the
  hook's JSON from stdin (``transcript_path``, ``agent_transcript_path``, ``session_id``) and
  indexes that transcript directly, like reindex. It never exits 2 (which would block the
  agent); problems go to stderr with exit 1. ``--transcript PATH`` or ``--harness H --session
  ID`` instead of stdin, for scripts.
* ``history search``, ``history get`` and ``history expunge`` go through the daemon: they are
  actions on the gate and each leaves an audit record. Expunge removes the entry and its
  transcript file(s).
* ``history`` alone prints where the index is, its size and sources, and which harnesses are
  pending (omp: its transcript format has not been observed yet, so it is not indexed).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from openbus.daemon.cli_common import add_common, emit
from openbus.daemon.client import DaemonClient
from openbus.daemon.config import Config
from openbus.daemon.history.index import DB_NAME, HistoryIndex
from openbus.daemon.history.model import PENDING_HARNESSES
from openbus.daemon.history.sources import Sources
from openbus.kernel.clock import SystemClock
from openbus.kernel.errors import BadRequest

PENDING_NOTE = "omp: pending (its transcript format has not been observed yet; not indexed)"


def _open(config: Config) -> HistoryIndex:
    return HistoryIndex(
        config.daemon.state_dir / DB_NAME, Sources.from_config(config), clock=SystemClock()
    )


class ProgressBar:
    """A bar on a terminal, else a line at every tenth (and at the end)."""

    def __init__(self, stream: TextIO, width: int = 30) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.width = width
        self._last_tenth = -1
        self._last_draw = 0.0

    def __call__(self, done: int, total: int) -> None:
        if total == 0:
            return
        if self.tty:
            now = time.monotonic()
            if done != total and now - self._last_draw < 0.05:
                return
            self._last_draw = now
            filled = self.width * done // total
            bar = "#" * filled + "." * (self.width - filled)
            self.stream.write(f"\r[{bar}] {done}/{total} transcripts")
            if done == total:
                self.stream.write("\n")
            self.stream.flush()
            return
        tenth = 10 * done // total
        if tenth != self._last_tenth:
            self._last_tenth = tenth
            self.stream.write(f"reindex: {done}/{total} transcripts ({10 * tenth}%)\n")
            self.stream.flush()


def _status(args: argparse.Namespace, config: Config) -> int:
    index = _open(config)
    try:
        data = {
            "index": str(index.path),
            "sessions": index.count(),
            "claude_config_dirs": [str(p) for p in index.sources.claude_dirs],
            "codex_homes": [str(p) for p in index.sources.codex_homes],
            "pending_harnesses": list(PENDING_HARNESSES),
        }
    finally:
        index.close()
    emit(
        args,
        data,
        lambda d: "\n".join(
            [
                f"index: {d['index']} ({d['sessions']} sessions)",
                "claude config dirs: " + (", ".join(d["claude_config_dirs"]) or "none"),
                "codex homes: " + (", ".join(d["codex_homes"]) or "none"),
                PENDING_NOTE,
                "verbs: reindex, push, search, get, expunge (openbus history VERB --help)",
            ]
        ),
    )
    return 0


def _reindex(args: argparse.Namespace, config: Config) -> int:
    index = _open(config)
    try:
        if args.full:
            index.forget_files()
        stats = index.reconcile(progress=None if args.json else ProgressBar(sys.stderr))
    finally:
        index.close()
    data = stats.to_dict()
    emit(
        args,
        data,
        lambda d: (
            f"reindexed {d['indexed']} of {d['changed']} changed transcripts"
            f" ({d['scanned']} seen, {d['gone']} gone, {len(d['errors'])} failed)"
            f" in {d['seconds']:.2f}s\n{PENDING_NOTE}"
            + "".join(f"\nfailed: {e}" for e in d["errors"][:10])
        ),
    )
    return 1 if stats.errors else 0


def _push(args: argparse.Namespace, config: Config) -> int:
    try:
        index = _open(config)
    except Exception as exc:  # noqa: BLE001 (a hook must not break the agent; reconcile catches up)
        print(f"openbus history push: {exc}", file=sys.stderr)
        return 1
    try:
        if args.transcript:
            entries = [e for e in [index.push(transcript_path=args.transcript)] if e]
        elif args.harness or args.session:
            entries = [e for e in [index.push(harness=args.harness, session_id=args.session)] if e]
        else:
            raw = sys.stdin.read()
            try:
                hook = json.loads(raw) if raw.strip() else None
            except ValueError:
                raise BadRequest("the hook input on stdin is not JSON", field="stdin") from None
            if not isinstance(hook, dict):
                raise BadRequest("expected the hook's JSON object on stdin", field="stdin")
            entries = index.push_hook(hook)
    finally:
        index.close()
    data = {"indexed": [{"harness": e.harness, "session_id": e.session_id} for e in entries]}
    emit(
        args,
        data,
        lambda d: "\n".join(f"indexed {x['harness']} {x['session_id']}" for x in d["indexed"]),
    )
    return 0


def _live_text(live: dict[str, Any]) -> str:
    state = str(live.get("state"))
    return f"{state} {live['pane']}" if live.get("pane") else state


def _entry_line(e: dict[str, Any]) -> str:
    when = (e.get("last_active") or "")[:16].replace("T", " ")
    branches = f" [{', '.join(e['branches'])}]" if e.get("branches") else ""
    head = f"{e['harness']:<6} {e['session_id']}  {when}  {_live_text(e['liveness'])}"
    lines = [head, f"    {e.get('title') or '(untitled)'}"]
    lines.append(f"    {e.get('repo') or e.get('cwd') or ''}{branches}")
    if e.get("prs"):
        lines.append("    " + " ".join(e["prs"]))
    if e.get("matched_terms"):
        lines.append("    matched: " + ", ".join(e["matched_terms"]))
    return "\n".join(lines)


def _search_text(data: dict[str, Any]) -> str:
    results = data.get("results", [])
    if not results:
        return "no matching sessions (Claude Code and Codex are indexed; omp is pending)"
    return "\n".join(_entry_line(e) for e in results)


def _search(args: argparse.Namespace, config: Config) -> int:
    data = DaemonClient(config).get(
        "/api/history/search", q=args.query, repo=args.repo, limit=args.limit
    )
    emit(args, data, _search_text)
    return 0


def _get_text(data: dict[str, Any]) -> str:
    e = data["session"]
    lines = [_entry_line(e)]
    lines.append(f"    cwd: {e.get('cwd')}")
    lines.append(f"    started: {e.get('started')}  last active: {e.get('last_active')}")
    if e.get("subagent"):
        lines.append(f"    subagent of {e.get('parent_session_id')}")
    if e.get("resume_argv"):
        lines.append("    resume: " + " ".join(e["resume_argv"]))
    if e.get("transcript"):
        lines.append(f"    transcript: {e['transcript']}")
    for prompt in e.get("prompts", []):
        first = prompt.splitlines()[0] if prompt else ""
        lines.append(f"    > {first[:200]}")
    return "\n".join(lines)


def _get(args: argparse.Namespace, config: Config) -> int:
    data = DaemonClient(config).get(f"/api/history/sessions/{args.harness}/{args.session_id}")
    emit(args, data, _get_text)
    return 0


def _expunge(args: argparse.Namespace, config: Config) -> int:
    if not args.yes and sys.stdin.isatty():
        answer = input(
            f"remove {args.harness} session {args.session_id} and its transcript? [y/N] "
        )
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing removed", file=sys.stderr)
            return 1
    data = DaemonClient(config).request(
        "DELETE", f"/api/history/sessions/{args.harness}/{args.session_id}"
    )
    emit(
        args,
        data,
        lambda d: (
            f"expunged {d['harness']} {d['session_id']}"
            + "".join(f"\nremoved {p}" for p in d["removed"])
        ),
    )
    return 0


def _sub(
    hs: Any, name: str, handler: Callable[[argparse.Namespace, Config], int], help_text: str
) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = hs.add_parser(name, help=help_text)
    add_common(p)
    p.set_defaults(handler=handler)
    return p


def register(sub: Any) -> None:
    history = sub.add_parser(
        "history",
        help="search and manage the index of past agent sessions",
        description="The index of past agent sessions (Claude Code, Codex). " + PENDING_NOTE,
    )
    add_common(history)
    history.set_defaults(handler=_status)
    hs = history.add_subparsers(dest="history_verb", metavar="VERB")

    p = _sub(hs, "reindex", _reindex, "reconcile the index with the transcripts on disk")
    p.add_argument("--full", action="store_true", help="re-parse every transcript")

    p = _sub(hs, "push", _push, "index one transcript now (Claude Code hooks: JSON on stdin)")
    p.add_argument("--transcript", metavar="PATH", help="a transcript file instead of stdin")
    p.add_argument("--harness", choices=["claude", "codex"])
    p.add_argument("--session", metavar="ID")

    p = _sub(hs, "search", _search, "find past sessions by topic, branch, PR, repo")
    p.add_argument("query", metavar="QUERY")
    p.add_argument("--repo", metavar="R", help="only sessions in this repo (origin or path)")
    p.add_argument("--limit", type=int, default=10)

    p = _sub(hs, "get", _get, "one session's full entry")
    p.add_argument("harness", metavar="HARNESS")
    p.add_argument("session_id", metavar="ID")

    p = _sub(hs, "expunge", _expunge, "remove a session's entry and its transcript (audited)")
    p.add_argument("harness", metavar="HARNESS")
    p.add_argument("session_id", metavar="ID")
    p.add_argument("--yes", action="store_true", help="do not ask")
