"""What launch needs to know about processes: identity, descendants, Codex's session.

* A process's identity is its pid plus its start time (field 22 of ``/proc/<pid>/stat``), so
  a recycled pid is a different process.
* Codex reports its session id only in its rollout's first line (``session_meta``). The
  session is found from the rollout file the launched process tree holds open
  (``/proc/<pid>/fd``; Codex's launcher script runs the real binary as a child), else from the
  newest rollout under its ``CODEX_HOME`` whose session_meta cwd matches the launch cwd and
  whose time is not before the launch. An ambiguous fallback (two candidates) binds nothing.
* Closing a pane (``close_pane``) ends what ran in it. tmux's hangup (it closes the pane's
  pty) is not enough: a harness may catch SIGHUP and run on, orphaned (Gemini CLI was seen to,
  holding ~330 MB each). tmux makes each pane's process the leader of a session of its own, so
  the pane's processes are that session's members, read before the pane is killed; those
  still running after ``HANGUP_SECONDS`` are sent SIGTERM, and SIGKILL after
  ``TERM_SECONDS``. Each is signalled through a pidfd opened while its identity still
  matches, so a pid reused meanwhile is never signalled. A process that left the session
  (``setsid``) is left alone, and so are other users', unless the caller's ``send`` can
  signal them (a hosted box's pool users: ``LaunchService._send``, through sudo).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from openbus.daemon.history.model import parse_time
from openbus.daemon.tmux.adapter import Tmux
from openbus.kernel import json_text
from openbus.kernel.errors import OpenbusError

MAX_DEPTH = 6
MAX_PROCS = 256
CLOCK_SLACK_SECONDS = 5.0
HANGUP_SECONDS = 1.0
TERM_SECONDS = 2.0
END_POLL_SECONDS = 0.05


@dataclass(frozen=True)
class ProcessIdentity:
    pid: int
    start: str


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rpartition(")")[2].split()


def identity_of(pid: int) -> ProcessIdentity | None:
    fields = _stat_fields(pid)
    if not fields or len(fields) < 20:
        return None
    if fields[0] == "Z":  # a zombie has exited
        return None
    return ProcessIdentity(pid, fields[19])


def session_members(leader: int) -> list[ProcessIdentity]:
    """The running processes of the session ``leader`` leads (itself included)."""
    found: list[ProcessIdentity] = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields and len(fields) >= 20 and fields[3] == str(leader) and fields[0] != "Z":
            found.append(ProcessIdentity(int(entry.name), fields[19]))
    return found


def _signal(member: ProcessIdentity, sig: signal.Signals) -> bool:
    """Send ``sig`` to ``member`` if it still runs as itself; whether it was sent."""
    try:
        pidfd = os.pidfd_open(member.pid)
    except OSError:
        return False  # gone
    try:
        if identity_of(member.pid) != member:
            return False  # exited, its pid since taken by another process
        signal.pidfd_send_signal(pidfd, sig)
        return True
    except OSError:
        return False  # exited meanwhile, or another user's
    finally:
        os.close(pidfd)


def uid_of(pid: int) -> int | None:
    """The real uid ``pid`` runs as; None once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    return None


# sends a signal to those of the processes it can; returns those it sent it to
Signaller = Callable[[Sequence[ProcessIdentity], signal.Signals], Awaitable[list[ProcessIdentity]]]


async def own_signals(
    members: Sequence[ProcessIdentity], sig: signal.Signals
) -> list[ProcessIdentity]:
    """The daemon's own signals, each through a pidfd (``_signal``): not another user's."""
    return [m for m in members if _signal(m, sig)]


async def still_running(among: Sequence[ProcessIdentity], seconds: float) -> list[ProcessIdentity]:
    """Those of ``among`` still running once they have all ended or ``seconds`` passed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        left = [m for m in among if identity_of(m.pid) == m]
        if not left or loop.time() >= deadline:
            return left
        await asyncio.sleep(END_POLL_SECONDS)


async def end_processes(
    members: Sequence[ProcessIdentity],
    *,
    hangup: float = HANGUP_SECONDS,
    term: float = TERM_SECONDS,
    send: Signaller = own_signals,
) -> list[ProcessIdentity]:
    """Wait up to ``hangup`` seconds for ``members`` to end, then ``send`` those still running
    SIGTERM and, after ``term`` seconds more, SIGKILL. Returns those still running after all
    (those ``send`` could not signal, another user's: no wait is spent on them)."""
    left = await still_running(members, hangup)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        sent = await send(left, sig) if left else []
        if not sent:
            break
        left = [m for m in left if m not in sent] + await still_running(sent, term)
    return left


async def close_pane(tmux: Tmux, pane: str, *, send: Signaller = own_signals) -> None:
    """Kill ``pane`` and end the processes that ran in it (see the module's notes). A pane
    already gone, or a tmux that does not answer, is not an error: nothing more is done."""
    members: list[ProcessIdentity] = []
    with contextlib.suppress(OpenbusError):
        info = await tmux.pane_if_there(pane)
        if info is not None and not info.dead:
            members = session_members(info.pid)
    with contextlib.suppress(OpenbusError):
        await tmux.kill_pane(pane)
    await end_processes(members, send=send)


def children_of(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            text = Path(f"/proc/{pid}/task/{tid}/children").read_text()
        except OSError:
            continue
        found.extend(int(c) for c in text.split() if c.isdigit())
    return found


def process_tree(pid: int) -> list[int]:
    seen = [pid]
    frontier = [pid]
    for _ in range(MAX_DEPTH):
        nxt: list[int] = []
        for p in frontier:
            for child in children_of(p):
                if child not in seen and len(seen) < MAX_PROCS:
                    seen.append(child)
                    nxt.append(child)
        if not nxt:
            break
        frontier = nxt
    return seen


def open_rollouts(pid: int) -> list[Path]:
    found: list[Path] = []
    for p in process_tree(pid):
        try:
            fds = os.listdir(f"/proc/{p}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{p}/fd/{fd}")
            except OSError:
                continue
            name = os.path.basename(target)
            if (
                name.startswith("rollout-")
                and name.endswith(".jsonl")
                and Path(target) not in found
            ):
                found.append(Path(target))
    return found


def session_meta(path: Path) -> dict[str, object] | None:
    try:
        with path.open("rb") as handle:
            first = handle.readline(4 * 1024 * 1024)
    except OSError:
        return None
    try:
        line = json_text.loads(first)
    except ValueError:
        return None
    if not isinstance(line, dict) or line.get("type") != "session_meta":
        return None
    payload = line.get("payload")
    return payload if isinstance(payload, dict) else None


def _session_id(meta: dict[str, object]) -> str | None:
    value = meta.get("id") or meta.get("session_id")
    return value if isinstance(value, str) and value else None


def find_codex_session(
    pid: int, codex_home: str | None, cwd: str | None, launched: float | None
) -> tuple[str, str] | None:
    """(session id, how it was found) for a Codex process, or None when not (yet) known."""
    held = [m for m in (session_meta(p) for p in open_rollouts(pid)) if m is not None]
    ids = {sid for sid in (_session_id(m) for m in held) if sid}
    if len(ids) == 1:
        return ids.pop(), "open rollout"
    if ids or codex_home is None or cwd is None or launched is None:
        return None
    sessions = Path(codex_home) / "sessions"
    if not sessions.is_dir():
        return None
    candidates: list[str] = []
    for path in sorted(
        sessions.rglob("rollout-*.jsonl"), key=lambda p: p.stat().st_mtime, reverse=True
    )[:50]:
        meta = session_meta(path)
        if meta is None or meta.get("cwd") != cwd:
            continue
        started = parse_time(meta.get("timestamp"))
        if started is None or started < launched - CLOCK_SLACK_SECONDS:
            continue
        sid = _session_id(meta)
        if sid and sid not in candidates:
            candidates.append(sid)
    if len(candidates) == 1:
        return candidates[0], "rollout session_meta (cwd and time)"
    return None
