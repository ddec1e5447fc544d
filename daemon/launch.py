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
   given back when nothing of it runs) and cannot read another's environment, memory or files
   nor open the agents' tmux socket; ``shared`` mode runs every agent as the server's user;
4. attaches the principal to the new pane and process and returns the pane id and the
   incarnation (the directory's, once its watcher has seen the new pane).

The mint and the attach are queued on the gate call, so they commit with the launch's audit
record or not at all (a window whose token was never committed simply fails to connect).

Afterwards (``LaunchService.tick`` every second, and ``LiveTokens.verify`` on each MCP
request):

* a principal whose process is gone (pane exited, or its pid now names another process: the
  pid and its start time are stored with the principal, so this holds after a restart) is
  suspended when it is bound to a session (``agent.suspended``: its grant returns when that
  session is resumed) and revoked otherwise (``agent.revoked``); either way the revocation
  hooks run (its MCP sessions close) and its token fails from then on;
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
import sys
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from openbus.daemon.config import Config, Launcher
from openbus.daemon.connect import Connect
from openbus.daemon.core.actions import Action
from openbus.daemon.core.agent_pool import PoolUser
from openbus.daemon.core.audit import AuditDraft
from openbus.daemon.core.consent import Tier
from openbus.daemon.directory import Directory
from openbus.daemon.feature import Feature
from openbus.daemon.gate import Call, Gate
from openbus.daemon.grants import Grants, Principal
from openbus.daemon.launch_plan import (
    TOKEN_ENV,
    LaunchPlan,
    as_pool_user,
    check_cwd,
    check_prompt,
    gemini_settings_refusal,
    plan_launch,
)
from openbus.daemon.launch_proc import ProcessIdentity, find_codex_session, identity_of
from openbus.daemon.launch_records import LaunchRecord, LaunchRecords
from openbus.daemon.tmux.adapter import Tmux
from openbus.kernel.clock import Clock, Random
from openbus.kernel.errors import BadRequest, OpenbusError
from openbus.kernel.scopes import Preset, parse_preset

log = logging.getLogger("openbus.launch")

LAUNCH = Action("launch", tier=Tier.HUMAN, mutates=True)
STALE_ENV_FILE_SECONDS = 60.0
INCARNATION_POLLS = 100  # at most 2 s, re-probing the pane at each poll
INCARNATION_POLL_SECONDS = 0.02


class AgentUserPool(Protocol):
    """Where each agent's own uid comes from on a hosted box in ``pool`` mode."""

    def acquire(self) -> PoolUser: ...

    def started(self, user: PoolUser, pid: int) -> None: ...

    def release(self, user: PoolUser) -> None: ...

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

    def _server_is_another_users(self) -> bool:
        socket = self.config.tmux.socket
        try:
            return socket is not None and socket.stat().st_uid != os.getuid()
        except OSError:
            return False

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

    async def _incarnation(self, pane: str, identity: ProcessIdentity | None, harness: str) -> str:
        """The directory's incarnation for the new pane, once the watcher has seen it run the
        harness (bounded wait); else a local one from the process identity."""
        if identity is not None:
            seen: str | None = None
            for _ in range(INCARNATION_POLLS):
                with contextlib.suppress(OpenbusError):
                    entry = self.directory.entry(pane)
                    if entry.info.pid == identity.pid:
                        seen = entry.incarnation
                        if entry.harness == harness:
                            return str(seen)
                await asyncio.sleep(INCARNATION_POLL_SECONDS)
                self.directory.reprobe(pane)
            if seen:
                return seen
        if identity is None:
            return f"{pane}:unknown"
        return f"{pane}:{identity.pid}:{identity.start}"

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
        return {
            **started,
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
    ) -> dict[str, Any]:
        """Run ``plan`` in a new window (or ``respawn`` that pane), its token in the
        environment only; attach the principal to the new process and record the launch, all
        committed with ``call``'s audit record."""
        env = dict(plan.env)
        if token is not None:
            env[TOKEN_ENV] = token
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
        pane, pid, agent_user = await self._open(
            plan.argv,
            env,
            cwd,
            launcher.name,
            respawn=respawn,
            details=call.details,
            session=session,
        )
        identity = identity_of(pid)
        incarnation = await self._incarnation(pane, identity, launcher.harness)
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
                agent_user.name if agent_user else None,
            )
            call.after_commit.append(lambda: self.launched.__setitem__(record.principal, record))
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
            "agent_user": agent_user.name if agent_user else None,
            "actor": actor,
        }

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
    ) -> tuple[str, int, PoolUser | None]:
        """Start ``argv`` with ``env`` in a new window, or in pane ``respawn``, never putting
        the environment in any argv. The caller of a respawn has seen the pane's agent end;
        what it left holding the pane (a tool's child process) goes with ``respawn-pane -k``."""
        agent_user: PoolUser | None = None
        if self._server_is_another_users():
            # Hosted: the agents' tmux server runs as another user, who could not open a file
            # only the daemon may read. Its environment goes over the control client's stdin
            # (``new-window -e``), which is never argv either.
            words = list(argv)
            pool = self.pool
            if pool is not None:
                agent_user = pool.acquire()
                details["agent_user"] = agent_user.name
                words = as_pool_user(words, user=agent_user.name, env_names=list(env))
            try:
                if respawn is not None:
                    pane = respawn
                    pid = await self.tmux.respawn_pane(respawn, words, env=env, cwd=cwd, kill=True)
                else:
                    pane, pid = await self.tmux.new_window(
                        words, env=env, cwd=cwd, name=name, session=session
                    )
            except BaseException:
                if pool is not None and agent_user is not None:
                    pool.release(agent_user)
                raise
            if pool is not None and agent_user is not None:
                pool.started(agent_user, pid)
            return pane, pid, agent_user
        env_file = self._write_env_file(env)
        wrapper = [sys.executable, "-m", "openbus.daemon.launch_exec", str(env_file), "--", *argv]
        try:
            if respawn is not None:
                pane = respawn
                pid = await self.tmux.respawn_pane(respawn, wrapper, cwd=cwd, kill=True)
            else:
                pane, pid = await self.tmux.new_window(wrapper, cwd=cwd, name=name, session=session)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                env_file.unlink()
            raise
        return pane, pid, None

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

    async def ensure_live(self, principal: Principal) -> bool:
        """False (and the principal suspended or revoked) when its process has exited."""
        if self._alive(principal):
            return True
        await self.ended(principal, "its pane's process exited")
        return False

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
            if not self._alive(principal):
                await self.ended(principal, "its pane's process exited")
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
    lives (a principal whose process exited is revoked on the spot)."""

    grants: Grants
    launches: LaunchService

    async def verify(self, token: str) -> Principal | None:
        principal = self.grants.by_token(token)
        if principal is None or not principal.active:
            return None
        return principal if await self.launches.ensure_live(principal) else None


__all__ = ["LAUNCH", "LaunchService", "LiveTokens"]
