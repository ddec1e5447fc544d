"""``openbus history``: the index of past agent sessions, from the command line.

* ``history reindex [--full]`` and ``history push`` write the index on the user's behalf, so
  they are actions on the daemon's gate (``history.reindex``, ``history.push``) and each
  leaves one audit record with the user as the actor. Without a daemon they refuse (exit 1,
  one line) rather than write the index unaudited: the CLI writing the audit log itself
  would append to a hash chain whose head the daemon keeps in memory (a daemon starting
  meanwhile would fork it), on a hosted box it cannot open the daemon's state at all, and
  nothing is lost by waiting, since the daemon reconciles every transcript when it starts.
* ``history push`` is for Claude Code's Stop, SessionEnd and SubagentStop hooks: it reads the
  hook's JSON from stdin (``transcript_path``, ``agent_transcript_path``, ``session_id``) and
  asks the daemon to index that transcript. It never exits 2 (which would block the agent);
  problems go to stderr with exit 1. ``--transcript PATH`` or ``--harness H --session ID``
  instead of stdin, for scripts.
* ``history search``, ``history get`` and ``history expunge`` go through the daemon: they are
  actions on the gate and each leaves an audit record. Expunge removes the entry and its
  transcript file(s), only once confirmed at a terminal or given ``--yes``, and says what it
  removed; ``get`` takes a unique prefix of the session id; a search made while the index is
  being refreshed says so.
* ``history`` alone prints where the index is, its size and its sources (each harness's
  dirs).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from openbus.daemon.cli_common import add_common, emit
from openbus.daemon.client import DaemonClient
from openbus.daemon.config import Config
from openbus.daemon.history.index import DB_NAME, HistoryIndex
from openbus.daemon.history.model import PENDING_HARNESSES
from openbus.daemon.history.sources import Sources
from openbus.kernel import json_text
from openbus.kernel.clock import SystemClock
from openbus.kernel.errors import BadRequest


def _open(config: Config) -> HistoryIndex:
    return HistoryIndex(
        config.daemon.state_dir / DB_NAME, Sources.from_config(config), clock=SystemClock()
    )


def _status(args: argparse.Namespace, config: Config) -> int:
    index = _open(config)
    try:
        data = {
            "index": str(index.path),
            "sessions": index.count(),
            "claude_config_dirs": [str(p) for p in index.sources.claude_dirs],
            "codex_homes": [str(p) for p in index.sources.codex_homes],
            "omp_agent_dirs": [str(p) for p in index.sources.omp_dirs],
            "gemini_dirs": [str(p) for p in index.sources.gemini_dirs],
            "opencode_data_dirs": [str(p) for p in index.sources.opencode_dirs],
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
                "omp agent dirs: " + (", ".join(d["omp_agent_dirs"]) or "none"),
                "gemini dirs: " + (", ".join(d["gemini_dirs"]) or "none"),
                "opencode data dirs: " + (", ".join(d["opencode_data_dirs"]) or "none"),
                "verbs: reindex, push, search, get, expunge (openbus history VERB --help)",
            ]
        ),
    )
    return 0


def _reindex(args: argparse.Namespace, config: Config) -> int:
    data = DaemonClient(config, timeout=None).request(
        "POST", "/api/history/reindex", json={"full": bool(args.full)}
    )
    emit(
        args,
        data,
        lambda d: (
            f"reindexed {d['indexed']} of {d['changed']} changed transcripts"
            f" ({d['scanned']} seen, {d['gone']} gone, {len(d['errors'])} failed)"
            f" in {d['seconds']:.2f}s" + "".join(f"\nfailed: {e}" for e in d["errors"][:10])
        ),
    )
    return 1 if data["errors"] else 0


def _push_body(args: argparse.Namespace) -> dict[str, Any]:
    if args.transcript:
        return {"transcript_path": os.path.abspath(os.path.expanduser(args.transcript))}
    if args.harness or args.session:
        return {"harness": args.harness, "session_id": args.session}
    raw = sys.stdin.read()
    try:
        hook = json_text.loads(raw) if raw.strip() else None
    except ValueError:
        raise BadRequest("the hook input on stdin is not JSON", field="stdin") from None
    if not isinstance(hook, dict):
        raise BadRequest("expected the hook's JSON object on stdin", field="stdin")
    return {"hook": hook}


def _push(args: argparse.Namespace, config: Config) -> int:
    body = _push_body(args)
    data = DaemonClient(config).request("POST", "/api/history/push", json=body)
    emit(
        args,
        data,
        lambda d: "\n".join(f"indexed {x['harness']} {x['session_id']}" for x in d["indexed"]),
    )
    if not data["indexed"]:
        what = body.get("transcript_path") or (body.get("hook") or {}).get("transcript_path")
        where = f" from {what}" if what else ""
        print(
            f"openbus: nothing indexed{where}: the transcript holds no session yet",
            file=sys.stderr,
        )
        return 1
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
    note = f"\nnote: {data['refreshing']}" if data.get("refreshing") else ""
    if not results:
        return "no matching sessions (Claude Code, Codex, omp and Gemini CLI are indexed)" + note
    return "\n".join(_entry_line(e) for e in results) + note


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


def _expunge_text(d: dict[str, Any]) -> str:
    files = len(d["removed"])
    head = (
        f"expunged {d['harness']} {d['session_id']}: its index entry and "
        f"{files} transcript file{'' if files == 1 else 's'}"
    )
    kept = f"\n{d['kept']}" if d.get("kept") else ""
    return head + "".join(f"\nremoved {p}" for p in d["removed"]) + kept


def _expunge(args: argparse.Namespace, config: Config) -> int:
    what = f"{args.harness} session {args.session_id}"
    if args.harness == "opencode":  # its database is OpenCode's: only the entries go
        doing, asking = "forgets " + what, f"forget {what} (and its child sessions) in the index?"
    else:
        doing = f"deletes {what}'s transcript for good"
        asking = f"delete {what}: its index entry and its transcript file(s)?"
    if not args.yes:
        if not sys.stdin.isatty():
            raise BadRequest(f"expunge {doing}: confirm at a terminal, or pass --yes", field="yes")
        answer = input(f"{asking} [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing removed", file=sys.stderr)
            return 1
    data = DaemonClient(config).request(
        "DELETE", f"/api/history/sessions/{args.harness}/{args.session_id}"
    )
    emit(args, data, _expunge_text)
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
        description="The index of past agent sessions (Claude Code, Codex, omp, Gemini CLI, "
        "OpenCode).",
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
    p.add_argument("session_id", metavar="ID", help="the session id, or a unique prefix of it")

    p = _sub(hs, "expunge", _expunge, "remove a session's entry and its transcript (audited)")
    p.add_argument("harness", metavar="HARNESS")
    p.add_argument("session_id", metavar="ID")
    p.add_argument("--yes", action="store_true", help="do not ask (for scripts)")
