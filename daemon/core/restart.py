"""Restart-to-connect: relaunch a running agent onto its own session with the endpoint added.

Theory of operation
-------------------
An agent openbus launched from a structured launcher, whose harness has a resume command and
a per-launch endpoint override (Claude Code, Codex), is connected while it runs by quitting it
and resuming its session in the same pane. The human approves a card first ("Restart this
agent to connect it?"). The sequence is one record, persisted at every step *before* the
adapter acts on the next, so a daemon that dies anywhere leaves a record saying how far it
got::

    PLANNED   --hold-->     HELD       remain-on-exit set on the pane (its own value saved)
    HELD      --exit-->     EXITING    idle with an empty composer, rechecked: exit typed
    EXITING   --ended-->    EXITED     the agent's process ended; the dead pane stays
    EXITED    --respawn-->  RESPAWNED  the resume argv runs in the pane, with a fresh token
    RESPAWNED --restore-->  RESTORED   remain-on-exit back to the pane's own value
    RESTORED  --bind-->     BOUND      the principal is attached to the new process
    BOUND     --close-->    CLOSED
    any open  --fail-->     RECOVERING a step failed or timed out, or the daemon restarted
                                         (the step it failed at is kept)
    RECOVERING --close-->   CLOSED

Any other move is an ``InvalidTransition`` (a bug in the adapter). The record is written
*before* the step it names is undone by a crash, so recovery is a pure function of the record
and one look at the pane (``recover``):

* the pane is gone: nothing to respawn or restore;
* the pane is dead: it is respawned as planned (the session's resume argv), then attached;
* the pane runs the agent the record names (same pid and start time): left alone, unless its
  exit command was already typed: then it is waited for (bounded) and respawned once it ends;
* the pane runs another process after the exit was typed: the respawn happened before the
  crash could record it, so that process is attached;
* whatever happened, the pane's own remain-on-exit is restored and the record closed.
"""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass, replace
from typing import Any

from openbus.kernel.errors import along

CARD_SUMMARY = "Restart this agent to connect it?"
EXIT_COMMANDS = {"claude": "/exit", "codex": "/quit"}


class Step(enum.StrEnum):
    PLANNED = "planned"
    HELD = "held"
    EXITING = "exiting"
    EXITED = "exited"
    RESPAWNED = "respawned"
    RESTORED = "restored"
    BOUND = "bound"
    RECOVERING = "recovering"
    CLOSED = "closed"


class Event(enum.StrEnum):
    HOLD = "hold"
    EXIT = "exit"
    ENDED = "ended"
    RESPAWN = "respawn"
    RESTORE = "restore"
    BIND = "bind"
    FAIL = "fail"
    CLOSE = "close"


_OPEN = (
    Step.PLANNED,
    Step.HELD,
    Step.EXITING,
    Step.EXITED,
    Step.RESPAWNED,
    Step.RESTORED,
    Step.BOUND,
)
MOVES: dict[tuple[Step, Event], Step] = {
    (Step.PLANNED, Event.HOLD): Step.HELD,
    (Step.HELD, Event.EXIT): Step.EXITING,
    (Step.EXITING, Event.ENDED): Step.EXITED,
    (Step.EXITED, Event.RESPAWN): Step.RESPAWNED,
    (Step.RESPAWNED, Event.RESTORE): Step.RESTORED,
    (Step.RESTORED, Event.BIND): Step.BOUND,
    (Step.BOUND, Event.CLOSE): Step.CLOSED,
    (Step.RECOVERING, Event.CLOSE): Step.CLOSED,
    **{(step, Event.FAIL): Step.RECOVERING for step in _OPEN},
}


@dataclass(frozen=True)
class RestartRecord:
    """One restart of one pane: what it was, what it becomes, how far it got."""

    pane: str
    incarnation: str
    pid: int  # the agent being restarted: pid plus start time
    pid_start: str | None
    remain_on_exit: str | None  # the pane's own value before (None: it inherited one)
    harness: str
    session_id: str
    launcher: str
    preset: str
    owner: str
    cwd: str | None
    card: str | None = None
    step: Step = Step.PLANNED
    principal: str | None = None
    new_pid: int | None = None
    outcome: str | None = None  # how it ended: connected, left running, pane gone, ...
    failed_at: Step | None = None  # the step it was at when it failed (RECOVERING)
    agent_user: str | None = None  # the pool user it ran as (hosted): it resumes as that user

    @property
    def open(self) -> bool:
        return self.step is not Step.CLOSED

    def advance(self, event: Event, **changes: Any) -> RestartRecord:
        target = along(MOVES, self.step, event, f"restart of {self.pane}")
        if event is Event.FAIL:
            changes.setdefault("failed_at", self.step)
        return replace(self, step=target, **changes)

    @property
    def reached(self) -> Step:
        """The last step of the sequence this record got to (before any failure)."""
        return self.failed_at if self.step is Step.RECOVERING and self.failed_at else self.step

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RestartRecord:
        data = json.loads(text)
        data["step"] = Step(data["step"])
        data["failed_at"] = Step(data["failed_at"]) if data.get("failed_at") else None
        return cls(**data)


@dataclass(frozen=True)
class PaneSeen:
    """One look at the pane during recovery."""

    exists: bool
    dead: bool = False
    pid: int | None = None
    pid_start: str | None = None


@dataclass(frozen=True)
class Recovery:
    respawn: bool  # run the resume argv in the dead pane
    attach: bool  # attach the principal to the pane's (new) process
    restore_option: bool  # put the pane's own remain-on-exit back
    outcome: str
    await_exit: bool = False  # the agent was told to quit: respawn once it has ended


def recover(record: RestartRecord, seen: PaneSeen) -> Recovery:
    """What finishing an open restart record does, given one look at its pane."""
    if not seen.exists:
        return Recovery(False, False, False, "pane gone")
    if seen.dead:
        return Recovery(True, True, True, "respawned after a failed step")
    if seen.pid == record.pid and seen.pid_start == record.pid_start:
        if record.reached is Step.EXITING:
            return Recovery(True, True, True, "respawned after its exit", await_exit=True)
        return Recovery(False, False, True, "left running (not connected)")
    if record.reached in (Step.EXITING, Step.EXITED, Step.RESPAWNED, Step.RESTORED, Step.BOUND):
        return Recovery(False, True, True, "connected")
    return Recovery(False, False, True, "left alone (another process runs in the pane)")
