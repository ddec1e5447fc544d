"""Is a past session running now, and in which pane? Best effort, and honest about it.

Theory of operation
-------------------
* Claude Code keeps a live status file per process, ``<config>/sessions/<pid>.json``
  (``{"pid", "sessionId", "procStart", "status", ...}``), deleted at exit. A session is
  ``running`` when a status file names it and that pid is alive (and, when ``procStart`` and
  ``/proc/<pid>/stat`` are both there, the process start time matches, so a recycled pid does
  not count); ``not_running`` when no live status file names it; ``running_unknown`` when the
  status dir cannot be read. A subagent runs inside its parent: while the parent runs, the
  subagent is ``running_unknown`` with the parent's pane.
* Codex has no status file: a session is ``running`` when some process holds its rollout
  open (``/proc/*/fd``). ``running_unknown`` when ``/proc`` cannot be read, or when a process
  of the transcript owner's uid hides its fds from us.
* OpenCode keeps all of a user's sessions in one database and records no process per session:
  a session is ``not_running`` when no process holds its ``opencode.db`` open (the same
  ``/proc/*/fd`` scan), else ``running_unknown`` (some OpenCode runs, perhaps not this
  session), as when ``/proc`` or the owner's processes cannot be read.
* The pane: ``pane_for_pid(pid)``, injected by the daemon (the directory service walks a pid's
  parents up to a pane's pid). ``walk_to_pane`` is a plain implementation over ``/proc``.

Scans are cached for ``ttl`` seconds on the injected monotonic clock, so a search with ten
hits reads ``/proc`` once. The open-files scan reads every file descriptor of every process
(milliseconds on a busy box), so it is not left to fall due on a search: an answer that finds
it past half its ``ttl`` starts the next one in a thread of its own (one at a time) and uses
the one it has, so searches that keep coming never wait for a scan on the event loop. Only
a scan older than ``ttl`` (or none) is read on the spot, as before; each is stamped with the
time it started, so no answer comes from a scan older than ``ttl``.

With an ``OpenWatch`` (``open_watch``: inotify on the transcript folders) a scan also carries
the watch's count read just before it started. For a file the watch covers, an unchanged
count means nothing in its folder was opened or closed since the scan started, so the scan is
the answer at any age and none is taken; a changed count makes the scan due as if past half
its ``ttl`` (the next one starts in the background, and a rollout just opened is seen without
waiting for the ``ttl``). A file outside the watched folders is answered by time as above.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Protocol

from openbus.daemon.history.model import Liveness, LiveState, SessionEntry
from openbus.daemon.history.opencode import split_ref
from openbus.kernel import json_text
from openbus.kernel.clock import Clock
from openbus.kernel.regular_files import read_regular

PaneForPid = Callable[[int], str | None]

REFRESH_AFTER = 0.5  # of the ttl: an open-files scan this old is read again in the background


def proc_start(pid: int, proc: Path = Path("/proc")) -> str | None:
    """Field 22 of ``/proc/<pid>/stat``: the process's start time in clock ticks since boot."""
    try:
        text = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    _, _, rest = text.rpartition(")")
    fields = rest.split()
    return fields[19] if len(fields) > 19 else None


def parent_pid(pid: int, proc: Path = Path("/proc")) -> int | None:
    try:
        text = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()
    try:
        return int(fields[1])
    except (IndexError, ValueError):
        return None


def walk_to_pane(
    pid: int, pane_pids: Mapping[int, str], proc: Path = Path("/proc"), max_depth: int = 64
) -> str | None:
    """The pane whose process is ``pid`` or one of its ancestors."""
    current: int | None = pid
    for _ in range(max_depth):
        if current is None or current <= 1:
            return None
        if current in pane_pids:
            return pane_pids[current]
        current = parent_pid(current, proc)
    return None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class _ClaudeScan:
    def __init__(self, by_session: dict[str, tuple[int, str | None]], readable: bool) -> None:
        self.by_session = by_session
        self.readable = readable


class _CodexScan:
    def __init__(
        self,
        holders: dict[str, int],
        readable: bool,
        hidden_uids: frozenset[int],
        stamp: int | None = None,
    ) -> None:
        self.holders = holders
        self.readable = readable
        self.hidden_uids = hidden_uids
        self.stamp = stamp  # the open watch's count just before the scan started


class OpenEvents(Protocol):
    """The opens and closes in the transcript folders (``open_watch.OpenWatch``)."""

    def arm(self) -> None: ...

    def stamp(self) -> int | None: ...

    def covers(self, path: str) -> bool: ...

    def folders(self) -> int: ...

    def close(self) -> None: ...


class LivenessProbe:
    def __init__(
        self,
        claude_dirs: Iterable[Path],
        *,
        clock: Clock,
        pane_for_pid: PaneForPid | None = None,
        proc: Path = Path("/proc"),
        ttl: float = 2.0,
        open_watch: OpenEvents | None = None,
    ) -> None:
        self.claude_dirs = tuple(claude_dirs)
        self.clock = clock
        self.pane_for_pid = pane_for_pid
        self.proc = proc
        self.ttl = ttl
        self.open_watch = open_watch
        self.scans = 0  # open-files scans taken (``/healthz``)
        self._claude: tuple[float, _ClaudeScan] | None = None
        self._codex: tuple[float, _CodexScan] | None = None
        self._refreshing = threading.Lock()  # held while a background open-files scan runs

    def close(self) -> None:
        """Closes the open watch it was given (it is the probe's from then on)."""
        if self.open_watch is not None:
            self.open_watch.close()

    def watched_folders(self) -> int:
        return self.open_watch.folders() if self.open_watch is not None else 0

    # ---------------------------------------------------------------- scans

    def _fresh(self, stamp: float) -> bool:
        return self.clock.monotonic() - stamp < self.ttl

    def _claude_scan(self) -> _ClaudeScan:
        if self._claude and self._fresh(self._claude[0]):
            return self._claude[1]
        by_session: dict[str, tuple[int, str | None]] = {}
        readable = True
        for root in self.claude_dirs:
            status_dir = root / "sessions"
            try:
                names = os.listdir(status_dir)
            except FileNotFoundError:
                continue
            except OSError:
                readable = False
                continue
            for name in names:
                if not name.endswith(".json"):
                    continue
                try:
                    data = json_text.loads(read_regular(status_dir / name))
                except (OSError, ValueError):
                    continue
                if not isinstance(data, dict):
                    continue
                sid, pid = data.get("sessionId"), data.get("pid")
                if isinstance(sid, str) and isinstance(pid, int) and not isinstance(pid, bool):
                    start = data.get("procStart")
                    by_session[sid] = (pid, start if isinstance(start, str) else None)
        scan = _ClaudeScan(by_session, readable)
        self._claude = (self.clock.monotonic(), scan)
        return scan

    def _codex_scan(self, path: str) -> _CodexScan:
        """The open files to answer for the file at ``path`` with."""
        held = self._codex
        if held is None:
            return self._read_codex()
        stamp, scan = held[1].stamp, held[1]
        watch = self.open_watch
        if stamp is not None and watch is not None:
            now = watch.stamp()
            if now == stamp and watch.covers(path):
                return scan  # nothing in its folder opened or closed since the scan began
            if now != stamp and self._fresh(held[0]):
                self._refresh_codex()
                return scan
        if self._fresh(held[0]):
            if self.clock.monotonic() - held[0] >= self.ttl * REFRESH_AFTER:
                self._refresh_codex()
            return scan
        return self._read_codex()

    def _refresh_codex(self) -> None:
        """Read the open files again in a thread, unless a background read is under way."""
        if not self._refreshing.acquire(blocking=False):
            return
        try:
            threading.Thread(target=self._refresh, name="openbus-open-files", daemon=True).start()
        except RuntimeError:  # no thread to be had (the interpreter is ending): next time
            self._refreshing.release()

    def _refresh(self) -> None:
        try:
            self._read_codex()
        finally:
            self._refreshing.release()

    def _read_codex(self) -> _CodexScan:
        """Every process's open transcripts, now; kept unless a newer scan is there already."""
        started = self.clock.monotonic()
        stamp = None
        if self.open_watch is not None:
            self.open_watch.arm()  # a transcript folder made since the last scan
            stamp = self.open_watch.stamp()
        self.scans += 1
        holders: dict[str, int] = {}
        hidden: set[int] = set()
        readable = True
        proc = str(self.proc)
        try:
            pids = [n for n in os.listdir(proc) if n.isdigit()]
        except OSError:
            pids = []
            readable = False
        me = str(os.getpid())
        # plain strings, not Path objects: this reads every open file of every process
        # (thousands of links)
        for pid in pids:
            if pid == me:
                continue
            fd_dir = f"{proc}/{pid}/fd/"
            try:
                fds = os.listdir(fd_dir)
            except FileNotFoundError:
                continue
            except PermissionError:
                with contextlib.suppress(OSError):
                    hidden.add(os.stat(f"{proc}/{pid}").st_uid)
                continue
            except OSError:
                continue
            for fd in fds:
                try:
                    target = os.readlink(fd_dir + fd)
                except OSError:
                    continue
                if target.endswith((".jsonl", "/opencode.db")):
                    holders.setdefault(target, int(pid))
        scan = _CodexScan(holders, readable, frozenset(hidden), stamp)
        held = self._codex
        if held is None or held[0] <= started:
            self._codex = (started, scan)
        return scan

    # ---------------------------------------------------------------- answers

    def _pane(self, pid: int) -> str | None:
        if self.pane_for_pid is None:
            return None
        try:
            return self.pane_for_pid(pid)
        except Exception:  # noqa: BLE001 (a directory hiccup must not break a search)
            return None

    def _claude_top(self, session_id: str) -> Liveness:
        scan = self._claude_scan()
        found = scan.by_session.get(session_id)
        if found is None:
            return Liveness(LiveState.NOT_RUNNING if scan.readable else LiveState.RUNNING_UNKNOWN)
        pid, start = found
        if not pid_alive(pid):
            return Liveness(LiveState.NOT_RUNNING)
        if start is not None:
            actual = proc_start(pid, self.proc)
            if actual is not None and actual != start:
                return Liveness(LiveState.NOT_RUNNING)
        return Liveness(LiveState.RUNNING, self._pane(pid), pid)

    def of(self, entry: SessionEntry) -> Liveness:
        if entry.harness == "claude":
            if entry.subagent:
                if not entry.parent_session_id:
                    return Liveness(LiveState.RUNNING_UNKNOWN)
                parent = self._claude_top(entry.parent_session_id)
                if parent.state is LiveState.RUNNING:
                    return Liveness(LiveState.RUNNING_UNKNOWN, parent.pane, parent.pid)
                return parent
            return self._claude_top(entry.session_id)
        if entry.harness == "codex":
            return self._held(entry.transcript)
        if entry.harness == "opencode":
            db = split_ref(Path(entry.transcript)) if entry.transcript else None
            held = self._held(str(db[0]) if db else None)
            if held.state is LiveState.RUNNING:  # the database, not necessarily this session
                return Liveness(LiveState.RUNNING_UNKNOWN)
            return held
        return Liveness(LiveState.RUNNING_UNKNOWN)

    def _held(self, transcript: str | None) -> Liveness:
        """``running`` when a process holds the file open, with that process's pane."""
        if not transcript:
            return Liveness(LiveState.NOT_RUNNING)
        scan = self._codex_scan(transcript)
        if not scan.holders:  # nothing is held open: no path to resolve and look up
            path = transcript
        else:
            path = os.path.realpath(transcript)
            pid = scan.holders.get(path) or scan.holders.get(transcript)
            if pid is not None:
                return Liveness(LiveState.RUNNING, self._pane(pid), pid)
        if not scan.readable:
            return Liveness(LiveState.RUNNING_UNKNOWN)
        if not scan.hidden_uids:  # every process's files were seen: none holds this one
            return Liveness(LiveState.NOT_RUNNING)
        try:
            owner = os.stat(path).st_uid
        except OSError:
            return Liveness(LiveState.NOT_RUNNING)
        if owner in scan.hidden_uids:
            return Liveness(LiveState.RUNNING_UNKNOWN)
        return Liveness(LiveState.NOT_RUNNING)
