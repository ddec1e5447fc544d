"""The fleet directory: one entry per tmux pane, the thing everything else routes on.

Theory of operation
-------------------
The watcher (``daemon.tmux.watcher``) tells the directory what tmux shows, through four
calls: ``server_status`` (running or not), ``panes_listed`` (the full pane list: entries for
panes not in it are removed), ``pane_captured`` (a pane's metadata and fresh screen text) and
``pane_gone``. The directory adds what the host knows (harness from the process tree, git
branch, Claude's status file: a ``Probe``), classifies the screen with the pure parsers in
``daemon.screens`` and keeps per pane:

* an **incarnation** token it issues: a keyed hash of the pane id, the pane's process and the
  harness process (pid + start time) under a per-daemon secret. A recycled ``%N``, or a new
  harness process in the same pane, is a new incarnation and a fresh entry (no history,
  events or PR links carry over);
  a pane whose process ended but which tmux keeps (remain-on-exit) stays the same
  incarnation and harness, now ``exited``, from the first capture after /proc stops knowing
  the process (tmux's dead flag, or its news of a respawned process, may come later): its
  last screen is never read as a live agent's. Nor is a stranger's: while tmux's report
  lags, the dead process's pid can already be another process's (pids wrap, at 32768 on
  many hosts); one whose parent is not the pane's first parent (tmux's server, which forks
  every pane process, a respawned one too) is not the pane's, and the pane reads exited;
* the parsed reading (state, composer_empty, title, summary), cwd, branch, PR links seen on
  this incarnation's screens (latest last, bounded), workstream handles (PR links, title);
* a **screen revision** that increments whenever the screen text changes, and the time of
  that change (last activity);
* recent events (appeared, state and title transitions, harness changes) in a bounded ring;
* whether it is **stale**: the watcher lost the pane's control client (``panes_stale``), so
  its screen and reading are as last seen, not current. Only a new capture clears it (a
  listing does not: it says the pane exists, not what it shows).

Evidence besides the screen can change while the screen does not (Claude Code's status file
says ``idle`` a moment after the screen showed the idle composer): ``reread_evidence()``,
called about once a second (and for one pane by a wait that cannot lag it), classifies such
panes again, so no state waits for the next screen change.

Readers use ``snapshot()``, ``pane(id)``, ``resolve_handle(handle)`` and ``changes()``; the
per-pane ``send_lock(id)`` linearizes everything that types into a pane. Time comes from the
injected clock; nothing here does tmux I/O.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from openbus.daemon.core.names import event_words
from openbus.daemon.directory_probe import Detected, ProcIdentity
from openbus.daemon.screens import ClaudeStatus, Evidence, Reading, parse, parser_name, rule_of
from openbus.daemon.screens.base import screen_lines
from openbus.daemon.screens.claude import BUSY_ON_STATUS_FILE
from openbus.daemon.tmux.adapter import PaneInfo
from openbus.kernel.clock import Clock
from openbus.kernel.errors import BadRequest, NotFound
from openbus.kernel.ids import check_pane_id

log = logging.getLogger(__name__)

EVENTS_KEPT = 32
PR_LINKS_KEPT = 10
BRANCH_EVERY = 3.0  # seconds between git branch reads for a pane whose screen keeps changing
BRANCH_RECHECK = 60.0  # ... and for a pane whose screen stands still (a checkout made elsewhere)
_SUBSCRIBER_QUEUE = 1024


class Probe(Protocol):
    def detect(self, pane_pid: int, *, walk_now: bool = False) -> Detected: ...

    def owed(self) -> set[int]: ...

    def git_branch(self, cwd: str) -> str | None: ...

    def claude_status(self, process: ProcIdentity) -> ClaudeStatus | None: ...


@dataclass(frozen=True)
class Change:
    kind: str  # "added" | "updated" | "removed" | "server" | "resync"
    pane_id: str | None
    version: int


@dataclass
class Entry:
    pane_id: str
    incarnation: str
    harness: str
    pane_process: ProcIdentity
    process: ProcIdentity
    created: float
    pane_parent: int  # the pane's process's parent (tmux's server) when first seen; 0: unknown
    info: PaneInfo
    branch: str | None = None
    reading: Reading = field(default_factory=lambda: Reading("unknown"))
    text: str | None = None
    revision: int = 0
    branch_read: float = float("-inf")
    last_activity: float = 0.0
    pr_links: list[str] = field(default_factory=list)
    ended: bool = False  # the pane's process is gone (dead, or tmux has not said so yet)
    status: ClaudeStatus | None = None  # Claude's status file as last read
    stale: str | None = None  # why the screen is not current, while it is not
    events: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=EVENTS_KEPT))
    _dict: dict[str, Any] | None = None

    @property
    def state(self) -> str:
        return self.reading.state

    @property
    def title(self) -> str | None:
        return self.reading.title

    def handles(self) -> dict[str, Any]:
        return {"pr": list(self.pr_links), "title": self.reading.title}

    def to_dict(self) -> dict[str, Any]:
        if self._dict is None:
            info = self.info
            self._dict = {
                "pane": self.pane_id,
                "incarnation": self.incarnation,
                "harness": self.harness,
                "state": self.reading.state,
                "composer_empty": self.reading.composer_empty,
                "title": self.reading.title,
                "summary": self.reading.summary,
                "menu": self.reading.menu.to_dict() if self.reading.menu else None,
                "cwd": info.cwd,
                "branch": self.branch,
                "pr_links": list(self.pr_links),
                "handles": self.handles(),
                "revision": self.revision,
                "last_activity": self.last_activity,
                "pid": self.process.pid,
                "pane_pid": info.pid,
                "command": info.current_command,
                "session": info.session_name,
                "window": {
                    "id": info.window_id,
                    "index": info.window_index,
                    "name": info.window_name,
                },
                "size": [info.width, info.height],
                "dead": info.dead,
                "stale": self.stale is not None,
            }
        return self._dict

    def detail(self, now: float | None = None) -> dict[str, Any]:
        events = [{**event, "text": event_words(event)} for event in self.events]
        return {**self.to_dict(), "events": events, "explain": self.explain(now)}

    def explain(self, now: float | None = None) -> dict[str, Any]:
        """Why the pane reads as it does: the parser, its rule, the evidence that rule weighed
        (screen lines, Claude's status file, tmux, the process tree) and what would change
        the reading."""
        reading, info = self.reading, self.info
        rule = rule_of(self.harness, reading.rule)
        if self.process == self.pane_process:
            found = f"the pane's own process (pid {self.process.pid})"
        else:
            found = f"pid {self.process.pid}, below the pane's process (pid {info.pid})"
        status = self.status
        still = None if now is None else round(max(0.0, now - self.last_activity), 1)
        return {
            "parser": parser_name(self.harness),
            "rule": reading.rule or None,
            "because": rule.because if rule else "no screen captured yet",
            "would_change": rule.changes if rule else "the pane's first capture",
            "evidence": {
                "screen": {"lines": list(reading.lines), "revision": self.revision, "still": still},
                "status_file": (
                    None
                    if status is None
                    else {"status": status.status, "waiting_for": status.waiting_for}
                ),
                "process": {"harness": self.harness, "found": found, "gone": self.ended},
                "tmux": {"dead": info.dead, "title": info.title, "in_mode": info.in_mode},
            },
        }


def _sort_key(entry: Entry) -> tuple[str, int, int]:
    return (entry.info.session_name, entry.info.window_index, int(entry.pane_id[1:]))


class Directory:
    def __init__(
        self, clock: Clock, secret: bytes, probe: Probe, *, socket: str = "", hostname: str = ""
    ) -> None:
        if len(secret) < 16:
            raise ValueError("the incarnation secret must be at least 16 bytes")
        self.clock = clock
        self._secret = secret
        self.probe = probe
        self.socket = socket
        self.hostname = hostname
        self._entries: dict[str, Entry] = {}
        self._failing: dict[str, str] = {}  # pane -> the probe error last logged for it
        self._locks: dict[str, asyncio.Lock] = {}
        self._subscribers: set[asyncio.Queue[Change]] = set()
        self._listeners: list[Callable[[Change], None]] = []
        self.version = 0
        self.server_running = False
        self.server_detail: str | None = "not checked yet"
        self.server_since = clock.now()
        self._snapshot: dict[str, Any] | None = None
        self._snapshot_json: bytes | None = None
        self._sorted: list[Entry] | None = None  # entries in listing order, until a change
        self._branches_checked = clock.monotonic()

    # ------------------------------------------------------------------ reads

    def snapshot(self) -> dict[str, Any]:
        """Every pane plus the tmux server's status. The same object until the next change."""
        if self._snapshot is None:
            entries = sorted(self._entries.values(), key=_sort_key)
            self._snapshot = {
                "tmux": self.server(),
                "version": self.version,
                "panes": [e.to_dict() for e in entries],
            }
        return self._snapshot

    def snapshot_json(self) -> bytes:
        if self._snapshot_json is None:
            self._snapshot_json = json.dumps(self.snapshot(), separators=(",", ":")).encode()
        return self._snapshot_json

    def server(self) -> dict[str, Any]:
        return {
            "running": self.server_running,
            "status": "running" if self.server_running else "not running",
            "socket": self.socket,
            "detail": self.server_detail,
            "since": self.server_since,
        }

    def entries(self) -> list[Entry]:
        """Every entry in listing order (sorted once per change of the set of entries)."""
        if self._sorted is None:
            self._sorted = sorted(self._entries.values(), key=_sort_key)
        return list(self._sorted)

    def entry(self, pane_id: str) -> Entry:
        check_pane_id(pane_id)
        found = self._entries.get(pane_id)
        if found is None:
            raise NotFound(f"no pane {pane_id} in the directory", field="pane")
        return found

    def pane(self, pane_id: str) -> dict[str, Any]:
        """One pane with its recent events and why it reads as it does; ``NotFound`` naming
        the pane if unknown."""
        return self.entry(pane_id).detail(self.clock.now())

    def by_incarnation(self, incarnation: str) -> Entry | None:
        return next((e for e in self._entries.values() if e.incarnation == incarnation), None)

    def resolve_handle(self, handle: str) -> list[Entry]:
        """Entries a workstream handle addresses: a pane id, an incarnation, a PR link (full
        URL, ``owner/repo#N``, ``#N``) or a title (case-insensitive). Possibly several."""
        if not isinstance(handle, str) or not handle.strip():
            raise BadRequest("a handle must be a non-empty string", field="handle")
        wanted = handle.strip()
        if wanted.startswith("%"):
            found = self._entries.get(wanted)
            return [found] if found else []
        if wanted.startswith("inc_"):
            found = self.by_incarnation(wanted)
            return [found] if found else []
        key = _pr_key(wanted)
        folded = wanted.casefold()
        out: list[Entry] = []
        for entry in self.entries():
            by_pr = key is not None and any(_pr_matches(key, link) for link in entry.pr_links)
            title = entry.reading.title
            if by_pr or (title is not None and title.casefold() == folded):
                out.append(entry)
        return out

    def send_lock(self, pane_id: str) -> asyncio.Lock:
        """The pane's send lock: everything that types into the pane holds it."""
        lock = self._locks.get(pane_id)
        if lock is None:
            lock = self._locks[pane_id] = asyncio.Lock()
        return lock

    def listen(self, listener: Callable[[Change], None]) -> None:
        """Call ``listener`` with every change as it is published, before any reader of
        ``changes()`` runs (it must not block; the control feed wakes its waiters so)."""
        self._listeners.append(listener)

    async def changes(self) -> AsyncIterator[Change]:
        """Every change from now on, in order. A slow reader gets ``resync`` and should re-read."""
        queue: asyncio.Queue[Change] = asyncio.Queue(_SUBSCRIBER_QUEUE)
        self._subscribers.add(queue)
        try:
            while True:
                yield await queue.get()
        finally:
            self._subscribers.discard(queue)

    # ------------------------------------------------------------------ what the watcher tells

    def server_status(self, running: bool, detail: str | None = None) -> None:
        if running == self.server_running and detail == self.server_detail:
            return
        if running != self.server_running:
            self.server_since = self.clock.now()
        self.server_running = running
        self.server_detail = detail
        if not running:
            for pane_id in list(self._entries):
                self._remove(pane_id)
        self._publish("server", None)

    def panes_listed(self, infos: Iterable[PaneInfo]) -> None:
        seen: set[str] = set()
        for info in infos:
            seen.add(info.pane_id)
            self._upsert_one(info, None)
        for pane_id in [p for p in self._entries if p not in seen]:
            self._remove(pane_id)

    def pane_captured(self, info: PaneInfo, text: str) -> None:
        self._upsert_one(info, text)

    def _upsert_one(self, info: PaneInfo, text: str | None, *, walk_now: bool = False) -> None:
        """One pane's update. When a file its probe reads (``/proc``, ``.git``, a status file)
        fails, that pane keeps the entry it had (a new one waits for the next listing) and
        the rest of the fleet is updated all the same."""
        before = self._entries.get(info.pane_id)
        try:
            self._upsert(info, text, walk_now=walk_now)
            self._failing.pop(info.pane_id, None)
        except OSError as exc:
            if self._failing.get(info.pane_id) != str(exc):  # once per pane and error
                self._failing[info.pane_id] = str(exc)
                log.warning("pane %s not updated: %s", info.pane_id, exc)
            if before is None:
                self._entries.pop(info.pane_id, None)
            else:
                self._entries[info.pane_id] = before
            self._sorted = None

    def reprobe(self, pane_id: str) -> None:
        """Probe one known pane's processes again now, walking below them even when a walk put
        off holds: a launch whose command starts under a wrapper (sudo to a pool user) asks
        until it sees the harness."""
        entry = self._entries.get(pane_id)
        if entry is not None:
            self._upsert_one(entry.info, None, walk_now=True)

    def reprobe_owed(self) -> None:
        """Probe again the panes the probe owes a look at their processes (an answer given
        from a walk it put off): a harness that a launcher started is seen even when the
        pane's screen then stands still. Called about once a second."""
        owed = self.probe.owed()
        if owed:
            for entry in self.entries():
                if entry.info.pid in owed:
                    self._upsert_one(entry.info, None)

    def recheck_branches(self) -> None:
        """Read again the git branch of each pane not read for ``BRANCH_RECHECK`` seconds (a
        branch checked out from another pane in the same worktree changes this one's without a
        screen change here), one read per folder. Called about once a second; a pass at most
        every quarter of ``BRANCH_RECHECK``."""
        if self.clock.monotonic() - self._branches_checked < BRANCH_RECHECK / 4:
            return
        self._branches_checked = self.clock.monotonic()
        now = self.clock.now()
        read: dict[str, str | None] = {}
        for entry in list(self._entries.values()):
            if now - entry.branch_read < BRANCH_RECHECK:
                continue
            cwd = entry.info.cwd
            if cwd not in read:
                try:
                    read[cwd] = self.probe.git_branch(cwd)
                except OSError:
                    continue  # as it was, until a read succeeds
            entry.branch_read = now
            if read[cwd] != entry.branch:
                entry.branch = read[cwd]
                entry._dict = None
                self._publish("updated", entry.info.pane_id)

    def pane_gone(self, pane_id: str) -> None:
        if pane_id in self._entries:
            self._remove(pane_id)

    def panes_stale(self, pane_ids: Iterable[str], why: str) -> None:
        """These panes are no longer watched: their entries say so until a new capture."""
        now = self.clock.now()
        for pane_id in pane_ids:
            entry = self._entries.get(pane_id)
            if entry is None or entry.stale is not None:
                continue
            entry.stale = why
            entry.events.append({"time": now, "kind": "stale", "why": why})
            entry._dict = None
            self._publish("updated", pane_id)

    # ------------------------------------------------------------------ internals

    def _incarnation(self, pane_id: str, detected: Detected) -> str:
        pane, process = detected.pane, detected.process
        material = f"{pane_id}|{pane.pid}|{pane.start}|{process.pid}|{process.start}"
        digest = hmac.new(self._secret, material.encode(), hashlib.sha256).hexdigest()
        return "inc_" + digest[:32]

    def _detect(self, entry: Entry | None, info: PaneInfo, walk_now: bool) -> tuple[Detected, bool]:
        """The pane's processes, and whether the pane's own process has ended. When it has
        (tmux keeps the pane under remain-on-exit, or has not flagged it dead or told its new
        process yet, and /proc no longer knows the pid or a stranger holds it), the entry keeps
        the identity it had: that incarnation exited, none began."""
        if entry is None or info.pid != entry.pane_process.pid:
            return self.probe.detect(info.pid, walk_now=walk_now), False
        kept = Detected(entry.harness, entry.process, entry.pane_process, entry.pane_parent)
        if info.dead:
            return kept, True
        detected = self.probe.detect(info.pid, walk_now=walk_now)
        if detected.pane.start == 0 or _stranger(entry, detected):
            return kept, True
        return detected, False

    def _upsert(self, info: PaneInfo, text: str | None, *, walk_now: bool = False) -> None:
        now = self.clock.now()
        captured = text is not None
        entry = self._entries.get(info.pane_id)
        detected, ended = self._detect(entry, info, walk_now)
        if (
            entry is not None
            and entry.pane_process == detected.pane
            and entry.process == detected.process
        ):
            incarnation = entry.incarnation  # the same processes: no need to hash them again
        else:
            incarnation = self._incarnation(info.pane_id, detected)
        added = False
        if entry is None or entry.incarnation != incarnation:
            previous = entry
            entry = Entry(
                pane_id=info.pane_id,
                incarnation=incarnation,
                harness=detected.harness,
                pane_process=detected.pane,
                process=detected.process,
                created=now,
                pane_parent=detected.parent,
                info=info,
                last_activity=now,
            )
            entry.events.append({"time": now, "kind": "appeared", "harness": detected.harness})
            if previous is not None:
                entry.events.append(
                    {
                        "time": now,
                        "kind": "incarnation",
                        "from": previous.harness,
                        "to": detected.harness,
                    }
                )
                if text is None:
                    text = previous.text
                    entry.stale = previous.stale  # the carried screen is no more current
            self._entries[info.pane_id] = entry
            self._sorted = None
            added = True
        changed = added or info != entry.info or ended != entry.ended
        entry.ended = ended
        # the branch is re-read on a listing, a new cwd, or a capture BRANCH_EVERY seconds on
        read_branch = (
            text is None
            or added
            or info.cwd != entry.info.cwd
            or now - entry.branch_read >= BRANCH_EVERY
        )
        if detected.harness not in ("unknown", entry.harness):
            # The same processes, recognized only now (first seen before their exec): not a
            # new incarnation, but the harness (and so the parser) changes.
            entry.events.append(
                {"time": now, "kind": "harness", "from": entry.harness, "to": detected.harness}
            )
            entry.harness = detected.harness
            changed = True
        entry.info = info
        if read_branch:
            entry.branch_read = now
            branch = self.probe.git_branch(info.cwd)
            if branch != entry.branch:
                entry.branch = branch
                changed = True
        if captured and entry.stale is not None:
            entry.stale = None
            entry.events.append({"time": now, "kind": "fresh"})
            changed = True
        if text is not None:
            normalized = "\n".join(screen_lines(text))
            if normalized != entry.text:
                entry.text = normalized
                entry.revision += 1
                entry.last_activity = now
                changed = True
        if changed:
            self._classify(entry, now)
            entry._dict = None
            self._publish("added" if added else "updated", info.pane_id)

    def reread_evidence(self, pane_id: str | None = None) -> bool:
        """Classify again each pane (or just ``pane_id``) whose reading weighs more than its
        screen (Claude Code's status file, how long the screen has stood still), where that
        evidence may have changed while the screen did not: a status file that changed, or a
        busy or unknown reading that stillness or the status file can settle. Called every
        second or so by the feature, so a source that went silent never freezes a state; and
        for one pane by a wait that must not lag the status file by that second (a new
        agent's first idle, ``LaunchService.until_ready``). True while some pane reads busy
        on its status file alone under an idle-looking screen: Claude Code writes the file a
        moment after it draws the idle composer, so the caller asks again soon rather than
        leave the pane busy for a second more."""
        now = self.clock.now()
        disputed = False
        if pane_id is None:
            entries = list(self._entries.values())
        else:
            entries = [e for e in (self._entries.get(pane_id),) if e is not None]
        for entry in entries:
            if entry.harness != "claude" or entry.text is None:
                continue
            try:
                status = self.probe.claude_status(entry.process)
            except OSError:
                continue
            if status == entry.status and entry.state not in ("busy", "unknown"):
                continue
            if self._classify(entry, now, status):
                entry._dict = None
                self._publish("updated", entry.pane_id)
            disputed = disputed or entry.reading.rule == BUSY_ON_STATUS_FILE
        return disputed

    def _classify(self, entry: Entry, now: float, status: ClaudeStatus | None = None) -> bool:
        info = entry.info
        if status is None and entry.harness == "claude":
            status = self.probe.claude_status(entry.process)
        entry.status = status
        evidence = Evidence(
            harness=entry.harness,
            pane_title=info.title,
            hostname=self.hostname,
            dead=info.dead or entry.ended,
            in_mode=info.in_mode,
            claude_status=status,
            screen_still=now - entry.last_activity,
            screen_changed=entry.last_activity,
        )
        if entry.text is None:
            state = (
                "exited"
                if info.dead or entry.ended
                else ("shell" if entry.harness == "shell" else "unknown")
            )
            reading = Reading(state)  # type: ignore[arg-type]
        else:
            reading = parse(entry.text, evidence)
        before = entry.reading
        if reading == before:
            return False
        if reading.state != before.state:
            entry.events.append(
                {"time": now, "kind": "state", "from": before.state, "to": reading.state}
            )
        if reading.title != before.title:
            entry.events.append(
                {"time": now, "kind": "title", "from": before.title, "to": reading.title}
            )
        for link in reading.pr_links:
            if link in entry.pr_links:
                entry.pr_links.remove(link)
            entry.pr_links.append(link)
        del entry.pr_links[:-PR_LINKS_KEPT]
        entry.reading = reading
        return True

    def _remove(self, pane_id: str) -> None:
        self._entries.pop(pane_id, None)
        self._sorted = None
        self._failing.pop(pane_id, None)
        lock = self._locks.get(pane_id)
        if lock is not None and not lock.locked():
            del self._locks[pane_id]
        self._publish("removed", pane_id)

    def _publish(self, kind: str, pane_id: str | None) -> None:
        self.version += 1
        self._snapshot = None
        self._snapshot_json = None
        self._sorted = None
        change = Change(kind, pane_id, self.version)
        for listener in self._listeners:
            try:
                listener(change)
            except Exception:
                log.exception("a directory listener failed on %s", change)
        for queue in list(self._subscribers):
            try:
                queue.put_nowait(change)
            except asyncio.QueueFull:
                while not queue.empty():
                    queue.get_nowait()
                queue.put_nowait(Change("resync", None, self.version))


def _stranger(entry: Entry, detected: Detected) -> bool:
    """The pid tmux reports for the entry's pane is held by another process that tmux's
    server did not start: the pane's own process ended and its pid was given out again."""
    return detected.pane != entry.pane_process and entry.pane_parent not in (0, detected.parent)


def _pr_key(handle: str) -> tuple[str | None, str] | None:
    """(owner/repo or None, number) for a PR-looking handle."""
    text = handle.strip()
    if text.startswith("http"):
        parts = text.rstrip("/").split("/")
        if len(parts) >= 7 and parts[-2] in ("pull", "merge_requests"):
            repo_parts = parts[3:-2]
            if repo_parts and repo_parts[-1] == "-":
                repo_parts = repo_parts[:-1]
            return "/".join(repo_parts).lower(), parts[-1]
        return None
    repo, sep, number = text.rpartition("#")
    if not sep:
        repo, sep, number = text.rpartition("!")
    if sep and number.isdigit():
        return (repo.lower() or None), number
    return None


def _pr_matches(key: tuple[str | None, str], link: str) -> bool:
    other = _pr_key(link)
    if other is None or other[1] != key[1]:
        return False
    return key[0] is None or other[0] is None or key[0] == other[0]
