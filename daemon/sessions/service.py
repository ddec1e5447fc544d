"""Session tools in the daemon: an agent starts, lists, reads and messages its own children.

Theory of operation
-------------------
The rules are in ``core.sessions`` (pure); this feature wires them to the daemon. Its gate
actions (scope ``spawn``, never human):

* ``session.start``: the caller must hold a principal; ``host`` is refused (this box only).
  The launcher (default: the caller's own) must be a structured launcher Connect can reach;
  the folder (default: the caller's) is resolved, and a ``worktree`` repository is checked
  (a checkout filter refuses it) before ``core.sessions.admit`` judges limits, preset, full
  access and the folder. Unless the human gave this agent "may start sessions" (approval kind
  ``spawn``, set by the human action ``sessions.allow`` and dying with the grant), the start
  is a card in Needs you and the call answers ``waiting_for_consent`` with the start's id;
  approving the card launches it (the system action ``session.launch``). Either way the
  launch runs through ``LaunchService.open`` in one gate call whose single record names the
  parent, child, launcher, folder, worktree and what allowed it; the spawned-by tag (table
  ``spawns``) and the parent->child pair approval are written in that call's transaction, so
  a child never exists untagged. The brief is then sent as a message from the parent
  (``message.send``) once the child is ready for it (``core.sessions.brief_ready``: idle,
  empty composer, Claude Code's status idle, screen still for a short settle), typed through
  the one keystroke path, under the daemon's provenance line naming the parent.
* ``session.list``: live agent panes (and with ``status`` ended sessions from the history
  index) without the caller; outside the family only harness, folder and state; family rows
  add the title and the last reply (masked, cut at 1 KiB); the caller's pending starts; the
  launchers ``session.start`` accepts. A caller with no family and no pending start gets
  rows that follow the directory alone: its listing is kept until the directory changes, and
  the same answer object lets the MCP endpoint reuse its wire form.
* ``session.read``: family only; the child's replies from its transcript
  (``history.replies``), masked, each cut at 16 KiB with the cut marked. ``wait_seconds``
  (at most 50) waits for a start to settle, or for the child to be idle with a reply newer
  than the caller last read, else answers ``timedOut`` with a hint to call again.
* ``session.send``: family only; the messaging service's ``send`` on this same call (one
  record), so ids, idle-only delivery, confirmation and hop limits are messaging's own.

Revocation (``Connect.on_revocation``): a parent narrowed below Collaborate has its pending
starts cancelled (their cards too) and its waits ended; its messages are cancelled by
messaging; its family reach ends with its ``spawn`` scope. Children keep their own grants.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from openbus.daemon.cards import Cards
from openbus.daemon.config import Config, Launcher
from openbus.daemon.connect import Connect
from openbus.daemon.core.actions import Action
from openbus.daemon.core.actors import SYSTEM
from openbus.daemon.core.consent import Approval, ApprovalKind, Card, CardState, Tier
from openbus.daemon.core.sessions import (
    Family,
    SpawnLedger,
    SpawnLimits,
    Start,
    StartRequest,
    StartState,
    Trust,
    TrustMark,
    admit,
    brief_line,
    cut,
    full_access,
    worktree_name,
)
from openbus.daemon.directory import Directory
from openbus.daemon.feature import Feature
from openbus.daemon.gate import Call, Gate
from openbus.daemon.grants import Grants, Principal
from openbus.daemon.history.index import HistoryIndex
from openbus.daemon.history.replies import ReplyReader
from openbus.daemon.launch import LaunchService
from openbus.daemon.launch_plan import check_cwd, connect_unavailable
from openbus.daemon.mcp.masking import Masker
from openbus.daemon.messaging.service import MessagingService
from openbus.daemon.sessions import trust, worktree
from openbus.daemon.state import StateDB
from openbus.kernel.clock import Clock, Random
from openbus.kernel.errors import BadRequest, Forbidden, NotConnected, NotFound, OpenbusError
from openbus.kernel.ids import is_pane_id
from openbus.kernel.scopes import Preset, Scope

log = logging.getLogger("openbus.sessions")

START = Action("session.start", Scope.SPAWN, Tier.CARD, outside_effects=True, humans=False)
LAUNCH_CHILD = Action("session.launch", Scope.SPAWN, Tier.CARD, outside_effects=True, humans=False)
LIST = Action("session.list", Scope.SPAWN, Tier.READ, humans=False)
READ = Action("session.read", Scope.SPAWN, Tier.READ, humans=False)
SEND = Action("session.send", Scope.SPAWN, Tier.CARD, outside_effects=True, humans=False)
ALLOW = Action("sessions.allow", tier=Tier.HUMAN, outside_effects=True)
FAMILY = Action("sessions.family", tier=Tier.HUMAN)
FAMILIES = Action("sessions.families", tier=Tier.HUMAN)

MAX_WAIT_SECONDS = 50.0
REPLY_BYTES = 16 * 1024
LAST_MESSAGE_BYTES = 1024
MAX_BRIEF_CHARS = 32 * 1024
POLL_SECONDS = 0.25
MAX_LIST = 200
KEPT_STARTS = 1000
KEPT_LISTINGS = 1000  # callers whose last family-less listing is kept for its next call
AGENT_HARNESSES = ("claude", "codex", "opencode", "omp", "gemini")


@dataclass
class Pending:
    """What a start needs to launch once it is allowed."""

    start: Start
    owner: str
    parent_actor: str
    launcher: Launcher
    preset: Preset
    cwd: Path
    brief: str
    title: str | None
    repo: worktree.Repo | None
    allowed_by: str
    done: asyncio.Event


class SessionTools(Feature):
    name = "sessions"

    def __init__(
        self,
        *,
        config: Config,
        gate: Gate,
        grants: Grants,
        cards: Cards,
        connect: Connect,
        launch: LaunchService,
        messaging: MessagingService,
        directory: Directory,
        history: HistoryIndex,
        db: StateDB,
        clock: Clock,
        random: Random,
    ) -> None:
        self.config = config
        self.gate = gate
        self.grants = grants
        self.cards = cards
        self.launch = launch
        self.messaging = messaging
        self.directory = directory
        self.history = history
        self.db = db
        self.clock = clock
        self.random = random
        s = config.sessions
        self.ledger = SpawnLedger(SpawnLimits(s.max_children, s.starts_per_hour))
        self.masker = Masker()
        self.replies = ReplyReader()
        self._spawned_by: dict[str, str] = {}
        self._starts: dict[str, Pending] = {}
        self._seen: dict[tuple[str, str], int] = {}  # (reader, child) -> replies read
        # caller -> (what its last listing hung on, that listing): for a caller with no family
        self._listed: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {}
        self._revoked: dict[str, asyncio.Event] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.started = 0
        cards.listeners.append(self._on_card)
        gate.register(START, self.start_session)
        gate.register(LAUNCH_CHILD, self._launch_approved)
        gate.register(LIST, self.list_sessions)
        gate.register(READ, self.read_session)
        gate.register(SEND, self.send_to_session)
        gate.register(ALLOW, self.allow)
        gate.register(FAMILY, self.family_of_pane)
        gate.register(FAMILIES, self.families)
        connect.on_revocation(self.on_revocation)

    # ------------------------------------------------------------------ feature

    async def start(self) -> None:
        rows = self.db.conn.execute("SELECT child, parent FROM spawns").fetchall()
        self._spawned_by = {str(c): str(p) for c, p in rows}
        for card in self.cards.listing(pending_only=True, limit=100_000):
            if card.kind == "start_session":  # its start died with the last process
                cancelled = card.cancel(self.clock.now())
                draft, writes = self.cards.resolution_record(cancelled)
                self.gate.record(draft, writes)

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def health(self) -> dict[str, Any]:
        pending = sum(1 for p in self._starts.values() if not p.start.state.final)
        return {"children": len(self._spawned_by), "pending_starts": pending}

    @property
    def family(self) -> Family:
        return Family(self._spawned_by)

    def pane_section(self, pane: str) -> dict[str, Any]:
        """A pane's family for the human's pane detail: its parent and children."""
        principals = self.grants.by_pane(pane)
        if not principals:
            return {"family": None}
        me = principals[0].id
        return {"family": self._family_rows(me)}

    def _family_rows(self, me: str) -> dict[str, Any]:
        family = self.family
        parent = family.parent(me)
        return {
            "principal": me,
            "parent": self._brief_row(parent) if parent else None,
            "children": [self._brief_row(c) for c in family.children(me)],
        }

    def _brief_row(self, principal_id: str) -> dict[str, Any]:
        try:
            p = self.grants.get(principal_id)
        except NotFound:
            return {"principal": principal_id}
        return {
            "principal": p.id,
            "pane": p.pane_id,
            "harness": p.harness,
            "state": p.state,
            "session_id": p.session_id,
        }

    # ------------------------------------------------------------------ helpers

    def _caller(self, call: Call) -> Principal:
        if call.actor.principal is None:
            raise NotConnected("not connected: this agent has no openbus grant")
        return self.grants.get(call.actor.principal)

    def _caller_cwd(self, caller: Principal) -> Path | None:
        known = self.launch.cwd_of(caller.id)
        if known:
            return Path(known)
        if caller.pane_id:
            with contextlib.suppress(OpenbusError):
                cwd = self.directory.entry(caller.pane_id).info.cwd
                if cwd:
                    return Path(cwd)
        if caller.pid:
            with contextlib.suppress(OSError):
                return Path(os.readlink(f"/proc/{caller.pid}/cwd"))
        return None

    def _marks(self) -> list[TrustMark]:
        marks = [
            TrustMark(PurePosixPath(os.path.realpath(p)), Trust.TRUSTED, "[sessions] trusted_dirs")
            for p in self.config.sessions.trusted_dirs
        ]
        marks.append(
            TrustMark(
                PurePosixPath(os.path.realpath(self.config.sessions.worktrees_root)),
                Trust.TRUSTED,
                "openbus worktrees",
            )
        )
        marks += trust.harness_marks(self.config)
        return marks

    def _launcher_for(self, value: object, caller: Principal) -> Launcher:
        name = value if value not in (None, "") else (caller.launcher or caller.harness)
        if not isinstance(name, str):
            raise BadRequest("launcher must be a launcher's name", field="launcher")
        launcher = self.config.launchers.get(name)
        if launcher is None:
            raise BadRequest(
                f"no launcher named {name!r} (accepted: {', '.join(self._accepted())})",
                field="launcher",
            )
        reason = connect_unavailable(launcher)
        if reason is not None:
            raise BadRequest(
                f"{reason}; a child session must be connectable to be reached", field="launcher"
            )
        return launcher

    def _accepted(self) -> list[str]:
        return sorted(
            name
            for name, launcher in self.config.launchers.items()
            if connect_unavailable(launcher) is None
        )

    def _resolve(self, caller: Principal, value: object) -> tuple[str, Principal | None]:
        """The family member ``value`` names (pane id, principal, session id or start id)."""
        if not isinstance(value, str) or not value:
            raise BadRequest(
                "session is required: a pane id like %12, a session id or a start id",
                field="session",
            )
        pending = self._starts.get(value)
        if pending is not None:
            if pending.start.parent != caller.id:
                raise Forbidden("that start is not yours", field="session")
            child = pending.start.child
            return value, self.grants.get(child) if child else None
        target: Principal | None = None
        if is_pane_id(value):
            found = self.grants.by_pane(value)
            target = found[0] if found else None
        elif value.startswith("p_"):
            with contextlib.suppress(NotFound):
                target = self.grants.get(value)
        else:
            for member in self.family.members(caller.id):
                with contextlib.suppress(NotFound):
                    p = self.grants.get(member)
                    if p.session_id == value:
                        target = p
        if target is None or not self.family.reaches(caller.id, target.id):
            raise Forbidden(
                f"{value} is not in your family (the sessions you started, the session that "
                "started you, and its other children)",
                field="session",
            )
        return target.id, target

    def _wake_event(self, principal: str) -> asyncio.Event:
        return self._revoked.setdefault(principal, asyncio.Event())

    # ------------------------------------------------------------------ start

    async def start_session(self, call: Call) -> Any:
        caller = self._caller(call)
        params = call.params
        if params.get("host") not in (None, ""):
            raise BadRequest("host is not supported: sessions start on this box only", field="host")
        brief = params.get("prompt")
        if not isinstance(brief, str) or not brief.strip():
            raise BadRequest(
                "prompt (the child's self-contained brief) is required", field="prompt"
            )
        if len(brief) > MAX_BRIEF_CHARS:
            raise BadRequest(f"prompt is longer than {MAX_BRIEF_CHARS} characters", field="prompt")
        title = params.get("title")
        if title is not None and not isinstance(title, str):
            raise BadRequest("title must be text", field="title")
        want_tree = params.get("worktree", False)
        if not isinstance(want_tree, bool):
            raise BadRequest("worktree must be true or false", field="worktree")
        launcher = self._launcher_for(params.get("launcher"), caller)
        caller_cwd = self._caller_cwd(caller)
        given = params.get("cwd")
        cwd = check_cwd(given, None) if given not in (None, "") else caller_cwd
        if cwd is None:
            raise BadRequest("cwd is required: your own folder is not known", field="cwd")
        real = Path(os.path.realpath(cwd))
        call.target = str(real)
        call.details.update(
            {"launcher": launcher.name, "harness": launcher.harness, "cwd": str(real)}
        )
        caller_launcher = self.config.launchers.get(caller.launcher or "")
        caller_full = (
            full_access(caller_launcher.harness, caller_launcher.argv, caller_launcher.env)
            if caller_launcher is not None
            else None
        )
        admission = admit(
            StartRequest(
                parent=caller.id,
                caller_preset=caller.preset,
                cap=self.grants.cap_for(caller.owner),
                caller_full_access=caller_full,
                harness=launcher.harness,
                argv=launcher.argv,
                env=launcher.env,
                cwd=PurePosixPath(real),
                caller_cwd=PurePosixPath(os.path.realpath(caller_cwd)) if caller_cwd else None,
                marks=self._marks(),
            ),
            self.ledger,
            self.clock.now(),
        )
        repo = await worktree.check(real) if want_tree else None
        call.details.update(
            {
                "preset": admission.preset.value,
                "folder_rule": admission.folder.source,
                "worktree": want_tree,
            }
        )
        start_id = "s_" + self.random.token_bytes(6).hex()
        allowed = self.cards.has(Approval(ApprovalKind.SPAWN, caller.id, "*"))
        start = Start(start_id, caller.id, StartState.APPROVED if allowed else StartState.CONSENT)
        pending = Pending(
            start=start,
            owner=caller.owner,
            parent_actor=call.actor.name,
            launcher=launcher,
            preset=admission.preset,
            cwd=real,
            brief=brief,
            title=title,
            repo=repo,
            allowed_by="approval: may start sessions" if allowed else "",
            done=asyncio.Event(),
        )
        call.details["start"] = start_id
        self.ledger.admitted(caller.id, self.clock.now())
        self._starts[start_id] = pending
        if allowed:
            try:
                result = await self._launch(call, pending)
            except BaseException:
                self._starts.pop(start_id, None)
                raise
            return result
        kind = {"claude": "Claude", "codex": "Codex"}.get(launcher.harness, launcher.harness)
        card, write = self.cards.new(
            kind="start_session",
            requester=call.actor.name,
            owner=caller.owner,
            summary=f"{call.actor.name} wants to start a {kind} session in {real}"
            + (" (in a new worktree)" if want_tree else "")
            + f": {brief_line(brief)}",
            target=str(real),
            requester_principal=caller.id,
            payload={"start": start_id, "launcher": launcher.name, "worktree": want_tree},
        )
        start.card = card.id
        pending.allowed_by = f"card {card.id}"
        call.write(write)
        call.outcome = "card"
        call.details["card"] = card.id

        def raised() -> None:
            self.cards.notify(card)

        call.after_commit.append(raised)
        return self._start_view(pending)

    def _start_view(self, pending: Pending) -> dict[str, Any]:
        start = pending.start
        body: dict[str, Any] = {"start": start.id, "state": start.state.value}
        if start.card:
            body["card"] = start.card
        if start.state is StartState.CONSENT:
            body["waiting_for"] = (
                "the human's consent (a card in Needs you); read_session with this start id "
                "and wait_seconds tells you when it started"
            )
        if start.reason:
            body["reason"] = start.reason
        body.update(start.result)
        return body

    def _on_card(self, card: Card) -> None:
        if card.kind != "start_session":
            return
        pending = self._starts.get(str(card.payload.get("start")))
        if pending is None or pending.start.state is not StartState.CONSENT:
            return
        start = pending.start
        if card.state is CardState.APPROVED:
            start.move(StartState.APPROVED)
            task = asyncio.get_running_loop().create_task(self._run_launch(start.id))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return
        moves = {
            CardState.DECLINED: (StartState.DECLINED, "the human declined the start"),
            CardState.EXPIRED: (StartState.EXPIRED, "the consent card expired unanswered"),
            CardState.CANCELLED: (StartState.CANCELLED, "the consent card was cancelled"),
        }
        if card.state in moves:
            state, reason = moves[card.state]
            start.move(state, reason)
            self.ledger.settled(start.parent, None)
            pending.done.set()

    async def _run_launch(self, start_id: str) -> None:
        try:
            await self.gate.run(SYSTEM, LAUNCH_CHILD.name, {"start": start_id})
        except OpenbusError as exc:
            log.warning("start %s failed: %s", start_id, exc.message)
        except Exception:
            log.exception("start %s failed", start_id)

    async def _launch_approved(self, call: Call) -> Any:
        pending = self._starts.get(str(call.params.get("start")))
        if pending is None or pending.start.state is not StartState.APPROVED:
            raise NotFound("no approved start by that id", field="start")
        call.details["parent_actor"] = pending.parent_actor
        return await self._launch(call, pending)

    async def _launch(self, call: Call, pending: Pending) -> dict[str, Any]:
        start = pending.start
        start.move(StartState.LAUNCHING)
        tree: worktree.Worktree | None = None
        try:
            cwd = pending.cwd
            if pending.repo is not None:
                name = worktree_name(pending.title, "session-" + start.id[2:])
                tree = await worktree.create(
                    pending.repo, self.config.sessions.worktrees_root, name
                )
                cwd = tree.path
                call.details.update(
                    {"worktree_path": str(tree.path), "branch": tree.branch, "base": tree.base}
                )
            self.grants.get(start.parent)  # the parent still exists
            if not self.grants.get(start.parent).active:
                raise NotConnected("the parent's grant was withdrawn before the start")
            result = await self.launch.open(
                call,
                owner=pending.owner,
                launcher=pending.launcher,
                preset=pending.preset,
                prompt=None,
                cwd=cwd,
            )
            child = result["connect"]["principal"]
            if not child:
                raise OpenbusError("the child could not be connected")
        except BaseException as exc:
            start.move(StartState.FAILED, str(exc) if isinstance(exc, OpenbusError) else None)
            self.ledger.settled(start.parent, None)
            pending.done.set()
            if tree is not None and pending.repo is not None:
                with contextlib.suppress(Exception):
                    await worktree.remove(pending.repo.top, tree)
            raise
        start.child = child
        call.details.update(
            {
                "parent": start.parent,
                "child": child,
                "allowed_by": pending.allowed_by,
                "start": start.id,
            }
        )
        call.write(self._tag(child, start.parent, pending.allowed_by, tree))
        call.write(self.cards.approve(Approval(ApprovalKind.PAIR, start.parent, child), start.card))
        view = {
            "pane": result["pane"],
            "incarnation": result["incarnation"],
            "principal": child,
            "session_id": result["connect"]["session_id"],
            "harness": result["harness"],
            "launcher": result["launcher"],
            "cwd": result["cwd"],
        }
        if tree is not None:
            view["worktree"] = {"path": str(tree.path), "branch": tree.branch, "base": tree.base}

        def bound() -> None:
            self._spawned_by[child] = start.parent
            start.result.update(view)
            start.move(StartState.BOUND)
            self.ledger.settled(start.parent, child)
            self.started += 1
            pending.done.set()

        call.after_commit.append(bound)
        call.after_commit_async.append(lambda: self._send_brief(pending))
        return {"start": start.id, "state": StartState.BOUND.value, **view}

    def _tag(
        self, child: str, parent: str, allowed_by: str, tree: worktree.Worktree | None
    ) -> Callable[[sqlite3.Connection], None]:
        now = self.clock.now()

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO spawns (child, parent, allowed_by, worktree, branch, created) "
                "VALUES (?,?,?,?,?,?)",
                (
                    child,
                    parent,
                    allowed_by,
                    str(tree.path) if tree else None,
                    tree.branch if tree else None,
                    now,
                ),
            )

        return write

    async def _send_brief(self, pending: Pending) -> None:
        start = pending.start
        ready = await self.launch.until_ready(
            str(start.result["pane"]), str(start.result["incarnation"]), start.child
        )
        if ready != "ready":
            log.info(
                "start %s: the child was not seen ready (%s); briefing anyway", start.id, ready
            )
        try:
            parent = self.grants.get(start.parent)
            answer = await self.gate.run(
                parent.actor(),
                "message.send",
                {
                    "target": start.result["pane"],
                    "incarnation": start.result["incarnation"],
                    "text": pending.brief,
                    "message_id": f"brief-{start.id}",
                },
            )
            start.result["brief"] = {
                "message_id": answer["message_id"],
                "outcome": "queued",
                "child": ready,
            }
        except OpenbusError as exc:
            start.result["brief"] = {"outcome": "refused", "reason": exc.message}
            log.warning("the brief of start %s was refused: %s", start.id, exc.message)

    # ------------------------------------------------------------------ list

    async def list_sessions(self, call: Call) -> Any:
        caller = self._caller(call)
        params = call.params
        mine = params.get("mine", False)
        if not isinstance(mine, bool):
            raise BadRequest("mine must be true or false", field="mine")
        status = params.get("status", "live")
        if status not in ("live", "ended", "all"):
            raise BadRequest("status must be live, ended or all", field="status")
        limit = params.get("limit", 50)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIST:
            raise BadRequest(f"limit must be between 1 and {MAX_LIST}", field="limit")
        family = self.family
        starts = [
            self._start_view(p)
            for p in self._starts.values()
            if p.start.parent == caller.id and not p.start.state.final
        ]
        alone = status == "live" and not starts and not family.members(caller.id)
        if alone:  # no row can be a family one: the rows follow the directory alone
            key = (caller.pane_id, mine, limit, self.directory.version)
            kept = self._listed.get(caller.id)
            if kept is not None and kept[0] == key:
                call.details["count"] = len(kept[1]["sessions"])
                return kept[1]  # the same object: the endpoint sends its wire form again
        rows: list[dict[str, Any]] = []
        live_sessions: set[str] = set()
        if status in ("live", "all"):
            on_pane: dict[str, Principal] = {}
            for active in self.grants.active():  # one query, not one a pane
                if active.pane_id:
                    on_pane.setdefault(active.pane_id, active)
            for entry in self.directory.entries():
                if entry.harness not in AGENT_HARNESSES or entry.pane_id == caller.pane_id:
                    continue
                principal = on_pane.get(entry.pane_id)
                if principal is not None and principal.id == caller.id:
                    continue
                relation = family.relation(caller.id, principal.id) if principal else None
                if mine and relation != "child":
                    continue
                row: dict[str, Any] = {
                    "pane": entry.pane_id,
                    "harness": entry.harness,
                    "cwd": entry.info.cwd,
                    "state": entry.state,
                }
                if relation is not None and principal is not None:
                    if principal.session_id:
                        live_sessions.add(principal.session_id)
                    row.update(
                        {
                            "relation": relation,
                            "incarnation": entry.incarnation,
                            "principal": principal.id,
                            "session_id": principal.session_id,
                            "branch": entry.branch,
                            "title": self.masker.mask(entry.title).text if entry.title else None,
                            "last_message": self._last_message(principal),
                        }
                    )
                rows.append(row)
                if len(rows) >= limit:
                    break
        if status in ("ended", "all") and not mine and len(rows) < limit:
            for ended in self.history.recent(limit):
                if ended.session_id in live_sessions or len(rows) >= limit:
                    continue
                rows.append(
                    {
                        "session_id": ended.session_id,
                        "harness": ended.harness,
                        "cwd": ended.cwd,
                        "state": "ended",
                    }
                )
        call.details["count"] = len(rows)
        result = {
            "sessions": rows,
            "pending_starts": starts,
            "launchers": self._accepted(),
            "harnesses": sorted({self.config.launchers[n].harness for n in self._accepted()}),
        }
        if alone:
            if len(self._listed) >= KEPT_LISTINGS:
                self._listed.clear()
            self._listed[caller.id] = (key, result)
        return result

    # ------------------------------------------------------------------ read

    def _wait_seconds(self, value: object) -> float:
        if value is None:
            return 0.0
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise BadRequest(
                f"wait_seconds must be a number of seconds (0 to {int(MAX_WAIT_SECONDS)})",
                field="wait_seconds",
            )
        return min(float(value), MAX_WAIT_SECONDS)

    async def read_session(self, call: Call) -> Any:
        caller = self._caller(call)
        params = call.params
        wait = self._wait_seconds(params.get("wait_seconds"))
        count = params.get("replies")
        if count is not None and (
            isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 50
        ):
            raise BadRequest("replies must be between 1 and 50", field="replies")
        deadline = time.monotonic() + wait
        key, child = self._resolve(caller, params.get("session"))
        call.target = key
        pending = self._starts.get(key)
        if pending is not None and not pending.start.state.final:
            await self._wait_for(pending.done.wait(), caller.id, deadline)
            if not pending.start.state.final:
                return {**self._start_view(pending), **_timed_out()}
        if pending is not None:
            if pending.start.child is None:
                return self._start_view(pending)
            child = self.grants.get(pending.start.child)
        assert child is not None
        seen_key = (caller.id, child.id)
        while True:
            child = self.grants.get(child.id)  # a Codex child's session id is bound later
            body = self._replies(child, count)
            newer = body["total"] > self._seen.get(seen_key, 0)
            if body["idle"] and (newer or wait == 0):
                break
            if time.monotonic() >= deadline:
                body.update(_timed_out())
                break
            await self._wait_for(asyncio.sleep(POLL_SECONDS), caller.id, deadline)
        self._seen[seen_key] = max(self._seen.get(seen_key, 0), body["total"])
        if pending is not None:
            body["start"] = self._start_view(pending)
        call.details.update({"child": child.id, "replies": len(body["replies"])})
        return body

    async def _wait_for(self, what: Any, principal: str, deadline: float) -> None:
        revoked = self._wake_event(principal)
        tasks = [asyncio.ensure_future(what), asyncio.ensure_future(revoked.wait())]
        try:
            await asyncio.wait(
                tasks,
                timeout=max(0.0, deadline - time.monotonic()),
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            for task in tasks:
                task.cancel()
        if revoked.is_set():
            raise NotConnected("not connected: the grant was withdrawn while waiting")

    def _last_message(self, member: Principal) -> str | None:
        """A family member's last reply for ``session.list``: masked, cut at 1 KiB (marked)."""
        replies = self._replies(member, 1)["replies"]
        if not replies:
            return None
        text, was_cut = cut(replies[-1]["text"], LAST_MESSAGE_BYTES)
        return text + " [cut]" if was_cut else text

    def _replies(self, child: Principal, count: int | None) -> dict[str, Any]:
        state = "gone"
        if child.pane_id:
            with contextlib.suppress(OpenbusError):
                state = self.directory.entry(child.pane_id).state
        idle = state in ("idle", "gone", "exited")
        texts: list[str] = []
        total = 0
        source = None
        if child.session_id:
            transcript = self.history.find_transcript(child.harness, child.session_id)
            if transcript is not None:
                source = str(transcript.path)
                read = self.replies.read(transcript.path, child.harness, last=count)
                texts, total = list(read.replies), read.total
                if read.pending and idle:
                    texts.append(read.pending)
                    total += 1
        shown = texts[-count:] if count else texts
        out = []
        kinds: set[str] = set()
        for i, text in enumerate(shown, start=total - len(shown) + 1):
            masked = self.masker.mask(text)
            kinds |= set(masked.kinds)
            body, was_cut = cut(masked.text, REPLY_BYTES)
            item: dict[str, Any] = {"n": i, "text": body}
            if was_cut:
                item["cut"] = f"cut at {REPLY_BYTES} bytes of {len(masked.text.encode())}"
            out.append(item)
        result: dict[str, Any] = {
            "session": child.session_id,
            "pane": child.pane_id,
            "principal": child.id,
            "harness": child.harness,
            "state": state,
            "idle": idle,
            "replies": out,
            "total": total,
            "transcript": source,
        }
        if kinds:
            result["masked"] = sorted(kinds)
        if source is None:
            result["note"] = (
                "the child's transcript is not found yet (its session may not be bound)"
            )
        return result

    # ------------------------------------------------------------------ send

    async def send_to_session(self, call: Call) -> Any:
        caller = self._caller(call)
        _, child = self._resolve(caller, call.params.get("session"))
        if child is None or not child.pane_id:
            raise Forbidden("that session has no pane to send to (yet)", field="session")
        text = call.params.get("text")
        call.params = {
            "target": child.pane_id,
            "incarnation": child.incarnation,
            "text": text,
            "message_id": "s-" + self.random.token_bytes(8).hex(),
        }
        call.details["child"] = child.id
        return await self.messaging.send(call)

    # ------------------------------------------------------------------ human side

    async def allow(self, call: Call) -> Any:
        """The human lets the agent in ``pane`` start sessions without a card each time."""
        user = call.actor.user
        pane = call.params.get("pane")
        if not isinstance(pane, str) or not is_pane_id(pane):
            raise BadRequest("a pane id like %3 is required", field="pane")
        call.target = pane
        allowed = [p for p in self.grants.by_pane(pane) if p.owner == user]
        if not allowed:
            raise NotFound(f"no agent of yours is connected in {pane}", field="pane")
        for principal in allowed:
            call.write(self.cards.approve(Approval(ApprovalKind.SPAWN, principal.id, "*")))
        call.details["principals"] = [p.id for p in allowed]
        return {"pane": pane, "may_start_sessions": [p.id for p in allowed]}

    async def family_of_pane(self, call: Call) -> Any:
        pane = call.params.get("pane")
        if not isinstance(pane, str) or not is_pane_id(pane):
            raise BadRequest("a pane id like %3 is required", field="pane")
        call.target = pane
        return {"pane": pane, **self.pane_section(pane)}

    async def families(self, call: Call) -> Any:
        """The human's child sessions: child pane -> parent pane (``openbus directory`` marks
        them), and the agents that may start sessions without a card."""
        return {"children": self.children_of(call.actor.user)}

    def children_of(self, user: str | None) -> dict[str, str]:
        """``user``'s child sessions by pane: child pane -> parent pane."""
        out: dict[str, str] = {}
        for child, parent in self._spawned_by.items():
            with contextlib.suppress(NotFound):
                c, p = self.grants.get(child), self.grants.get(parent)
                if c.owner == user and c.pane_id and p.pane_id:
                    out[c.pane_id] = p.pane_id
        return out

    # ------------------------------------------------------------------ revocation

    async def on_revocation(self, principal: Principal, preset: Preset) -> None:
        if preset is Preset.OFF and principal.id in self._spawned_by:
            self.ledger.child_ended(principal.id)
        if Scope.SPAWN in preset.scopes:
            return
        event = self._revoked.pop(principal.id, None)
        if event is not None:
            event.set()
        for pending in list(self._starts.values()):
            start = pending.start
            if start.parent != principal.id or start.state.final:
                continue
            if start.state is StartState.CONSENT and start.card:
                card = self.cards.get(start.card).cancel(self.clock.now())
                draft, writes = self.cards.resolution_record(card)
                self.gate.record(draft, writes)
                self.cards.notify(card)  # moves the start to cancelled
            elif start.state is StartState.APPROVED:
                start.move(StartState.CANCELLED, f"Connect was narrowed to {preset.value}")
                self.ledger.settled(start.parent, None)
                pending.done.set()

    def tick(self) -> None:
        """Forget the oldest settled starts past ``KEPT_STARTS`` (their ids stop resolving)."""
        settled = [k for k, p in self._starts.items() if p.start.state.final]
        for key in settled[: max(0, len(self._starts) - KEPT_STARTS)]:
            self._starts.pop(key, None)


def _timed_out() -> dict[str, Any]:
    return {
        "timedOut": True,
        "hint": "nothing new yet: call read_session again with wait_seconds to keep waiting "
        "(tell the user what you are waiting for rather than looping quietly)",
    }


__all__ = ["SessionTools"]
