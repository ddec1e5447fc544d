"""Connect: the human sets an agent's preset; revoking and narrowing cascade at once.

An agent is connectable here only if it was launched with a token (a structured launcher
with a preset other than off). Connecting an agent launched without one needs
restart-to-connect, which this daemon does not do yet, and the refusal says so. A grant above
the org policy's cap is refused naming the cap and its rule. Narrowing or revoking takes
effect on the agent's next call (scope is checked on every call); the registered revocation
hooks then cancel what the agent had queued or open and end its streams and waits, before
the human's call returns.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from openbus.daemon.core.actions import Action
from openbus.daemon.core.actors import is_pane_id
from openbus.daemon.core.consent import Tier
from openbus.daemon.core.errors import BadRequest, Conflict, PolicyRefused
from openbus.daemon.core.scopes import Preset, parse_preset
from openbus.daemon.gate import Call, Gate
from openbus.daemon.grants import Grants, Principal

SET = Action("connect.set", tier=Tier.HUMAN, mutates=True)
DISCONNECT_ALL = Action("connect.disconnect_all", tier=Tier.HUMAN, mutates=True)


@dataclass(frozen=True)
class CapDecision:
    preset: Preset
    rule: str


CapSource = Callable[[str], CapDecision]
RevocationHook = Callable[[Principal, Preset], Awaitable[None]]


def no_policy(user: str) -> CapDecision:
    return CapDecision(Preset.COLLABORATE, "no org policy is configured")


class Connect:
    def __init__(self, gate: Gate, grants: Grants, cap_source: CapSource = no_policy) -> None:
        self.gate = gate
        self.grants = grants
        self.cap_source = cap_source
        self.revocation_hooks: list[RevocationHook] = []
        gate.register(SET, self._set)
        gate.register(DISCONNECT_ALL, self._disconnect_all)

    def check_cap(self, owner: str, preset: Preset) -> CapDecision:
        cap = self.cap_source(owner)
        if preset.rank > cap.preset.rank:
            raise PolicyRefused(
                f"{preset.value} is above the org policy's cap of {cap.preset.value} for {owner} ({cap.rule})",
                field="preset",
            )
        return cap

    async def _set(self, call: Call) -> Any:
        assert call.actor.user is not None
        pane = call.params.get("pane")
        if not isinstance(pane, str) or not is_pane_id(pane):
            raise BadRequest("a pane id like %3 is required", field="pane")
        preset = parse_preset(call.params.get("preset"))
        call.target = pane
        call.details["preset"] = preset.value
        principals = [p for p in self.grants.by_pane(pane) if p.owner == call.actor.user]
        if not principals:
            raise Conflict(
                f"{pane} was not launched with an openbus token; connecting a running agent needs "
                "restart-to-connect, which is not available yet: launch it with `openbus launch "
                "LAUNCHER --preset ...`",
                field="pane",
            )
        if preset is not Preset.OFF:
            cap = self.check_cap(call.actor.user, preset)
            call.details["cap"] = cap.preset.value
        for principal in principals:
            call.details.setdefault("principals", []).append(principal.id)
            call.details["from"] = principal.preset.value
            call.write(self.grants.set_preset(principal.id, preset))
            if preset.rank < principal.preset.rank:
                call.after_commit_async.append(self._cascade(principal, preset))
        return {"pane": pane, "preset": preset.value, "principals": [p.id for p in principals]}

    async def _disconnect_all(self, call: Call) -> Any:
        assert call.actor.user is not None
        affected = [p for p in self.grants.active() if p.owner == call.actor.user and p.preset is not Preset.OFF]
        for principal in affected:
            call.write(self.grants.set_preset(principal.id, Preset.OFF))
            call.after_commit_async.append(self._cascade(principal, Preset.OFF))
        call.details["count"] = len(affected)
        call.details["principals"] = [p.id for p in affected]
        return {"disconnected": len(affected), "principals": [p.id for p in affected]}

    def _cascade(self, principal: Principal, preset: Preset) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            for hook in self.revocation_hooks:
                await hook(principal, preset)

        return run
