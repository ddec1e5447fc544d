"""Actors: who is acting, as a value.

Theory of operation
-------------------
An actor is written as a string in audit records and is one of:

* ``human:<user>``: a person, identified by the peer uid on the unix socket or vouched for
  by the tunnel (hosted).
* ``agent:<harness>:<session id>``: an agent whose session id is bound to its launch token.
* ``agent:<harness>:pane:<pane id>:<pid>``: an agent before its session id is known.
* ``control``: the control session, holding the ``act`` scope under its charter.
* ``system``: the daemon itself (expiry, delivery, revocation sweeps).

Agents also carry their immutable internal ``principal``: message ids, rate and hop
counters and pair approvals key on it, so binding the session id never resets them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from openbus.kernel.errors import BadRequest
from openbus.kernel.ids import SESSION_ID, is_pane_id

ActorKind = Literal["human", "agent", "control", "system"]

_USER = re.compile(r"^[a-z_][a-z0-9_.-]{0,63}\$?$", re.IGNORECASE)
_HARNESS = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")


@dataclass(frozen=True)
class Actor:
    kind: ActorKind
    name: str
    principal: str | None = None
    harness: str | None = None
    session_id: str | None = None
    user: str | None = None

    def __str__(self) -> str:
        return self.name

    @property
    def is_human(self) -> bool:
        return self.kind == "human"

    @property
    def is_agent(self) -> bool:
        return self.kind == "agent"


def human(user: str) -> Actor:
    if not _USER.fullmatch(user):
        raise BadRequest(f"not a valid user name: {user!r}", field="user")
    return Actor("human", f"human:{user}", user=user)


def agent_session(harness: str, session_id: str, principal: str) -> Actor:
    if not _HARNESS.fullmatch(harness):
        raise BadRequest("not a valid harness name", field="harness")
    if not SESSION_ID.fullmatch(session_id):
        raise BadRequest("not a valid session id", field="session_id")
    return Actor("agent", f"agent:{harness}:{session_id}", principal, harness, session_id)


def agent_pane(harness: str, pane_id: str, pid: int, principal: str) -> Actor:
    if not _HARNESS.fullmatch(harness):
        raise BadRequest("not a valid harness name", field="harness")
    if not is_pane_id(pane_id):
        raise BadRequest("not a valid pane id", field="pane")
    return Actor("agent", f"agent:{harness}:pane:{pane_id}:{pid}", principal, harness)


CONTROL = Actor("control", "control", principal="control")
SYSTEM = Actor("system", "system")
