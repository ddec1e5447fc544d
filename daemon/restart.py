"""Restart-to-connect, the thin adapter over ``core.restart``'s state machine.

Theory of operation
-------------------
``Restarts`` answers ``openbus connect PANE --preset P`` for an agent that holds no token
(``Connect.on_unconnected``). It offers a restart only where it can reproduce the launch
exactly: the pane's process is one openbus launched (``launch_records``: same pid and start
time) from a structured launcher whose harness has a resume command and an endpoint override,
with its session id known. Everything else is refused naming the reason (a shell or an agent
typed into one, an opaque launcher, a harness with no resume, a Codex session not yet seen).
An offer raises the card "Restart this agent to connect it?".

On approval the sequence runs in a task of its own, each step persisted in ``restarts``
(one row per pane, the record's JSON) and audited as ``restart.step`` *before* the adapter
acts on the next one:

1. wait until the pane is idle with an empty composer (a draft holds the restart; a changed
   incarnation abandons it); persist the record (PLANNED) with the pane's own
   ``remain-on-exit``;
2. set ``remain-on-exit on`` (HELD); under the pane's send lock recheck idle and empty on a
   fresh capture, then type the harness's exit command (EXITING), so it flushes its transcript;
3. wait for the process to end (EXITED); the dead pane stays;
4. ``respawn-pane`` the same pane with the session's resume argv in the indexed cwd, under the
   launcher's environment plus the endpoint override and a fresh token, on a hosted box as
   the pool user the agent ran as (its home holds the transcript) (RESPAWNED): the
   session's suspended principal rejoins with it, or a new one is minted bound to the
   session;
5. restore the pane's own ``remain-on-exit`` (RESTORED), attach the principal to the new
   process (BOUND) and close the record (CLOSED, audited ``restart.done``).

A failed or timed-out step, and every record found open when the daemon starts, takes the
recovery path (``core.restart.recover``): a dead pane is respawned as planned, a pane whose
agent still runs is left alone, and either way the option is restored and the record closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from openbus.daemon.cards import Cards
from openbus.daemon.config import Config, Launcher
from openbus.daemon.connect import Connect
from openbus.daemon.core.actions import Action
from openbus.daemon.core.actors import SYSTEM
from openbus.daemon.core.audit import AuditDraft
from openbus.daemon.core.consent import Card, CardState, Tier
from openbus.daemon.core.restart import (
    CARD_SUMMARY,
    EXIT_COMMANDS,
    Event,
    PaneSeen,
    RestartRecord,
    Step,
    recover,
)
from openbus.daemon.directory import Directory
from openbus.daemon.feature import Feature
from openbus.daemon.gate import Call, Gate
from openbus.daemon.grants import Grants
from openbus.daemon.history.index import HistoryIndex
from openbus.daemon.launch import LaunchService
from openbus.daemon.launch_plan import connect_unavailable, plan_resume, resume_unavailable
from openbus.daemon.launch_proc import identity_of
from openbus.daemon.launch_records import LaunchRecord
from openbus.daemon.messaging.delivery import PASTE_BURST_SECONDS
from openbus.daemon.messaging.fleet import DirectoryFleet, normalize
from openbus.daemon.tmux.adapter import Tmux
from openbus.kernel.clock import Clock
from openbus.kernel.errors import Conflict, NotFound, OpenbusError, Unavailable
from openbus.kernel.scopes import Preset

log = logging.getLogger("openbus.restart")

RESPAWN = Action("restart.respawn", tier=Tier.HUMAN, outside_effects=True)  # the system's own call
OFFERS = Action("restart.offers", tier=Tier.HUMAN)
POLL_SECONDS = 0.1
LOOKS = 5  # recovery's looks at a pane tmux does not answer about
LOOK_AGAIN_SECONDS = 1.0
REMAIN = "remain-on-exit"

Write = Callable[[sqlite3.Connection], None]


@dataclass(frozen=True)
class RestartTimeouts:
    idle: float = 600.0  # for idle with an empty composer (a draft holds the restart)
    exit: float = 30.0  # for the agent's process to end after its exit command
    enter_again: float = 3.0  # press Enter once more if the exit command is still in view


class Restarts(Feature):
    name = "restarts"

    def __init__(
        self,
        *,
        config: Config,
        gate: Gate,
        grants: Grants,
        cards: Cards,
        connect: Connect,
        launch: LaunchService,
        directory: Directory,
        tmux: Tmux,
        history: HistoryIndex,
        clock: Clock,
        timeouts: RestartTimeouts = RestartTimeouts(),
    ) -> None:
        self.config = config
        self.clock = clock
        self.gate = gate
        self.grants = grants
        self.cards = cards
        self.connect = connect
        self.launch = launch
        self.directory = directory
        self.tmux = tmux
        self.history = history
        self.fleet = DirectoryFleet(directory, tmux)
        self.timeouts = timeouts
        self.db = grants.db
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self.done = 0
        self.recovered = 0
        connect.on_unconnected(self.offer)
        cards.listeners.append(self._on_card)
        gate.register(OFFERS, self._offers)

    # ------------------------------------------------------------------ feature

    async def start(self) -> None:
        """Finish every restart record a previous daemon left open (in the background: an
        agent told to quit may take a moment to end)."""
        loop = asyncio.get_running_loop()
        for record in self.open_records():
            task = loop.create_task(
                self._recover(record, "the daemon restarted during the restart")
            )
            self._track(record.pane, task)

    def _track(self, pane: str, task: asyncio.Task[None]) -> None:
        self._tasks[pane] = task
        task.add_done_callback(lambda _: self._tasks.pop(pane, None))

    async def stop(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()
        for task in list(self._tasks.values()):
            with contextlib.suppress(BaseException):
                await task
        self._tasks.clear()

    def health(self) -> dict[str, Any]:
        return {"running": len(self._tasks), "done": self.done, "recovered": self.recovered}

    # ------------------------------------------------------------------ records

    def open_records(self) -> list[RestartRecord]:
        rows = self.db.conn.execute("SELECT record FROM restarts ORDER BY created").fetchall()
        return [r for r in (RestartRecord.from_json(row[0]) for row in rows) if r.open]

    def _save(self, record: RestartRecord) -> Write:
        now = self.clock.now()

        def write(conn: sqlite3.Connection) -> None:
            if record.open:
                conn.execute(
                    "INSERT OR REPLACE INTO restarts (pane_id, record, created) VALUES (?,?,?)",
                    (record.pane, record.to_json(), now),
                )
            else:
                conn.execute("DELETE FROM restarts WHERE pane_id = ?", (record.pane,))

        return write

    def _step(
        self, record: RestartRecord, event: Event | None, *extra: Write, **changes: Any
    ) -> RestartRecord:
        """Move the record (or persist it as it is) and audit the step, in one transaction."""
        moved = (
            record.advance(event, **changes) if event is not None else replace(record, **changes)
        )
        self.gate.record(
            AuditDraft(
                actor="system",
                action="restart.done" if not moved.open else "restart.step",
                outcome="ok",
                target=moved.pane,
                details={
                    "step": moved.step.value,
                    "session_id": moved.session_id,
                    "harness": moved.harness,
                    **({"outcome": moved.outcome} if moved.outcome else {}),
                    **({"principal": moved.principal} if moved.principal else {}),
                },
            ),
            [self._save(moved), *extra],
        )
        return moved

    # ------------------------------------------------------------------ the offer

    def restartable(self, pane: str) -> tuple[LaunchRecord, Launcher]:
        """The launch a restart would reproduce, or the refusal saying why there is none."""
        try:
            entry = self.directory.entry(pane)
        except OpenbusError:
            raise NotFound(f"no such pane {pane}", field="pane") from None
        record = self.launch.records.live_in(pane)
        pid = entry.info.pid
        now = identity_of(pid)
        if record is None or record.pid != pid or now is None or record.pid_start != now.start:
            what = "a shell" if entry.harness == "shell" else f"this {entry.harness} agent"
            raise Conflict(
                f"{pane} runs {what}, which openbus did not launch from a structured launcher "
                "(typed into a shell, or started some other way): restarting it could not "
                "reproduce its launch; connect it at its next "
                "`openbus launch LAUNCHER --preset ...`",
                field="pane",
            )
        launcher = self.config.launchers.get(record.launcher)
        if launcher is None:
            raise Conflict(
                f"{pane} was launched from {record.launcher!r}, which is no longer configured",
                field="pane",
            )
        reason = resume_unavailable(launcher) or connect_unavailable(launcher)
        if reason is not None:
            raise Conflict(f"{pane} cannot be restarted to connect it: {reason}", field="pane")
        if record.session_id is None:
            raise Conflict(
                f"{pane}'s session id is not known yet (its harness reports it once its "
                "session has started): try again after its first turn",
                field="pane",
            )
        return record, launcher

    async def offer(self, call: Call, pane: str, preset: Preset) -> Any:
        owner = call.actor.user
        assert owner is not None
        record, launcher = self.restartable(pane)
        if record.owner != owner:
            raise Conflict(f"{pane} was launched by another user", field="pane")
        self.connect.check_harness(launcher.harness)
        if pane in self._tasks or self._open_for(pane):
            raise Conflict(f"{pane} is already being restarted", field="pane")
        entry = self.directory.entry(pane)
        card, write = self.cards.new(
            kind="restart_to_connect",
            requester=str(call.actor),
            owner=owner,
            summary=(
                f"{CARD_SUMMARY} {pane} ({launcher.harness}, session {record.session_id}) quits "
                f"and resumes the same conversation with Connect {preset.value}; terminal state "
                "the transcript lacks is lost. It waits until the agent is idle with an empty "
                "composer."
            ),
            target=pane,
            payload={
                "pane": pane,
                "incarnation": entry.incarnation,
                "preset": preset.value,
                "session_id": record.session_id,
                "launcher": launcher.name,
                "launch": record.id,
            },
        )
        call.write(write)
        call.outcome = "card"
        call.details.update({"card": card.id, "restart": True, "session_id": record.session_id})
        call.after_commit.append(lambda: self.cards.notify(card))
        return {
            "pane": pane,
            "preset": preset.value,
            "principals": [],
            "restart": {"card": card.id, "summary": CARD_SUMMARY, "state": "pending"},
        }

    async def _offers(self, call: Call) -> Any:
        """The caller's running agents without a token: whether a restart can connect each,
        and if not, why (what a page needs to show only the toggles it can honour)."""
        owner = call.actor.user
        offers = []
        for record in self.launch.records.live():
            if record.owner != owner or self.grants.by_pane(record.pane_id):
                continue
            try:
                self.restartable(record.pane_id)
                reason = None
            except OpenbusError as exc:
                reason = exc.message
            if reason is not None and "did not launch" in reason:
                continue  # no longer the process openbus launched there
            offers.append(
                {
                    "pane": record.pane_id,
                    "harness": record.harness,
                    "launcher": record.launcher,
                    "session_id": record.session_id,
                    "restartable": reason is None,
                    "reason": reason,
                    "restarting": record.pane_id in self._tasks,
                }
            )
        call.details["count"] = len(offers)
        return {"offers": offers}

    def _open_for(self, pane: str) -> bool:
        return any(r.pane == pane for r in self.open_records())

    def _on_card(self, card: Card) -> None:
        if card.kind != "restart_to_connect" or card.state is not CardState.APPROVED:
            return
        pane = str(card.payload.get("pane"))
        if pane in self._tasks:
            return
        self._track(pane, asyncio.get_running_loop().create_task(self._run(card)))

    # ------------------------------------------------------------------ the sequence

    async def _run(self, card: Card) -> None:
        payload = card.payload
        pane = str(payload["pane"])
        record: RestartRecord | None = None
        try:
            launch, launcher = self.restartable(pane)
            await self._wait_deliverable(pane, str(payload["incarnation"]))
            record = self._step(
                RestartRecord(
                    pane=pane,
                    incarnation=str(payload["incarnation"]),
                    pid=launch.pid,
                    pid_start=launch.pid_start,
                    remain_on_exit=await self.tmux.pane_option(pane, REMAIN),
                    harness=launch.harness,
                    session_id=str(launch.session_id),
                    launcher=launcher.name,
                    preset=str(payload["preset"]),
                    owner=card.owner,
                    cwd=self._cwd(launch),
                    card=card.id,
                    agent_user=launch.agent_user,
                ),
                None,
            )
            await self.tmux.set_option(pane, REMAIN, "on")
            record = self._step(record, Event.HOLD)
            async with self.fleet.send_lock(pane):
                await self._recheck(pane, record)
                record = self._step(record, Event.EXIT)
                await self._type_exit(pane, record)
            await self._wait_ended(record)
            record = self._step(record, Event.ENDED)
            record = await self._respawn(record)
            record = await self._restore_option(record)
            record = self._bind(record)
            record = self._step(record, Event.CLOSE, outcome="connected")
            self.done += 1
        except asyncio.CancelledError:
            raise  # the daemon stops: the open record is finished at its next start
        except Exception as exc:
            reason = exc.message if isinstance(exc, OpenbusError) else "internal error"
            if not isinstance(exc, OpenbusError):
                log.exception("restart of %s failed", pane)
            if record is None:
                self.gate.record(
                    AuditDraft(
                        actor="system",
                        action="restart.abandoned",
                        outcome="refused",
                        target=pane,
                        details={"card": card.id, "reason": reason},
                    )
                )
                return
            await self._recover(record, reason)

    def _cwd(self, launch: LaunchRecord) -> str | None:
        """The session's indexed cwd, else the launch's."""
        try:
            indexed = self.history.get(launch.harness, str(launch.session_id)).cwd
        except OpenbusError:
            indexed = None
        return indexed or launch.cwd

    async def _wait_deliverable(self, pane: str, incarnation: str) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeouts.idle
        while True:
            view = self.fleet.view(pane)
            if view is None or view.incarnation != incarnation:
                raise Conflict(f"{pane} now runs another process: the restart is abandoned")
            if view.deliverable:
                return
            if loop.time() > deadline:
                raise Unavailable(
                    f"{pane} was not idle with an empty composer within "
                    f"{self.timeouts.idle:g}s: the restart is abandoned"
                )
            await asyncio.sleep(POLL_SECONDS)

    async def _recheck(self, pane: str, record: RestartRecord) -> None:
        """Idle with an empty composer on a fresh capture, just before the exit command."""
        await self._wait_deliverable(pane, record.incarnation)
        reading = self.fleet.reparse(pane, normalize(await self.fleet.capture(pane)))
        if reading is None or reading.state != "idle" or reading.composer_empty is not True:
            raise Conflict(f"{pane} is no longer idle with an empty composer")

    async def _type_exit(self, pane: str, record: RestartRecord) -> None:
        await self.fleet.paste(pane, EXIT_COMMANDS[record.harness])
        await asyncio.sleep(PASTE_BURST_SECONDS.get(record.harness, 0.1))
        await self.fleet.enter(pane)

    def _agent_alive(self, record: RestartRecord) -> bool:
        now = identity_of(record.pid)
        return now is not None and now.start == record.pid_start

    async def _wait_ended(self, record: RestartRecord) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeouts.exit
        again = loop.time() + self.timeouts.enter_again
        while self._agent_alive(record):
            if loop.time() > deadline:
                raise Unavailable(
                    f"{record.pane}'s agent did not quit within {self.timeouts.exit:g}s"
                )
            if loop.time() > again:  # a completion menu took the first Enter
                again = deadline
                with contextlib.suppress(OpenbusError):
                    await self.fleet.enter(record.pane)
            await asyncio.sleep(POLL_SECONDS)

    async def _respawn(self, record: RestartRecord) -> RestartRecord:
        """Resume the session in the dead pane, with a fresh token for its principal."""
        launcher = self.config.launchers[record.launcher]
        preset = Preset(record.preset)
        plan = plan_resume(
            launcher, session_id=record.session_id, preset=preset, mcp_url=self.launch.mcp_url
        )
        grant = Call(SYSTEM, RESPAWN, {})
        principal_id, token = self._token_for(grant, record, preset)
        # the grant commits before any process holds its token: a crash from here on leaves a
        # record naming the principal that recovery attaches to whatever the pane then runs
        record = self._step(record, None, *grant.writes, principal=principal_id)
        call = Call(SYSTEM, RESPAWN, {})
        started = await self.launch.spawn(
            call,
            owner=record.owner,
            launcher=launcher,
            plan=plan,
            cwd=record.cwd,
            principal_id=principal_id,
            token=token,
            respawn=record.pane,
            agent_user=record.agent_user,
        )
        moved = self._step(record, Event.RESPAWN, *call.writes, new_pid=started["pid"])
        for fn in call.after_commit:
            fn()
        return moved

    def _token_for(self, call: Call, record: RestartRecord, preset: Preset) -> tuple[str, str]:
        """The session's principal with a new token (it rejoins), else a new one bound to it."""
        known = self.grants.by_session(record.harness, record.session_id)
        if known is not None and known.owner == record.owner:
            token, write = self.grants.rejoin(known.id)
            call.write(write)
            call.write(self.grants.set_preset(known.id, preset))
            return known.id, token
        principal_id, token, write = self.grants.mint(
            harness=record.harness,
            owner=record.owner,
            preset=preset,
            launcher=record.launcher,
            session_id=record.session_id,
        )
        call.write(write)
        return principal_id, token

    async def _restore_option(self, record: RestartRecord) -> RestartRecord:
        await self._put_option_back(record)
        return self._step(record, Event.RESTORE)

    async def _put_option_back(self, record: RestartRecord) -> None:
        if record.remain_on_exit is None:
            await self.tmux.unset_option(record.pane, REMAIN)
        else:
            await self.tmux.set_option(record.pane, REMAIN, record.remain_on_exit)

    def _bind(self, record: RestartRecord) -> RestartRecord:
        """The principal is already attached with the respawn; the step says so."""
        return self._step(record, Event.BIND)

    # ------------------------------------------------------------------ recovery

    async def _look(self, pane: str) -> PaneSeen:
        """The pane as tmux has it; a tmux that does not answer is asked again (bounded)
        before the pane is taken for gone."""
        info = None
        for _ in range(LOOKS):
            try:
                info = await self.tmux.pane_if_there(pane)
                break
            except Unavailable:
                await asyncio.sleep(LOOK_AGAIN_SECONDS)
        if info is None:
            return PaneSeen(exists=False)
        now = identity_of(info.pid)
        return PaneSeen(
            exists=True,
            dead=info.dead or now is None,
            pid=info.pid,
            pid_start=now.start if now else None,
        )

    async def _recover(self, record: RestartRecord, reason: str) -> None:
        """Finish an open record: respawn a dead pane as planned, leave a running agent
        alone, restore the option, close it. Never raises."""
        try:
            if record.step is not Step.RECOVERING:
                record = self._step(record, Event.FAIL, outcome=reason)
            seen = await self._look(record.pane)
            plan = recover(record, seen)
            outcome = plan.outcome
            if plan.await_exit:
                try:
                    await self._wait_ended(record)
                except OpenbusError:
                    plan = replace(plan, respawn=False, attach=False)
                    outcome = "left running (it did not quit)"
            if plan.respawn:
                try:
                    back = replace(record, step=Step.EXITED)
                    respawned = await self._respawn(back)
                    record = replace(
                        record, principal=respawned.principal, new_pid=respawned.new_pid
                    )
                except OpenbusError as exc:
                    outcome = f"the respawn failed: {exc.message}"
            elif plan.attach and record.principal is not None and seen.pid is not None:
                await self._attach(record, seen)
            if plan.restore_option:
                with contextlib.suppress(OpenbusError):
                    await self._put_option_back(record)
            self._step(record, Event.CLOSE, outcome=outcome)
            self.recovered += 1
        except Exception:
            log.exception("could not finish the restart record of %s", record.pane)

    async def _attach(self, record: RestartRecord, seen: PaneSeen) -> None:
        """The pane runs the resumed process the crash kept from being recorded: attach the
        principal to it and record its launch."""
        principal = self.grants.get(str(record.principal))
        if principal.pid == seen.pid and principal.pid_start == seen.pid_start:
            return
        pid = int(seen.pid or 0)
        writes = [
            self.grants.attach_pane(
                principal.id,
                record.pane,
                pid,
                seen.pid_start,
                principal.incarnation or f"{record.pane}:{pid}:{seen.pid_start}",
            )
        ]
        if all(r.pid != pid for r in self.launch.records.live()):
            _, write = self.launch.records.add(
                owner=record.owner,
                launcher=record.launcher,
                harness=record.harness,
                cwd=record.cwd,
                session_id=record.session_id,
                principal=principal.id,
                pane_id=record.pane,
                pid=pid,
                pid_start=seen.pid_start,
                server=await self.launch.server_identity(),
                agent_user=record.agent_user,
            )
            writes.append(write)
        self.gate.record(
            AuditDraft(
                actor="system",
                action="restart.attach",
                outcome="ok",
                target=record.pane,
                details={"principal": principal.id, "pid": pid},
            ),
            writes,
        )
