"""Resume a past session, and restore the fleet a lost tmux server took with it.

Theory of operation
-------------------
``Resumer`` is the one port that reopens a session (the human's ``openbus resume HARNESS
ID``, each session of ``openbus restore``, and later control's ``resume_session`` act verb):

* ``resume(call, harness=, session_id=, owner=)`` reopens the session in a new tmux window:
  the launcher that last ran it (``launch_records``), else the configured launcher of that
  harness; the session's indexed cwd (history), else the launch's; the launcher's environment
  (on a hosted box in pool mode, as the pool user it ran as: its home holds the transcript);
  its grant, if it has one: the session's principal (suspended when its process exited)
  rejoins with a fresh token, so it comes back with the same preset and everything keyed on
  it. A session still running, a subagent, or one whose transcript is gone is refused naming
  the reason. A session with no grant (never connected, or turned Off by the human) resumes
  Off unless a preset is asked for.
* ``restore(call, owner=, dry_run=)`` lists the resumable top-level sessions that were live
  in panes of a tmux server that is gone (``lost`` launches) and, unless ``dry_run``, resumes
  them all at once (concurrently: tmux serialises only its own commands), each one its own
  ``session.resume`` action and audit record through the gate.
"""

from __future__ import annotations

import asyncio
from typing import Any

from openbus.daemon.config import Config, Launcher
from openbus.daemon.connect import Connect
from openbus.daemon.core.actions import Action
from openbus.daemon.core.consent import Tier
from openbus.daemon.gate import Call, Gate
from openbus.daemon.grants import Grants, Principal
from openbus.daemon.history.index import HistoryIndex
from openbus.daemon.history.model import SessionEntry
from openbus.daemon.launch import LaunchService
from openbus.daemon.launch_plan import plan_resume, resume_unavailable
from openbus.daemon.launch_proc import identity_of
from openbus.daemon.launch_records import LaunchRecord
from openbus.kernel.errors import BadRequest, Conflict, NotFound, OpenbusError, Unavailable
from openbus.kernel.harnesses import HARNESSES
from openbus.kernel.scopes import Preset, parse_preset

RESUME = Action("session.resume", tier=Tier.HUMAN, outside_effects=True)
RESTORE = Action("session.restore", tier=Tier.HUMAN, outside_effects=True)
SERVER_GONE_SECONDS = 10.0
SERVER_POLL_SECONDS = 0.05


class Resumer:
    def __init__(
        self,
        *,
        config: Config,
        gate: Gate,
        grants: Grants,
        connect: Connect,
        launch: LaunchService,
        history: HistoryIndex,
    ) -> None:
        self.config = config
        self.gate = gate
        self.grants = grants
        self.connect = connect
        self.launch = launch
        self.history = history
        gate.register(RESUME, self._resume_action)
        gate.register(RESTORE, self._restore_action)

    # ------------------------------------------------------------------ the port

    async def resume(
        self,
        call: Call,
        *,
        harness: str,
        session_id: str,
        owner: str,
        preset: Preset | None = None,
    ) -> dict[str, Any]:
        """Reopen ``(harness, session_id)`` in a new window with its grant (see the module)."""
        call.target = f"{harness}:{session_id}"
        call.details.update({"harness": harness, "session_id": session_id})
        last = self.launch.records.of_session(harness, session_id)
        entry = self._entry(harness, session_id)
        if last is None and entry is None:
            raise NotFound(f"no session {harness}:{session_id} is known", field="session_id")
        if entry is not None and entry.subagent:
            raise Conflict(f"{harness}:{session_id} is a subagent: it cannot be resumed alone")
        if entry is not None and entry.resume_argv is None:
            raise Conflict(
                f"{harness}:{session_id} cannot be resumed: its transcript is gone",
                field="session_id",
            )
        if last is not None and last.state == "live" and _runs(last):
            raise Conflict(
                f"{harness}:{session_id} is running in {last.pane_id}", field="session_id"
            )
        launcher = self._launcher(harness, last)
        self.connect.check_harness(harness)
        principal = self.grants.by_session(harness, session_id)
        if principal is not None and principal.owner != owner:
            raise Conflict(f"{harness}:{session_id} holds another user's grant")
        if principal is not None and principal.active and principal.pid:
            now = identity_of(principal.pid)
            if now is not None and now.start == principal.pid_start:
                raise Conflict(
                    f"{harness}:{session_id} is running in {principal.pane_id}",
                    field="session_id",
                )
        wanted = self._preset(principal, preset)
        if wanted is not Preset.OFF:
            cap = self.connect.check_cap(owner, wanted)
            call.details["cap"] = cap.preset.value
        cwd = (entry.cwd if entry is not None else None) or (last.cwd if last else None)
        if cwd is None:
            raise Conflict(f"the directory {harness}:{session_id} ran in is not known")
        plan = plan_resume(
            launcher, session_id=session_id, preset=wanted, mcp_url=self.launch.mcp_url
        )
        principal_id: str | None = None
        token: str | None = None
        if plan.connect:
            if principal is not None:
                token, write = self.grants.rejoin(principal.id)
                principal_id = principal.id
                call.details["rejoined"] = True
            else:
                principal_id, token, write = self.grants.mint(
                    harness=harness,
                    owner=owner,
                    preset=wanted,
                    launcher=launcher.name,
                    session_id=session_id,
                )
            call.write(write)
            if wanted is not (principal.preset if principal else wanted):
                call.write(self.grants.set_preset(principal_id, wanted))
            call.details["principal"] = principal_id
        call.details.update({"launcher": launcher.name, "preset": wanted.value, "cwd": cwd})
        started = await self.launch.spawn(
            call,
            owner=owner,
            launcher=launcher,
            plan=plan,
            cwd=cwd,
            principal_id=principal_id,
            token=token,
            agent_user=last.agent_user if last is not None else None,
        )
        return {
            **started,
            "preset": wanted.value if plan.connect else Preset.OFF.value,
            "principal": principal_id,
        }

    async def restore(self, call: Call, *, owner: str, dry_run: bool) -> dict[str, Any]:
        """Bring back every session that was live when its tmux server was lost."""
        await self.launch.sweep_launches()  # a loss a moment ago is seen before the list
        candidates = self.restorable(owner)
        call.details.update({"count": len(candidates), "dry_run": dry_run})
        listing = [self._describe(r) for r in candidates]
        if dry_run:
            return {"sessions": listing, "restored": []}
        if candidates:
            await self._fresh_server({r.server for r in candidates if r.server})

        async def one(record: LaunchRecord) -> dict[str, Any]:
            try:
                result = await self.gate.run(
                    call.actor,
                    RESUME.name,
                    {"harness": record.harness, "session_id": record.session_id},
                )
                return {"ok": True, **result}
            except OpenbusError as exc:
                return {
                    "ok": False,
                    "harness": record.harness,
                    "session_id": record.session_id,
                    "error": exc.message,
                }

        results = await asyncio.gather(*(one(r) for r in candidates))
        call.details["restored"] = sum(1 for r in results if r["ok"])
        return {"sessions": listing, "restored": list(results)}

    def restorable(self, owner: str) -> list[LaunchRecord]:
        latest: dict[tuple[str, str], LaunchRecord] = {}
        for record in self.launch.records.lost():
            if record.owner != owner or record.session_id is None:
                continue
            launcher = self.config.launchers.get(record.launcher)
            if launcher is None or resume_unavailable(launcher) is not None:
                continue
            entry = self._entry(record.harness, record.session_id)
            if entry is not None and (entry.subagent or entry.resume_argv is None):
                continue
            latest[(record.harness, record.session_id)] = record
        return sorted(latest.values(), key=lambda r: r.created)

    # ------------------------------------------------------------------ helpers

    async def _fresh_server(self, lost: set[str]) -> None:
        """Wait until the lost server has really gone (``kill-server`` returns before its
        server exits, and a window opened on it would die with it), then start a new one."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SERVER_GONE_SECONDS
        while True:
            now = await self.launch.server_identity()
            if now is not None and now not in lost:
                break  # a new server runs
            if now is None and not self.launch.tmux.reachable():
                break  # nothing listens on the socket any more
            # the lost server still answers (it may hold no session and report no pid): a
            # session opened on it now would die with it
            if loop.time() > deadline:
                raise Unavailable("the lost tmux server is still shutting down; try again")
            await asyncio.sleep(SERVER_POLL_SECONDS)
        await self.launch.tmux.ensure_session()

    def _describe(self, record: LaunchRecord) -> dict[str, Any]:
        principal = self.grants.by_session(record.harness, str(record.session_id))
        return {
            **record.to_dict(),
            "preset": principal.preset.value if principal is not None else Preset.OFF.value,
        }

    def _entry(self, harness: str, session_id: str) -> SessionEntry | None:
        try:
            return self.history.get(harness, session_id)
        except OpenbusError:
            return None

    def _launcher(self, harness: str, last: LaunchRecord | None) -> Launcher:
        if last is not None and last.launcher in self.config.launchers:
            return self.config.launchers[last.launcher]
        named = self.config.launchers.get(harness)
        if named is not None and named.harness == harness:
            return named
        for launcher in self.config.launchers.values():
            if launcher.harness == harness and resume_unavailable(launcher) is None:
                return launcher
        raise Conflict(f"no launcher is configured for {harness}", field="harness")

    @staticmethod
    def _preset(principal: Principal | None, asked: Preset | None) -> Preset:
        if asked is not None:
            return asked
        return principal.preset if principal is not None else Preset.OFF

    # ------------------------------------------------------------------ gate actions

    async def _resume_action(self, call: Call) -> Any:
        owner = call.actor.user
        if owner is None:
            raise BadRequest("only a person can resume a session", field="actor")
        harness, session_id = session_ref(call.params)
        given = call.params.get("preset")
        preset = None if given in (None, "") else parse_preset(given)
        return await self.resume(
            call, harness=harness, session_id=session_id, owner=owner, preset=preset
        )

    async def _restore_action(self, call: Call) -> Any:
        owner = call.actor.user
        if owner is None:
            raise BadRequest("only a person can restore sessions", field="actor")
        return await self.restore(call, owner=owner, dry_run=bool(call.params.get("dry_run")))


def session_ref(params: Any) -> tuple[str, str]:
    """``(harness, session_id)`` of a resume's parameters, checked."""
    harness = params.get("harness")
    session_id = params.get("session_id")
    if not isinstance(harness, str) or harness not in HARNESSES:
        raise BadRequest(f"harness must be one of {', '.join(HARNESSES)}", field="harness")
    if not isinstance(session_id, str) or not session_id or len(session_id) > 200:
        raise BadRequest("a session id is required (search_history finds it)", field="session_id")
    return harness, session_id


def _runs(record: LaunchRecord) -> bool:
    now = identity_of(record.pid)
    return now is not None and now.start == record.pid_start
