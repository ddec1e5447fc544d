"""What the directory learns from the host, outside tmux: process trees, git, Claude's status.

Theory of operation
-------------------
* Harness: read from /proc, never from the pane title. Candidates are the pane's process,
  the leader of the terminal's foreground process group (``tpgid`` in ``/proc/<pid>/stat``)
  and, when neither is recognized, that leader's descendants (a few levels, for ``npx`` and
  similar launchers, and for ``sudo`` starting a hosted agent under its pool user: the first
  harness below, else the first shell). A process is recognized by its argv words and its
  executable's name:
  ``claude``, ``codex``, ``opencode``, ``omp``, ``gemini`` (also as ``node .../claude``,
  ``node .../@openai/codex/bin/codex.js``), shells as ``shell``, anything else ``unknown``.
  The answer is cached per (pane pid, its start time, tpgid, and the names of both processes
  in ``/proc/<pid>/comm``), unless it is ``unknown``: a pane caught between tmux's fork and
  the exec of its command still shows tmux's own image, and the same pid (same start time,
  same tpgid) is the shell or harness a moment later. A process with no arguments to read is
  ``unknown`` too: caught inside its exec (the new name is set before the arguments are laid
  out, so ``sh -c 'exec claude'`` would read as an interactive shell), or exited, not reaped.
  The names are in the key because an ``exec`` keeps the pid and start time: a wrapper script
  that sets up the environment and then execs the harness is the harness from then on, not a
  shell for the pane's life. A shell that runs a script or a ``-c`` command (no job control:
  what it starts stays in its group) is a launcher: the harness below it, else ``unknown``,
  never ``shell``. An ``unknown``
  answer is asked again, but the walk below the pane's processes that found it is redone at
  most every ``WALK_EVERY`` seconds while the key holds (a script that keeps starting
  commands, a pane printing many times a second, would walk its tree on every capture), and
  each walk that finds the same answer again doubles that hold, up to ``WALK_MOST``: a
  launcher that has run a while without a harness is walked about every ``WALK_MOST``
  seconds (200 ticker scripts: 17 walks a second rather than 67), one just started every
  ``WALK_EVERY``. A walk asked for at once (``walk_now``) starts the hold over. An answer
  given from a walk put off is owed (``owed()``), and the directory asks again for the
  panes owed once their walk is due, so a harness a launcher starts is seen within the
  hold (``WALK_EVERY`` to ``WALK_MOST`` seconds) even when its screen then stands still.
* Process identity: pid plus start time (field 22 of ``/proc/<pid>/stat``), so a recycled
  pid is a different process. Each answer also names the parent of the pane's own process
  (tmux's server, which forked it), so the directory can tell a pane's new process from a
  stranger that got a dead pane's recycled pid while tmux's report of it lagged. A capture
  reads its pane's process (and the foreground leader, and a harness found below) again:
  those ``stat`` files are held open and read from their start (``StatFiles``), one system
  call a read; a held file of a reaped process fails, and its pid is looked up afresh.
* Git branch: ``.git/HEAD`` read directly from the cwd upward, following a worktree's
  ``gitdir:`` file; a detached HEAD reads as the short hash. No subprocess. A folder the
  daemon's user cannot search (the agent user's 0700 home in hosted mode) reads as no branch.
* Claude Code's live status: ``<config>/sessions/<pid>.json``, config from the process's
  ``CLAUDE_CONFIG_DIR`` (``/proc/<pid>/environ`` when readable) else ``~/.claude`` of the
  process's ``HOME``; used only when its ``procStart`` matches the process (or is absent).
"""

from __future__ import annotations

import contextlib
import errno
import os
import weakref
from dataclasses import dataclass, replace
from pathlib import Path
from stat import S_ISDIR, S_ISREG

from openbus.daemon.screens import ClaudeStatus
from openbus.kernel import json_text
from openbus.kernel.clock import Clock, SystemClock

SHELLS = frozenset({"bash", "zsh", "sh", "fish", "dash", "ksh", "mksh", "tcsh", "csh", "ash", "nu"})
HARNESS_NAMES = ("claude", "codex", "opencode", "omp", "gemini")
_INTERPRETERS = frozenset({"node", "nodejs", "bun", "deno", "python", "python3", "npx", "tsx"})
_ABSENT = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ELOOP})  # no .git here: look further up
WALK_EVERY = 3.0  # seconds an unknown answer's walk below the pane's processes first holds
WALK_MOST = 12.0  # ... and at most, doubling while its walks find the same answer again
_PACKAGE_HINTS = {
    "@anthropic-ai/claude-code": "claude",
    "@openai/codex": "codex",
    "@google/gemini-cli": "gemini",
    "opencode-ai": "opencode",
    "@oh-my-pi/pi-coding-agent": "omp",
}


@dataclass(frozen=True)
class ProcIdentity:
    pid: int
    start: int  # clock ticks since boot; 0 when unknown


@dataclass(frozen=True)
class Detected:
    harness: str
    process: ProcIdentity  # the harness process (the pane's own process for shells/unknown)
    pane: ProcIdentity  # the pane's own process
    parent: int = 0  # the pane's own process's parent (tmux's server), 0 when unknown


def _read(path: str, limit: int = 1 << 16) -> bytes | None:
    """Up to ``limit`` bytes of a file, None when it cannot be read (read with the bare
    system calls: a capture reads a few /proc files, no buffered file object is needed)."""
    try:
        # not blocking: a FIFO put where a status file or a HEAD is looked for (in folders an
        # agent writes) opens at once and reads nothing; every read is bounded by ``limit``
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        chunks: list[bytes] = []
        while limit > 0:
            chunk = os.read(fd, limit)
            if not chunk:
                break
            chunks.append(chunk)
            limit -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


Stat = tuple[int, int, int, str]  # ppid, tpgid, start time, name


def _stat(pid: int) -> Stat | None:
    """(ppid, tpgid, start time, name) of a process (its name as ``/proc/<pid>/comm`` has
    it, from the same read)."""
    raw = _read(f"/proc/{pid}/stat", 4096)
    return None if raw is None else _parse_stat(raw)


def _parse_stat(raw: bytes) -> Stat | None:
    close = raw.rfind(b")")
    after = raw[close + 2 :].split()
    try:
        return (
            int(after[1]),
            int(after[5]),
            int(after[19]),
            raw[raw.find(b"(") + 1 : close].decode("utf-8", "replace").strip(),
        )
    except (IndexError, ValueError):
        return None


def proc_identity(pid: int) -> ProcIdentity:
    stat = _stat(pid)
    return ProcIdentity(pid, stat[2] if stat else 0)


def _argv(pid: int) -> list[str]:
    raw = _read(f"/proc/{pid}/cmdline")
    if not raw:
        return []
    return [a.decode("utf-8", "replace") for a in raw.rstrip(b"\0").split(b"\0")]


def _comm(pid: int) -> str:
    raw = _read(f"/proc/{pid}/comm", 256)
    return raw.decode("utf-8", "replace").strip() if raw else ""


def classify_argv(argv: list[str], comm: str = "", exe: str = "") -> str | None:
    """The harness a process is, from its argv and names; ``shell``; or None."""
    names = [os.path.basename(argv[0])] if argv and argv[0] else []
    if names and names[0].rstrip("0123456789.") in _INTERPRETERS:
        script = next((w for w in argv[1:4] if w and not w.startswith("-")), "")
        names.append(os.path.basename(script))
    words = [os.path.basename(exe), comm, *names]
    for word in words:
        stem = word.removesuffix(".js").removesuffix(".mjs").removesuffix(".cjs")
        if stem in HARNESS_NAMES:
            return stem
    joined = " ".join(argv[:2])
    for hint, harness in _PACKAGE_HINTS.items():
        if hint in joined:
            return harness
    if ".local/share/claude/versions/" in exe or ".local/share/claude/versions/" in joined:
        return "claude"
    for word in (comm, *names[:1]):
        if word.lstrip("-") in SHELLS:
            return "shell"
    return None


def _classify(pid: int) -> str | None:
    return _classify_argv(pid)[0]


def _classify_argv(pid: int) -> tuple[str | None, list[str]]:
    """What ``_classify`` answers, and the argv it read."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        exe = ""
    argv = _argv(pid)
    return classify_argv(argv, _comm(pid), exe), argv


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return children
    for name in entries:
        if name.isdigit():
            stat = _stat(int(name))
            if stat is not None:
                children.setdefault(stat[0], []).append(int(name))
    return children


# the kernel lists each thread's children (``CONFIG_PROC_CHILDREN``): asked once
_PER_PROCESS_CHILDREN = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


def _children_of(pid: int) -> list[int] | None:
    """A process's children from ``/proc/PID/task/*/children`` (each of its threads' own): a
    few reads instead of a walk over every process (none for a process gone meanwhile); None
    where the kernel does not list them."""
    if not _PER_PROCESS_CHILDREN:
        return None
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    found: list[int] = []
    for tid in tasks:
        raw = _read(f"/proc/{pid}/task/{tid}/children")
        found.extend(int(word) for word in (raw or b"").split())
    return found


class StatFiles:
    """The ``/proc/<pid>/stat`` of the processes a probe asks about again and again (the
    panes' own, their foreground leaders, the harnesses found below them), each held open and
    read again from its start: one system call a read rather than an open, two reads and a
    close. A held file names its process, not its pid: once that process is reaped a read
    fails (``ESRCH``), the file is closed, and the pid is looked up afresh (a stranger may
    hold it now). At most ``most`` are held, the least recently read closed first (a few
    hundred: the daemon's pidfds and pipes share its file limit). Closed with ``close``, or
    when the probe is collected."""

    def __init__(self, most: int = 256) -> None:
        self.most = most
        self._fds: dict[int, int] = {}  # pid -> fd, least recently read first
        self._finalizer = weakref.finalize(self, _close_all, self._fds)

    def stat(self, pid: int) -> Stat | None:
        fd = self._fds.pop(pid, None)
        if fd is not None:
            try:
                raw = os.pread(fd, 4096, 0)
            except OSError:  # its process was reaped
                raw = b""
            if raw:
                self._fds[pid] = fd
                return _parse_stat(raw)
            os.close(fd)
        fd = self._open(pid)
        if fd is None:
            return None
        try:
            raw = os.pread(fd, 4096, 0)
        except OSError:
            os.close(fd)
            return None
        if len(self._fds) >= self.most:
            self._close_oldest()
        self._fds[pid] = fd
        return _parse_stat(raw)

    def _open(self, pid: int) -> int | None:
        """The process's stat file opened; None when there is no such process. Out of file
        descriptors, the least recently read held file makes room; if none can, ``OSError``:
        a process that cannot be read now is not a process that has gone."""
        path = f"/proc/{pid}/stat"
        while True:
            try:
                return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError as exc:
                if exc.errno not in (errno.EMFILE, errno.ENFILE):
                    return None
                if not self._fds:
                    raise
                self._close_oldest()

    def _close_oldest(self) -> None:
        os.close(self._fds.pop(next(iter(self._fds))))

    def held(self) -> int:
        return len(self._fds)

    def close(self) -> None:
        self._finalizer()


def _close_all(fds: dict[int, int]) -> None:
    for fd in fds.values():
        with contextlib.suppress(OSError):
            os.close(fd)
    fds.clear()


class ProcessProbe:
    """Harness detection, process identity, git branches and Claude's status file."""

    def __init__(self, home: Path | None = None, clock: Clock | None = None) -> None:
        self.home = home or Path.home()
        self.clock = clock or SystemClock()
        self._cache: dict[tuple[int, int, int, str, str], Detected] = {}
        # unknown answers, when their walk ran and how long it holds; the panes given one
        # since, and when their next walk is due
        self._walked: dict[tuple[int, int, int, str, str], tuple[Detected, float, float]] = {}
        self._owed: dict[int, float] = {}
        self._gitdirs: dict[str, Path | None] = {}
        self.stats = StatFiles()

    def detect(self, pane_pid: int, *, walk_now: bool = False) -> Detected:
        """What the pane runs. ``walk_now``: walk below its processes even when a walk put off
        holds (a caller that asks until it sees a harness start: a launch)."""
        stat = self.stats.stat(pane_pid)
        if stat is None:
            return Detected("unknown", ProcIdentity(pane_pid, 0), ProcIdentity(pane_pid, 0))
        parent, tpgid, start, name = stat
        leader = self._name(tpgid) if tpgid > 0 and tpgid != pane_pid else ""
        key = (pane_pid, start, tpgid, name, leader)
        cached = self._cache.get(key)
        if cached is not None and (
            cached.process == cached.pane or self._identity(cached.process.pid) == cached.process
        ):
            return cached  # (a harness found below the pane's process must still run)
        now = self.clock.monotonic()
        walked = self._walked.get(key)
        if walked is not None and now - walked[1] < walked[2] and not walk_now:
            self._owed.setdefault(pane_pid, walked[1] + walked[2])
            return walked[0]  # the walk is put off: owed
        self._owed.pop(pane_pid, None)
        found, final = self._detect(pane_pid, start, tpgid)
        found = replace(found, parent=parent)
        if not final:
            # maybe not exec'd yet, or a script yet to start it: asked again, walked again
            # once its hold has passed (or at once when the key changes); the hold doubles
            # while the walks find the same answer
            hold = WALK_EVERY
            if walked is not None and walked[0] == found and not walk_now:
                hold = min(walked[2] * 2, WALK_MOST)
            if len(self._walked) > 4096:
                self._walked.clear()
            self._walked[key] = (found, now, hold)
            return found
        self._walked.pop(key, None)
        if len(self._cache) > 4096:
            self._cache.clear()
        self._cache[key] = found
        return found

    def _name(self, pid: int) -> str:
        stat = self.stats.stat(pid)
        return stat[3] if stat else ""

    def _identity(self, pid: int) -> ProcIdentity:
        stat = self.stats.stat(pid)
        return ProcIdentity(pid, stat[2] if stat else 0)

    def owed(self) -> set[int]:
        """The pane processes answered from a walk put off whose next walk is due now: to be
        detected again (so what a launcher starts is seen even when no capture asks)."""
        if not self._owed:
            return set()
        now = self.clock.monotonic()
        due = {pid for pid, when in self._owed.items() if now >= when}
        for pid in due:
            del self._owed[pid]
        return due

    def _detect(self, pane_pid: int, start: int, tpgid: int) -> tuple[Detected, bool]:
        """What the pane runs, and whether that answer holds while the key does."""
        pane = ProcIdentity(pane_pid, start)
        own, argv = _classify_argv(pane_pid)
        if own not in (None, "shell"):
            return Detected(own, pane, pane), True
        if not argv:
            # no arguments to read: an exec half done (the kernel names the new image before
            # it lays out its arguments: a shell that may yet run ``-c`` a command), or a
            # process that has exited and is not reaped yet
            return Detected("unknown", pane, pane), False
        root, kind = pane_pid, own
        script = own == "shell" and tpgid in (pane_pid, -1) and _runs_script(argv)
        if tpgid > 0 and tpgid != pane_pid:
            root, kind = tpgid, _classify(tpgid)
            if kind not in (None, "shell"):
                return Detected(kind, proc_identity(tpgid), pane), True
        if (kind is None or script) and (root == pane_pid or _stat(root) is not None):
            # (the pane's own process was read just now, by ``detect``)
            # an unrecognised wrapper (npx; sudo switching a hosted agent to its pool user,
            # which keeps the pane's foreground group), or a shell running a script (no job
            # control: its children stay in its group): look a few levels below it
            found = self._descendant(root, pane)
            if found is not None and (found.harness != "shell" or not script):
                return found, True
        if own is None or script:
            # not exec'd yet, or a shell that only runs a script or command (a launcher, not a
            # prompt a person types at): unknown until it runs something recognisable
            return Detected("unknown", pane, pane), False
        return Detected("shell", pane, pane), True

    @staticmethod
    def _descendant(root: int, pane: ProcIdentity) -> Detected | None:
        """The first harness below ``root``, else the first shell (what the wrapper runs)."""
        tree: dict[int, list[int]] | None = None

        def children(pid: int) -> list[int]:
            nonlocal tree
            found = _children_of(pid)
            if found is not None:
                return found
            if tree is None:  # no per-process list on this kernel: one walk over them all
                tree = _children_map()
            return tree.get(pid, [])

        frontier, depth = [root], 0
        shell: Detected | None = None
        while frontier and depth < 3:
            nxt: list[int] = []
            for pid in frontier:
                for child in children(pid):
                    kind = _classify(child)
                    if kind not in (None, "shell"):
                        return Detected(kind, proc_identity(child), pane)
                    if kind == "shell" and shell is None:
                        shell = Detected("shell", proc_identity(child), pane)
                    nxt.append(child)
            frontier, depth = nxt, depth + 1
        return shell

    # ------------------------------------------------------------------ git

    def git_branch(self, cwd: str) -> str | None:
        if not cwd:
            return None
        gitdir = self._gitdirs.get(cwd, False)
        if gitdir is False:
            gitdir = _find_gitdir(Path(cwd))
            if len(self._gitdirs) > 4096:
                self._gitdirs.clear()
            self._gitdirs[cwd] = gitdir
        if not isinstance(gitdir, Path):
            return None
        raw = _read(str(gitdir / "HEAD"), 4096)
        if raw is None:
            self._gitdirs.pop(cwd, None)
            return None
        head = raw.decode("utf-8", "replace").strip()
        if head.startswith("ref:"):
            ref = head[4:].strip()
            return ref.removeprefix("refs/heads/")
        return head[:12] or None

    # ------------------------------------------------------------------ Claude

    def claude_status(self, process: ProcIdentity) -> ClaudeStatus | None:
        config = self._claude_config(process.pid)
        raw = _read(str(config / "sessions" / f"{process.pid}.json"))
        if raw is None:
            return None
        try:
            doc = json_text.loads(raw)
        except ValueError:
            return None
        if not isinstance(doc, dict) or not isinstance(doc.get("status"), str):
            return None
        if doc.get("pid") not in (None, process.pid):
            return None
        proc_start = doc.get("procStart")
        if proc_start not in (None, "") and process.start and str(proc_start) != str(process.start):
            return None
        waiting = doc.get("waitingFor")
        session = doc.get("sessionId")
        name = doc.get("name")
        since = doc.get("statusUpdatedAt")  # epoch milliseconds
        return ClaudeStatus(
            status=doc["status"],
            waiting_for=waiting if isinstance(waiting, str) else None,
            session_id=session if isinstance(session, str) else None,
            name=name if isinstance(name, str) else None,
            since=since / 1000 if isinstance(since, int | float) and since > 0 else None,
        )

    def _claude_config(self, pid: int) -> Path:
        env = _environ(pid)
        if env.get("CLAUDE_CONFIG_DIR"):
            return Path(env["CLAUDE_CONFIG_DIR"])
        home = env.get("HOME")
        return (Path(home) if home else self.home) / ".claude"


def _runs_script(argv: list[str]) -> bool:
    """A shell's argv running a script or a ``-c`` command rather than an interactive shell:
    what launches an agent after setting up its environment (``sh -c 'cd x && claude'``,
    ``sh ./run-agent``)."""
    for word in argv[1:]:
        if not word.startswith("-"):
            return True
        if not word.startswith("--") and "c" in word[1:]:
            return True
    return False


def _environ(pid: int) -> dict[str, str]:
    raw = _read(f"/proc/{pid}/environ", 1 << 20)
    out: dict[str, str] = {}
    if raw:
        for item in raw.split(b"\0"):
            key, sep, value = item.partition(b"=")
            if sep:
                out[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return out


def _find_gitdir(start: Path) -> Path | None:
    """The git dir for ``start``, looking upward; None when there is none, or when a folder on
    the way cannot be searched (a pane in the agent user's 0700 home, seen by the daemon's
    user): that reads as no branch, without skipping up to a repository further out."""
    for folder in (start, *start.parents):
        dotgit = folder / ".git"
        try:
            mode = dotgit.stat().st_mode
        except OSError as exc:
            if exc.errno in _ABSENT:
                continue
            return None
        if S_ISDIR(mode):
            return dotgit
        if S_ISREG(mode):
            raw = _read(str(dotgit), 4096)
            text = raw.decode("utf-8", "replace").strip() if raw else ""
            if text.startswith("gitdir:"):
                target = Path(text[7:].strip())
                return target if target.is_absolute() else (folder / target).resolve()
            return None
    return None
