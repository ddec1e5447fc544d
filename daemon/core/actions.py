"""Actions and who may run them.

Theory of operation
-------------------
Every front end (human API, CLI, MCP, control, the router) names an *action*; an action
declares the scope an agent needs for it, its consent tier and whether it changes state.
``authorize`` is the one rule deciding whether an actor may start an action, given the
scopes it holds *right now* (its grant intersected with the org policy's cap, looked up on
every call, so revoking or narrowing takes effect on the next call):

* humans run every action meant for humans;
* ``control`` holds ``act`` plus read, history, message and spawn, under its charter;
* an ordinary agent needs the action's scope; ``act`` and anything tiered
  ``NEVER_FOR_PEERS`` is refused whatever it holds, and an action with no scope is not
  offered to agents at all;
* ``system`` acts only on the daemon's own behalf and never through a front end.
"""

from __future__ import annotations

from dataclasses import dataclass

from openbus.daemon.core.actors import Actor
from openbus.daemon.core.consent import Tier
from openbus.kernel.errors import Forbidden, NotConnected
from openbus.kernel.scopes import Scope

CONTROL_SCOPES = frozenset({Scope.READ, Scope.HISTORY, Scope.MESSAGE, Scope.SPAWN, Scope.ACT})


@dataclass(frozen=True)
class Action:
    name: str
    scope: Scope | None = None  # what an agent needs; None: not offered to agents
    tier: Tier = Tier.READ
    # Its executor has effects outside the state database before it returns (tmux, processes,
    # files), so the gate checks the audit store can take a record before running it. An
    # action whose every effect is queued on the call (``call.write``, ``after_commit``) lands
    # with its record or not at all, and needs no check.
    outside_effects: bool = False
    humans: bool = True  # offered to humans on the human API

    @property
    def agent_callable(self) -> bool:
        return (
            self.scope is not None
            and self.tier is not Tier.NEVER_FOR_PEERS
            and self.scope is not Scope.ACT
        )


def authorize(actor: Actor, action: Action, scopes: frozenset[Scope]) -> Scope | None:
    """Return the scope the call runs under, or raise why it may not run."""
    if actor.kind == "human":
        if not action.humans:
            raise Forbidden(f"{action.name} is not a human action")
        return action.scope
    if actor.kind == "system":
        return action.scope
    if actor.kind == "control":
        if action.scope is None or action.scope not in CONTROL_SCOPES:
            raise Forbidden(f"{action.name} is not within control's charter")
        return action.scope
    # an ordinary agent
    if not action.agent_callable:
        raise Forbidden(f"{action.name} is never offered to agents")
    assert action.scope is not None
    if action.scope not in scopes:
        if not scopes:
            raise NotConnected("not connected: this agent has no openbus grant")
        raise NotConnected(f"not connected for {action.scope.value}: the grant does not include it")
    return action.scope
