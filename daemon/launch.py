"""Launch: a new tmux window running a launcher, with a per-launch token when connected.

Theory of operation
-------------------
``launch`` is a human action on the gate (tier HUMAN, mutating; never offered to agents). Its
executor:

1. validates the request (``launcher``, ``cwd``, ``preset``, ``prompt``; each bad field named)
   refuses a harness the org policy does not allow (``Connect.check_harness``) and caps the
   preset by it (``Connect.check_cap``: above the cap is refused);
2. when the preset is not off and the launcher is connectable (structured Claude Code or
   Codex), mints a principal and token (``Grants.mint``, recording the launcher and, for
   Claude Code, the preset session id); otherwise Connect is unavailable and the answer says
   why;
3. writes the launch's environment (launcher env, and the token as ``OPENBUS_TOKEN``) to a
   0600 file in a 0700 directory and opens a detached tmux window running
   ``python -m openbus.daemon.launch_exec FILE -- <harness argv>`` on the configured tmux
   server, as that server's user; the wrapper unlinks the file and execs the harness, so the
   token is in no argv at any time. On a hosted box the agents' tmux server is another user's:
   the environment goes over the control client's stdin (``new-window -e``) instead, and in
   ``pool`` mode (``[hosted] agent_isolation``) the pane runs ``sudo --user <pool user>
   --preserve-env=<those names> -- <harness argv>`` (sudo execs the harness: no wrapper), so
   each agent has a uid of its own (``daemon.core.agent_pool``; held until its uid runs,
   given back when nothing of it runs; a resumed session runs as the user it ran as, recorded
   with its launch, whose home holds its transcript) and cannot read another's environment,
   memory or files nor open the agents' tmux socket; ``shared`` mode runs every agent as the
   server's user;
4. sets ``remain-on-exit`` on the new pane as tmux creates it (one command line, run before
   tmux reaps any child; a restart's respawned pane keeps its own, which its record restores),
   so an agent that dies at once leaves its pane and last screen behind, and waits (bounded)
   until the directory has seen the pane run the harness; an agent already dead by then fails
   the launch (``LaunchFailed``: its exit status and last screen), nothing of it committed,
   and its pane is closed once read;
5. attaches the principal to the new pane and process and returns the pane id and the
   incarnation (always the directory's ``inc_...``).

After the launch's record is committed (the agent's token only works from then on), the call
waits, still bounded, for the agent's first state (a recognised harness reading other than
``unknown``): one that exits before it is reported failed the same way (its principal revoked),
never as connected; then ``remain-on-exit`` is turned off again. A connected TUI's first prompt
(``LaunchPlan.typed_prompt``) is typed only once that agent has been answered a ``tools/list``
by the MCP endpoint (``tools_listed``), at an idle, empty composer, under the pane's send lock,
and submitted; the answer's ``prompt`` says whether it was typed, and a ``launch.prompt``
record says so too.

The mint and the attach are queued on the gate call, so they commit with the launch's audit
record or not at all (a window whose token was never committed simply fails to connect). The
harness may present its token before that commit (a Claude Code TUI connects its MCP servers
within a second, a restore commits each session only once the directory has seen its pane on
the new tmux server): ``LiveTokens.verify`` holds a request bearing a token a launch is still
committing until that launch has committed or failed (bounded), so it is answered as the
committed grant says rather than refused, which the harness would not retry.

Afterwards (``LaunchService.tick`` every second, and ``LiveTokens.verify`` on each MCP
request):

* a principal whose process is gone (pane exited, or its pid now names another process: the
  pid and its start time are stored with the principal, so this holds after a restart) is
  suspended when it is bound to a session (``agent.suspended``: its grant returns when that
  session is resumed) and revoked otherwise (``agent.revoked``); either way the revocation
  hooks run (its MCP sessions close) and its token fails from then on;
* so is a principal whose pane was closed while its process runs on (a harness that ignores
  tmux's hangup, as Gemini CLI does: orphaned, it would keep its grant with no pane a person
  could see), and what ran in the pane is ended as ``launch_proc.close_pane`` ends it (a
  hosted agent's processes, another user's, by the agents' tmux server: ``_send``);
* every launch is recorded (``launch_records``): its process is followed, and one that ended
  is ``exited``, or ``lost`` when the tmux server it ran on is gone (what restore offers);
* a Codex principal is bound to its session id once its rollout's ``session_meta`` is seen
  (``agent.bind``), found from the rollout file its process tree holds open, else the newest
  rollout under its ``CODEX_HOME`` whose cwd and time match the launch;
* launch environment files the wrapper never consumed are removed after a minute;
* a connected Gemini CLI's per-launch settings file (``agent-<principal>.json``, 0600, beside
  the environment files; it holds the endpoint and ``$OPENBUS_TOKEN``, never the token) is
  removed when its principal is revoked or suspended, and at the next sweep once its
  principal is no longer active (a daemon restarted in between).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence, Set
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from openbus.daemon.config import Config, Launcher
from openbus.daemon.connect import Connect
from openbus.daemon.connect_refusals import ConnectFacts, LaunchNote, RecordedLaunch
from openbus.daemon.core.actions import Action
from openbus.daemon.core.agent_pool import PoolUser
from openbus.daemon.core.audit import AuditDraft
from openbus.daemon.core.consent import Tier
from openbus.daemon.core.sessions import BRIEF_READY_SECONDS, brief_ready
from openbus.daemon.core.tokens import token_hash, well_formed
from openbus.daemon.directory import Directory
from openbus.daemon.feature import Feature
from openbus.daemon.gate import Call, Gate
from openbus.daemon.grants import Grants, Principal
from openbus.daemon.launch_exec import FAILED_STATUS
from openbus.daemon.launch_plan import (
    TOKEN_ENV,
    LaunchPlan,
    as_pool_user,
    check_cwd,
    check_prompt,
    gemini_settings_refusal,
    one_shot,
    plan_launch,
)
from openbus.daemon.launch_proc import (
    TERM_SECONDS,
    ProcessIdentity,
    close_pane,
    end_processes,
    find_codex_session,
    identity_of,
    own_signals,
    session_members,
    still_running,
    uid_of,
)
from openbus.daemon.launch_records import LaunchRecord, LaunchRecords
from openbus.daemon.messaging.delivery import PASTE_BURST_SECONDS
from openbus.daemon.pane_owners import PaneOwners
from openbus.daemon.screens import PARSERS
from openbus.daemon.tmux.adapter import Tmux
from openbus.kernel.clock import Clock, Random
from openbus.kernel.errors import (
    BadRequest,
    Conflict,
    LaunchFailed,
    OpenbusError,
    Unavailable,
)
from openbus.kernel.scopes import Preset, parse_preset

log = logging.getLogger("openbus.launch")

LAUNCH = Action("launch", tier=Tier.HUMAN, outside_effects=True)
STALE_ENV_FILE_SECONDS = 60.0
POLL_SECONDS = 0.02
READY_POLL_SECONDS = 0.02  # how often a wait for a new agent's first idle looks (and reads its
# status file, which Claude Code writes a moment after the idle composer shows)
HARNESS_SECONDS = 2.0  # the directory sees the new pane run the launcher's harness
SEEN_SECONDS = 10.0  # ... or at least sees the pane at all (a wrapper, a fake harness)
FIRST_STATE_SECONDS = 30.0  # a recognised harness draws its first screen
TOOLS_LISTED_SECONDS = 30.0  # a connected TUI lists its openbus tools
PROMPT_SHOWN_SECONDS = 5.0  # the typed prompt shows in the composer
POOL_USER_FREE_SECONDS = 10.0  # a resumed session's pool user: its last agent's processes end
POOL_USER_POLL_SECONDS = 0.1
COMMITTING_SECONDS = 30.0  # a token handed to a launch not committed yet waits this long
LAST_SCREEN_LINES = 8
DEAD_CHECK_SECONDS = 0.25  # how often the waits ask tmux itself whether the pane died
# tmux may flag a pane dead before it has reaped the status, and tmux 3.3a sometimes never
# has it (the launch wrapper's own failures name theirs on screen): waited for this long
STATUS_SECONDS = 2.0


class AgentUserPool(Protocol):
    """Where each agent's own uid comes from on a hosted box in ``pool`` mode."""

    def acquire(self, want: str | None = None, live: Set[str] = frozenset()) -> PoolUser: ...

    def started(self, user: PoolUser, pid: int) -> None: ...

    def release(self, user: PoolUser) -> None: ...

    def user_with_uid(self, uid: int) -> PoolUser | None: ...

    def health(self) -> dict[str, object]: ...


@dataclass
class Launched:
    principal: str
    pane: str
    identity: ProcessIdentity | None
    cwd: str | None
    launcher: str
    harness: str
    started: float
    codex_home: str | None = None
    agent_user: str | None = None


class LaunchService(Feature):
    name = "launch sweep"

    def __init__(
        self,
        *,
        config: Config,
        clock: Clock,
        random: Random,
        gate: Gate,
        grants: Grants,
        connect: Connect,
        tmux: Tmux,
        directory: Directory,
        owners: PaneOwners,
        pool: AgentUserPool | None = None,
    ) -> None:
        self.config = config
        self.pool = pool
        self.clock = clock
        self.random = random
        self.gate = gate
        self.grants = grants
        self.connect = connect
        self.tmux = tmux
        self.directory = directory
        self.records = LaunchRecords(grants.db, clock, random)
        self.launched: dict[str, Launched] = {}  # principal id -> what this daemon launched
        self.env_dir = config.daemon.state_dir / "launch"
        self._revoking: set[str] = set()
        self._ending: set[asyncio.Task[None]] = set()  # ending what a closed pane left running
        self._listed: dict[str, asyncio.Event] = {}  # principal id -> tools/list answered
        # token hash -> set once the launch that handed it out committed (or failed)
        self._committing: dict[str, asyncio.Event] = {}
        self.facts = ConnectFacts(grants, directory, owners, self._recorded)
        connect.explain_with(self.facts)
        gate.register(LAUNCH, self.execute)

    # ------------------------------------------------------------------ helpers

    @property
    def mcp_url(self) -> str:
        d = self.config.daemon
        host = d.listen_host if d.listen_host not in ("0.0.0.0", "", "::") else "127.0.0.1"  # noqa: S104
        return f"http://{host}:{d.listen_port}/mcp"

    def cwd_of(self, principal_id: str) -> str | None:
        found = self.launched.get(principal_id)
        return found.cwd if found else None

    def _launcher(self, value: object) -> Launcher:
        if not isinstance(value, str) or not value:
            raise BadRequest("a launcher name is required", field="launcher")
        launcher = self.config.launchers.get(value)
        if launcher is None:
            known = ", ".join(sorted(self.config.launchers))
            raise BadRequest(f"no launcher named {value!r} (configured: {known})", field="launcher")
        return launcher

    def _server_uid(self) -> int | None:
        """The agents' tmux server's user when it is another than the daemon's (a hosted
        box), else None."""
        socket = self.config.tmux.socket
        try:
            uid = socket.stat().st_uid if socket is not None else None
        except OSError:
            return None
        return uid if uid != os.getuid() else None

    def _server_is_another_users(self) -> bool:
        return self._server_uid() is not None

    def _write_env_file(self, env: Mapping[str, str]) -> Path:
        name = "env-" + self.random.token_bytes(12).hex() + ".json"
        return self._write_private(self.env_dir / name, json.dumps({"env": dict(env)}))

    def _write_private(self, path: Path, text: str) -> Path:
        """Write a new 0600 file in the 0700 launch directory."""
        self.env_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.env_dir, 0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        return path

    def settings_refusal(self, harness: str) -> str | None:
        """Why a connected launch of ``harness`` could not read its settings file here."""
        if harness != "gemini":
            return None
        chain: list[tuple[str, int, int]] = []
        for folder in reversed([self.env_dir, *self.env_dir.parents]):
            try:
                found = folder.stat()
            except FileNotFoundError:
                break  # made by the daemon, as its own user, 0700
            except OSError as exc:
                chain.append((str(folder), -1, 0))
                log.warning("cannot look at %s: %s", folder, exc)
                break
            chain.append((str(folder), found.st_uid, found.st_mode))
        return gemini_settings_refusal(chain, root=os.getuid() == 0)

    def settings_path(self, principal_id: str) -> Path:
        """Where a connected launch's own settings file lives (Gemini CLI)."""
        return self.env_dir / f"agent-{principal_id}.json"

    def tools_listed(self, principal_id: str) -> None:
        self._listed.setdefault(principal_id, asyncio.Event()).set()

    def has_listed_tools(self, principal_id: str) -> bool:
        """Whether the agent has been answered a ``tools/list`` (its harness is up)."""
        listed = self._listed.get(principal_id)
        return listed is not None and listed.is_set()

    async def until_ready(self, pane: str, incarnation: str, principal: str | None) -> str:
        """Wait until a newly opened agent is ready for its first message (``brief_ready``:
        idle, empty composer, its harness up); what the wait ended on: ``ready``, ``gone``
        (messaging then cancels what is sent to it) or ``timed out``. How a started session's
        brief and control's hand-off into a window it opened wait for the agent's first idle."""
        deadline = time.monotonic() + BRIEF_READY_SECONDS
        while True:
            # Claude Code writes its status file a moment after it draws the idle composer;
            # the directory's own re-read comes once a second, so read it here each look
            self.directory.reread_evidence(pane)
            try:
                entry = self.directory.entry(pane)
            except OpenbusError:
                return "gone"
            if entry.incarnation != incarnation or entry.ended:
                return "gone"
            status = entry.status.status if entry.status is not None else None
            still = self.clock.now() - entry.last_activity
            listed = principal is not None and self.has_listed_tools(principal)
            if brief_ready(entry.state, entry.reading.composer_empty, status, still, listed):
                return "ready"
            if time.monotonic() >= deadline:
                return "timed out"
            await asyncio.sleep(READY_POLL_SECONDS)

    def _seen(self, pane: str, pid: int) -> Any:
        """The directory's entry for ``pane`` while it runs the launched process, else None."""
        try:
            entry = self.directory.entry(pane)
        except OpenbusError:
            return None
        return entry if entry.info.pid == pid else None

    async def _dead(self, pane: str, launcher: Launcher) -> tuple[int | None, str] | None:
        """(exit status, last screen) when the pane's process has exited, else None. A one-shot
        run (``claude -p``, ``codex exec``) that exited 0 has finished, not failed: None."""
        try:
            there = await self.tmux.pane_if_there(pane)
        except Unavailable:
            return None  # tmux did not answer this time: not known dead, asked again
        if there is None:
            return None, ""  # the pane itself is gone: nothing kept it
        info = there
        deadline = asyncio.get_running_loop().time() + STATUS_SECONDS
        while info.dead and info.dead_status is None:  # flagged dead before it has the status
            if asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(POLL_SECONDS)
            with contextlib.suppress(OpenbusError):
                info = await self.tmux.pane_info(pane)
        if not info.dead or (info.dead_status == 0 and one_shot(launcher)):
            return None
        screen = ""
        with contextlib.suppress(OpenbusError):
            screen = await self.tmux.capture(pane, history=LAST_SCREEN_LINES)
        return info.dead_status, screen or " "

    async def _failed(self, pane: str, launcher: Launcher, dead: tuple[int | None, str]) -> Any:
        """The launch's failure, once the dead pane has been read: it is closed."""
        status, screen = dead
        await self.close_pane(pane)
        lines = [line.rstrip() for line in screen.splitlines() if line.strip()]
        lines = [line for line in lines if not line.startswith("Pane is dead")]
        last = "\n".join(lines[-LAST_SCREEN_LINES:]) or "(the screen was empty)"
        declared = FAILED_STATUS.search(screen)
        if status is None and declared is not None:  # the wrapper's own failure says it
            status = int(declared.group(1))
        if status is not None:
            how = f"with status {status}"
        else:
            how = "(its pane closed)" if not screen else "(its exit status unknown)"
        return LaunchFailed(
            f"{launcher.name} ({launcher.argv[0] if launcher.argv else 'sh'}) exited at once "
            f"{how} in {pane}; its last screen:\n{last}",
            field="launcher",
        )

    async def _incarnation(self, pane: str, pid: int, launcher: Launcher) -> str:
        """The directory's incarnation for the new pane, once the watcher has seen it run the
        harness (bounded), or at least run the launched process. An agent already dead is the
        launch's failure; a pane the directory never sees is closed and refused."""
        deadline = self.clock.monotonic() + SEEN_SECONDS
        harness_by = self.clock.monotonic() + HARNESS_SECONDS
        ask_by = 0.0
        while True:
            entry = self._seen(pane, pid)
            now = self.clock.monotonic()
            ready = entry is not None and (entry.harness == launcher.harness or now >= harness_by)
            if (entry is not None and entry.info.dead) or ready or now >= ask_by:
                # tmux itself (the watcher may not have seen it yet), now and then, and always
                # before the launch goes on
                ask_by = now + DEAD_CHECK_SECONDS
                dead = await self._dead(pane, launcher)
                if dead is not None:
                    raise await self._failed(pane, launcher, dead)
            if ready and entry is not None:
                return str(entry.incarnation)
            if self.clock.monotonic() >= deadline:
                break
            await asyncio.sleep(POLL_SECONDS)
            self.directory.reprobe(pane)
        dead = await self._dead(pane, launcher)
        if dead is not None:
            raise await self._failed(pane, launcher, dead)
        await self.close_pane(pane)
        raise Unavailable(
            f"the directory did not see the new pane {pane} within {SEEN_SECONDS:.0f} s; "
            "it was closed (is the tmux watcher running?)"
        )

    async def _first_state(
        self, pane: str, pid: int, launcher: Launcher, principal_id: str | None
    ) -> str:
        """Wait (bounded) until the agent shows its first state; its death fails the launch
        (its principal revoked). Returns the state seen ("unknown" if none in time)."""
        deadline = self.clock.monotonic() + FIRST_STATE_SECONDS
        state = "unknown"
        ask_by = 0.0
        while True:
            entry = self._seen(pane, pid)
            now = self.clock.monotonic()
            dead = None
            if entry is None or entry.info.dead or now >= ask_by:
                ask_by = now + DEAD_CHECK_SECONDS
                dead = await self._dead(pane, launcher)
            if dead is not None:
                if principal_id is not None:
                    with contextlib.suppress(OpenbusError):
                        await self.revoke(self.grants.get(principal_id), "it exited at once")
                raise await self._failed(pane, launcher, dead)
            if entry is not None:
                state = str(entry.state)
                if (
                    entry.harness != launcher.harness
                    or launcher.harness not in PARSERS
                    or state != "unknown"
                    or one_shot(launcher)
                ):
                    break  # a harness not read here, or a one-shot run: no more waiting
            if self.clock.monotonic() >= deadline:
                break
            await asyncio.sleep(POLL_SECONDS)
        with contextlib.suppress(OpenbusError):
            await self.tmux.unset_option(pane, "remain-on-exit")  # back to the window's
        return state

    async def _until(self, pane: str, pid: int, wanted: Any, seconds: float) -> bool:
        deadline = self.clock.monotonic() + seconds
        while self.clock.monotonic() < deadline:
            entry = self._seen(pane, pid)
            if entry is None or entry.info.dead:
                return False
            if wanted(entry):
                return True
            await asyncio.sleep(POLL_SECONDS)
        return False

    async def _type_prompt(
        self, pane: str, pid: int, principal_id: str, prompt: str, launcher_harness: str
    ) -> str:
        """Type a connected TUI's first prompt once it listed its openbus tools, at an idle,
        empty composer; "typed", or why not."""
        entry = self._seen(pane, pid)
        if entry is None or entry.harness != launcher_harness:
            self._listed.pop(principal_id, None)
            return f"not typed: the pane does not show {launcher_harness} running"
        listed = self._listed.setdefault(principal_id, asyncio.Event())
        try:
            await asyncio.wait_for(listed.wait(), TOOLS_LISTED_SECONDS)
        except TimeoutError:
            return (
                f"not typed: the agent did not list its openbus tools within "
                f"{TOOLS_LISTED_SECONDS:.0f} s"
            )
        finally:
            self._listed.pop(principal_id, None)

        def ready(entry: Any) -> bool:
            return bool(entry.state == "idle" and entry.reading.composer_empty is True)

        if not await self._until(pane, pid, ready, FIRST_STATE_SECONDS):
            return "not typed: the agent's composer was not seen idle and empty"
        async with self.directory.send_lock(pane):
            before = self.directory.entry(pane).revision
            await self.tmux.send_literal(pane, prompt)

            def shown(entry: Any) -> bool:
                return bool(entry.revision != before and entry.reading.composer_empty is False)

            if not await self._until(pane, pid, shown, PROMPT_SHOWN_SECONDS):
                return "not typed: the pasted prompt did not show in the composer"
            burst = PASTE_BURST_SECONDS.get(launcher_harness, 0.0)
            if burst:
                await asyncio.sleep(burst)  # Codex holds an Enter that follows a paste closely
            await self.tmux.send_key(pane, "Enter")
        return "typed"

    # ------------------------------------------------------------------ the action

    async def execute(
        self, call: Call, *, role: str | None = None, session: str | None = None
    ) -> Any:
        """The ``launch`` action. ``role`` and ``session`` are the control session's start
        (``daemon.control``) alone: its principal is marked ``control``, in tmux session
        ``control``; no front end passes them."""
        owner = call.actor.user
        if owner is None:
            raise BadRequest("only a person can launch", field="actor")
        params = call.params
        if params.get("unknown"):
            raise BadRequest(
                f"unknown field {params['unknown'][0]!r}", field=str(params["unknown"][0])
            )
        launcher = self._launcher(params.get("launcher"))
        given = params.get("preset")
        preset = parse_preset("off" if given is None or given == "" else given)
        prompt = check_prompt(params.get("prompt"), launcher)
        cwd = check_cwd(params.get("cwd"), launcher.cwd)
        call.target = launcher.name
        call.details.update(
            {"launcher": launcher.name, "harness": launcher.harness, "preset": preset.value}
        )
        if cwd is not None:
            call.details["cwd"] = str(cwd)
        if prompt is not None:
            call.details["prompt_chars"] = len(prompt)
        self.connect.check_harness(launcher.harness)  # the org policy's [harnesses] allowed
        if preset is not Preset.OFF:
            cap = self.connect.check_cap(owner, preset)
            call.details["cap"] = cap.preset.value
        return await self.open(
            call,
            owner=owner,
            launcher=launcher,
            preset=preset,
            prompt=prompt,
            cwd=cwd,
            role=role,
            session=session,
        )

    async def open(
        self,
        call: Call,
        *,
        owner: str,
        launcher: Launcher,
        preset: Preset,
        prompt: str | None,
        cwd: Path | None,
        role: str | None = None,
        session: str | None = None,
    ) -> dict[str, Any]:
        """Open the window of a checked launch on ``call`` (its mint and attach are queued on
        it): the ``launch`` action's second half, and how a session start opens its child."""
        session_id = str(uuid.UUID(bytes=self.random.token_bytes(16), version=4))
        plan = plan_launch(
            launcher,
            preset=preset,
            prompt=prompt,
            mcp_url=self.mcp_url,
            session_id=session_id,
            refusal=self.settings_refusal(launcher.harness),
        )
        principal_id: str | None = None
        token: str | None = None
        if plan.connect:
            principal_id, token, write = self.grants.mint(
                harness=launcher.harness,
                owner=owner,
                preset=preset,
                launcher=launcher.name,
                session_id=plan.session_id,
                role=role,
            )
            call.write(write)
            call.details["principal"] = principal_id
        if plan.session_id:
            call.details["session_id"] = plan.session_id
        if plan.reason:
            call.details["connect_unavailable"] = plan.reason
        started = await self.spawn(
            call,
            owner=owner,
            launcher=launcher,
            plan=plan,
            cwd=str(cwd) if cwd else None,
            principal_id=principal_id,
            token=token,
            session=session,
        )
        pane, pid, incarnation = started["pane"], started["pid"], started["incarnation"]
        if principal_id is None:
            note = LaunchNote(
                launcher.name,
                launcher.harness,
                launcher.structured,
                preset.value,
                incarnation,
                plan.reason,
            )
            call.after_commit.append(lambda: self.facts.note(pane, note))
        result: dict[str, Any] = {
            **started,
            "state": "unknown",
            "prompt": "on its command line"
            if prompt is not None and plan.typed_prompt is None
            else None,
            "preset": preset.value if plan.connect else Preset.OFF.value,
            "connect": {
                "available": plan.reason is None and launcher.structured,
                "connected": plan.connect,
                "reason": plan.reason,
                "principal": principal_id,
                "session_id": plan.session_id if plan.connect else None,
                "actor": started["actor"],
            },
        }
        call.after_commit_async.append(
            lambda: self._confirm(
                result,
                launcher=launcher,
                pid=pid,
                principal_id=principal_id,
                prompt=plan.typed_prompt,
                actor=call.actor.name,
            )
        )
        return result

    async def _confirm(
        self,
        result: dict[str, Any],
        *,
        launcher: Launcher,
        pid: int,
        principal_id: str | None,
        prompt: str | None,
        actor: str,
    ) -> None:
        """After the launch is committed: its first state, then a connected TUI's prompt."""
        pane = str(result["pane"])
        try:
            result["state"] = await self._first_state(pane, pid, launcher, principal_id)
        except LaunchFailed as exc:
            self.gate.record(
                AuditDraft(
                    actor=actor,
                    action="launch.failed",
                    outcome="error",
                    target=pane,
                    details={"launcher": launcher.name, "message": exc.message},
                )
            )
            raise
        if prompt is None or principal_id is None:
            return
        outcome = await self._type_prompt(pane, pid, principal_id, prompt, launcher.harness)
        result["prompt"] = outcome
        self.gate.record(
            AuditDraft(
                actor=actor,
                action="launch.prompt",
                outcome="ok" if outcome == "typed" else "error",
                target=pane,
                details={"principal": principal_id, "prompt_chars": len(prompt), "how": outcome},
            )
        )

    async def spawn(
        self,
        call: Call,
        *,
        owner: str,
        launcher: Launcher,
        plan: LaunchPlan,
        cwd: str | None,
        principal_id: str | None,
        token: str | None,
        respawn: str | None = None,
        session: str | None = None,
        agent_user: str | None = None,
    ) -> dict[str, Any]:
        """Run ``plan`` in a new window (or ``respawn`` that pane), its token in the
        environment only (in pool mode as the pool user ``agent_user``, the one a resumed
        session ran as; None: any free one); attach the principal to the new process and
        record the launch, all committed with ``call``'s audit record."""
        env = dict(plan.env)
        if plan.settings is not None and plan.settings_env is not None:
            if principal_id is None:
                raise BadRequest("a settings file is written for a connected launch only")
            if self._server_is_another_users():
                raise BadRequest(
                    f"cannot connect {launcher.harness} here: its per-launch settings file is "
                    "readable by the daemon's user only, and this tmux server runs as another "
                    "user; launch it with preset off",
                    field="preset",
                )
            env[plan.settings_env] = str(
                self._write_private(self.settings_path(principal_id), plan.settings)
            )
        if token is not None:
            env[TOKEN_ENV] = token
        with self._held_until_committed(call, token):
            pane, pid, ran_as = await self._open(
                plan.argv,
                env,
                cwd,
                launcher.name,
                respawn=respawn,
                details=call.details,
                session=session,
                agent_user=agent_user,
            )
            identity = identity_of(pid)
            incarnation = await self._incarnation(pane, pid, launcher)
            start = identity.start if identity is not None else None
            call.details.update({"pane": pane, "pid": pid, "incarnation": incarnation})
            launch_id, write = self.records.add(
                owner=owner,
                launcher=launcher.name,
                harness=launcher.harness,
                cwd=cwd,
                session_id=plan.session_id,
                principal=principal_id,
                pane_id=pane,
                pid=pid,
                pid_start=start,
                server=await self.server_identity(),
                agent_user=ran_as.name if ran_as else None,
            )
            if plan.session_id:
                call.write(self.records.end_session(launcher.harness, plan.session_id))
            call.write(write)
            call.details["launch"] = launch_id
            actor = None
            if principal_id is not None:
                call.write(self.grants.attach_pane(principal_id, pane, pid, start, incarnation))
                codex_home = launcher.env.get("CODEX_HOME") if launcher.harness == "codex" else None
                record = Launched(
                    principal_id,
                    pane,
                    identity,
                    cwd,
                    launcher.name,
                    launcher.harness,
                    self.clock.now(),
                    codex_home,
                    ran_as.name if ran_as else None,
                )
                call.after_commit.append(
                    lambda: self.launched.__setitem__(record.principal, record)
                )
                actor = (
                    f"agent:{launcher.harness}:{plan.session_id}"
                    if plan.session_id
                    else f"agent:{launcher.harness}:pane:{pane}:{pid}"
                )
            return {
                "pane": pane,
                "incarnation": incarnation,
                "pid": pid,
                "launcher": launcher.name,
                "harness": launcher.harness,
                "cwd": cwd,
                "session_id": plan.session_id,
                "agent_user": ran_as.name if ran_as else None,
                "actor": actor,
            }

    def _recorded(self) -> dict[str, RecordedLaunch]:
        """Each pane's live launch as its record keeps it."""
        found = {}
        for r in self.records.live():
            launcher = self.config.launchers.get(r.launcher)
            structured = launcher.structured if launcher is not None else False
            found[r.pane_id] = RecordedLaunch(r.pid, r.launcher, r.harness, structured)
        return found

    @contextlib.contextmanager
    def _held_until_committed(self, call: Call, token: str | None) -> Iterator[None]:
        """The harness may present its token before this launch has committed it (a restore
        commits only once the directory saw each new pane): the endpoint holds it till then."""
        if token is None:
            yield
            return
        digest = token_hash(token)
        self._committing[digest] = asyncio.Event()
        try:
            yield
        except BaseException:
            self._committed(digest)
            raise
        call.after_commit.append(lambda: self._committed(digest))

    def _committed(self, digest: str) -> None:
        event = self._committing.pop(digest, None)
        if event is not None:
            event.set()

    async def committing(self, token: str) -> None:
        """Return once the launch that handed out ``token`` has committed (or failed), at
        once for a token no launch is committing; bounded."""
        if not self._committing or not well_formed(token):
            return
        digest = token_hash(token)
        event = self._committing.get(digest)
        if event is None:
            return
        try:
            await asyncio.wait_for(event.wait(), COMMITTING_SECONDS)
        except TimeoutError:
            self._committing.pop(digest, None)  # its commit failed: nothing will set it

    async def _open(
        self,
        argv: tuple[str, ...],
        env: dict[str, str],
        cwd: str | None,
        name: str,
        *,
        respawn: str | None,
        details: dict[str, Any],
        session: str | None = None,
        agent_user: str | None = None,
    ) -> tuple[str, int, PoolUser | None]:
        """Start ``argv`` with ``env`` in a new window, or in pane ``respawn``, never putting
        the environment in any argv. The caller of a respawn has seen the pane's agent end;
        what it left holding the pane (a tool's child process) goes with ``respawn-pane -k``."""
        ran_as: PoolUser | None = None
        if self._server_is_another_users():
            # Hosted: the agents' tmux server runs as another user, who could not open a file
            # only the daemon may read. Its environment goes over the control client's stdin
            # (``new-window -e``), which is never argv either.
            words = list(argv)
            pool = self.pool
            if pool is not None:
                ran_as = await self._pool_user(pool, agent_user)
                details["agent_user"] = ran_as.name
                words = as_pool_user(words, user=ran_as.name, env_names=list(env))
            try:
                if respawn is not None:
                    pane = respawn
                    pid = await self.tmux.respawn_pane(respawn, words, env=env, cwd=cwd, kill=True)
                else:
                    pane, pid = await self.tmux.new_window(
                        words, env=env, cwd=cwd, name=name, session=session, remain_on_exit=True
                    )
            except BaseException:
                if pool is not None and ran_as is not None:
                    pool.release(ran_as)
                raise
            if pool is not None and ran_as is not None:
                pool.started(ran_as, pid)
            return pane, pid, ran_as
        env_file = self._write_env_file(env)
        wrapper = [sys.executable, "-m", "openbus.daemon.launch_exec", str(env_file), "--", *argv]
        try:
            if respawn is not None:
                pane = respawn
                pid = await self.tmux.respawn_pane(respawn, wrapper, cwd=cwd, kill=True)
            else:
                pane, pid = await self.tmux.new_window(
                    wrapper, cwd=cwd, name=name, session=session, remain_on_exit=True
                )
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                env_file.unlink()
            raise
        return pane, pid, None

    async def _pool_user(self, pool: AgentUserPool, want: str | None) -> PoolUser:
        """A free pool user, or the one named ``want`` once the processes of its last agent
        have ended (bounded: a uid that keeps running refuses the resume, naming it). With
        none free, the refusal names the users busy with no live launch: what an ended agent
        left running holds them."""
        if want is None:
            live = {r.agent_user for r in self.records.live() if r.agent_user is not None}
            return pool.acquire(live=live)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + POOL_USER_FREE_SECONDS
        while True:
            try:
                return pool.acquire(want)
            except Conflict:
                if loop.time() > deadline:
                    raise
            await asyncio.sleep(POOL_USER_POLL_SECONDS)

    async def server_identity(self) -> str | None:
        """The running tmux server as ``pid:start time`` (None: no server)."""
        pid = await self.tmux.server_pid()
        found = identity_of(pid) if pid is not None else None
        return f"{found.pid}:{found.start}" if found is not None else None

    def health(self) -> dict[str, object] | None:
        return self.pool.health() if self.pool is not None else None

    # ------------------------------------------------------------------ liveness and binding

    def _alive(self, principal: Principal) -> bool:
        """Whether the exact process the token was issued to still runs: its pid with the
        start time stored beside it, so a recycled pid (also after a daemon restart, when
        nothing of the launch is left in memory) is another process and the token is dead. A
        principal with a pid but no start time cannot be told from an impostor: not alive."""
        if not principal.pid:
            return True  # not attached yet (the launch is committing)
        now = identity_of(principal.pid)
        return now is not None and now.start == principal.pid_start

    async def tick(self) -> None:
        await self.sweep_once()

    async def stop(self) -> None:
        for task in list(self._ending):
            task.cancel()
        await asyncio.gather(*self._ending, return_exceptions=True)

    async def _pane_closed(self, pane: str | None, pid: int) -> bool:
        """Whether ``pane``, launched running ``pid``, is gone or now runs another process,
        while ``pid`` runs on: a harness that ignores the hangup outlives the pane tmux closed
        (Gemini CLI does). The directory answers while it shows the pane running that process;
        otherwise tmux itself, and a tmux that does not answer is not known to have closed it."""
        if pane is None or self._seen(pane, pid) is not None:
            return False
        try:
            info = await self.tmux.pane_if_there(pane)
            if info is None and self.tmux.reachable():
                # its server runs and says there is no such pane: a second, independent look
                # (the whole listing) before anything is ended
                info = next((p for p in await self.tmux.list_panes() if p.pane_id == pane), None)
        except OpenbusError:
            return False
        return info is None or info.pid != pid

    async def close_pane(self, pane: str) -> None:
        """Kill ``pane`` and end what ran in it (``launch_proc.close_pane``), a pool user's
        processes too (``_send``)."""
        await close_pane(self.tmux, pane, send=self._send)

    async def _send(
        self, members: Sequence[ProcessIdentity], sig: signal.Signals
    ) -> list[ProcessIdentity]:
        """Signal what the daemon may itself. On a hosted box the agents run as other users,
        whom the agents' tmux server may signal for it (``run-shell``): its own user's
        processes (``shared`` mode) directly, a pool user's (``pool`` mode) through sudo as that
        user, which the deployed rule lets it do. Only that uid's processes can be hit, and a
        pool user runs one agent and is not handed out again while anything of it runs, so a
        pid reused between the identity check and the kill is that agent's own."""
        sent = await own_signals(members, sig)
        server = self._server_uid()
        if server is None:
            return sent
        by_user: dict[str | None, list[ProcessIdentity]] = {}  # None: the server's own user
        for member in members:
            uid = uid_of(member.pid) if member not in sent else None
            if uid is None or identity_of(member.pid) != member:
                continue
            if uid == server:
                by_user.setdefault(None, []).append(member)
            elif self.pool is not None and (user := self.pool.user_with_uid(uid)) is not None:
                by_user.setdefault(user.name, []).append(member)
        for name, theirs in by_user.items():
            kill = ["kill", f"-{sig.name.removeprefix('SIG')}", *(str(m.pid) for m in theirs)]
            argv = kill if name is None else as_pool_user(kill, user=name, env_names=[])
            try:
                await self.tmux.run_as_server(argv)
            except OpenbusError as exc:
                log.warning("could not have tmux signal %s: %s", name or "its user", exc.message)
                continue
            sent += theirs
        return sent

    def _end_left_running(self, principal: str, leader: int) -> None:
        """End, off the sweep, what ran in a closed pane: the members of the session its
        process led, as ``close_pane`` does after its own kill (a pool user's through
        ``_send``; another user's the daemon may not signal are logged)."""
        members = session_members(leader)

        async def end() -> None:
            left = await end_processes(members, send=self._send)
            # (sudo, root's, in pool mode: it ends once the agent it ran has)
            left = await still_running(left, TERM_SECONDS)
            if left:
                log.warning(
                    "the pane of %s was closed; %d of its processes run on as another user, "
                    "which this daemon may not signal: %s",
                    principal,
                    len(left),
                    ", ".join(str(m.pid) for m in left),
                )

        task = asyncio.get_running_loop().create_task(end())
        self._ending.add(task)
        task.add_done_callback(self._ending.discard)

    async def ensure_live(self, principal: Principal) -> bool:
        """False (and the principal suspended or revoked) when its process has exited, or its
        pane was closed while the process ran on (what ran in the pane is then ended)."""
        if not self._alive(principal):
            await self.ended(principal, "its pane's process exited")
            return False
        pid = principal.pid  # (none: not attached to a pane's process yet, its launch committing)
        if pid and await self._pane_closed(principal.pane_id, pid):
            await self.ended(principal, "its pane was closed; what ran in it is ended")
            self._end_left_running(principal.id, pid)
            return False
        return True

    async def ended(self, principal: Principal, reason: str) -> None:
        """Its process is gone: a principal bound to a session is suspended (its grant waits
        for that session's resume), any other is revoked (nothing for a recycled pane)."""
        await self.revoke(principal, reason, suspend=principal.session_id is not None)

    async def revoke(self, principal: Principal, reason: str, *, suspend: bool = False) -> None:
        if principal.id in self._revoking:
            return
        self._revoking.add(principal.id)
        try:
            current = self.grants.get(principal.id)
            if not current.active:
                return
            grants = self.grants
            write = grants.suspend(principal.id) if suspend else grants.revoke(principal.id)
            self.gate.record(
                AuditDraft(
                    actor="system",
                    action="agent.suspended" if suspend else "agent.revoked",
                    outcome="ok",
                    target=principal.pane_id,
                    details={
                        "principal": principal.id,
                        "agent": current.actor().name,
                        "reason": reason,
                    },
                ),
                [write],
            )
            await self.connect.revoked(current, Preset.OFF)
        finally:
            self._revoking.discard(principal.id)
            self.launched.pop(principal.id, None)
            self._listed.pop(principal.id, None)
            with contextlib.suppress(OSError):
                self.settings_path(principal.id).unlink()

    def bind(self, principal: Principal, session_id: str, how: str) -> None:
        before = principal.actor().name
        write = self.grants.bind_session(principal.id, session_id)
        self.gate.record(
            AuditDraft(
                actor="system",
                action="agent.bind",
                outcome="ok",
                target=principal.pane_id,
                details={
                    "principal": principal.id,
                    "harness": principal.harness,
                    "session_id": session_id,
                    "from": before,
                    "to": f"agent:{principal.harness}:{session_id}",
                    "how": how,
                },
            ),
            [write],
        )

    def _codex_home(self, principal: Principal) -> str | None:
        known = self.launched.get(principal.id)
        if known is not None and known.codex_home:
            return known.codex_home
        launcher = self.config.launchers.get(principal.launcher or "")
        if launcher is not None and launcher.env.get("CODEX_HOME"):
            return launcher.env["CODEX_HOME"]
        return os.environ.get("CODEX_HOME") or str(Path.home() / ".codex")

    async def sweep_once(self) -> None:
        await self.sweep_launches()
        for principal in self.grants.active():
            if principal.owner is None or principal.pid is None:
                continue
            if not await self.ensure_live(principal):
                continue
            if principal.harness == "codex" and principal.session_id is None:
                known = self.launched.get(principal.id)
                found = await asyncio.to_thread(
                    find_codex_session,
                    principal.pid,
                    self._codex_home(principal),
                    known.cwd if known else None,
                    known.started if known else None,
                )
                if found is not None:
                    session_id, how = found
                    try:
                        self.bind(principal, session_id, how)
                    except OpenbusError as exc:
                        log.warning("could not bind %s to %s: %s", principal.id, session_id, exc)
        self._remove_stale_env_files()

    async def sweep_launches(self) -> None:
        """Follow every live launch: an ended process is ``exited`` while the tmux server that
        ran it still runs, ``lost`` once that server is gone (restore offers those); a Codex
        launch learns its session id from the rollout file its process holds open."""
        live = self.records.live()
        if not live:
            return
        server: str | None = None
        looked = False
        for record in live:
            identity = identity_of(record.pid)
            if identity is not None and identity.start == record.pid_start:
                if record.harness == "codex" and record.session_id is None:
                    found = await asyncio.to_thread(
                        find_codex_session, record.pid, None, None, None
                    )
                    if found is not None:
                        self._bind_launch(record, found[0])
                continue
            if not looked:
                server, looked = await self.server_identity(), True
            state = "lost" if record.server is not None and record.server != server else "exited"
            self.gate.record(
                AuditDraft(
                    actor="system",
                    action=f"agent.{state}",
                    outcome="ok",
                    target=record.pane_id,
                    details={
                        "launch": record.id,
                        "harness": record.harness,
                        "session_id": record.session_id,
                    },
                ),
                [self.records.set_state(record.id, state)],
            )

    def _bind_launch(self, record: LaunchRecord, session_id: str) -> None:
        self.gate.record(
            AuditDraft(
                actor="system",
                action="launch.bind",
                outcome="ok",
                target=record.pane_id,
                details={"launch": record.id, "harness": record.harness, "session_id": session_id},
            ),
            [self.records.set_session(record.id, session_id)],
        )

    def _remove_stale_env_files(self) -> None:
        if not self.env_dir.is_dir():
            return
        now = self.clock.now()
        for path in self.env_dir.glob("env-*.json"):
            with contextlib.suppress(OSError):
                if now - path.stat().st_mtime > STALE_ENV_FILE_SECONDS:
                    path.unlink()
        active = {p.id for p in self.grants.active()}
        for path in self.env_dir.glob("agent-*.json"):
            if path.stem.removeprefix("agent-") in active:
                continue
            with contextlib.suppress(OSError):  # old enough: not a launch still committing
                if now - path.stat().st_mtime > STALE_ENV_FILE_SECONDS:
                    path.unlink()


@dataclass(frozen=True)
class LiveTokens:
    """The MCP endpoint's verifier: a token's principal while it is active and its process
    lives in its pane (a principal whose process exited, or whose pane was closed, is revoked
    on the spot)."""

    grants: Grants
    launches: LaunchService

    async def verify(self, token: str) -> Principal | None:
        await self.launches.committing(token)
        principal = self.grants.by_token(token)
        if principal is None or not principal.active:
            return None
        return principal if await self.launches.ensure_live(principal) else None


__all__ = ["LAUNCH", "LaunchService", "LiveTokens"]
