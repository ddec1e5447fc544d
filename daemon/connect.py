"""Connect: the human sets an agent's preset; revoking and narrowing cascade at once.

An agent holding a token (a structured launcher with a preset other than off) is set here at
once. Turning an agent Off revokes its principal (seed 000: "Off invalidates the token at the
daemon"): the token is refused from then on, and setting the pane back to Observe does not
bring it back. Connecting an agent that holds no token (launched Off, or its token revoked)
needs a new token: a pane that can never take one (no such pane, a shell, an opaque launcher,
a harness Connect is not offered for, a program that is no agent) is refused with the reason
worded in ``connect_refusals``; any other goes to the registered ``on_unconnected`` handler
(restart-to-connect), which raises its card or refuses naming why it cannot restart it.
``connect.list`` gives the same reason for each pane it cannot honour. A grant above
the org policy's cap, or to a harness outside its ``[harnesses] allowed``, is refused naming
the cap or the harness and the rule. Narrowing or revoking takes
effect on the agent's next call (scope is checked on every call); the registered revocation
hooks then cancel what the agent had queued or open and end its streams and waits, before
the human's call returns.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from openbus.daemon.connect_refusals import ConnectFacts, PaneFacts, needs_new_token, refusal
from openbus.daemon.core.actions import Action
from openbus.daemon.core.actors import Actor
from openbus.daemon.core.audit import AuditDraft
from openbus.daemon.core.consent import Tier
from openbus.daemon.gate import Call, Gate
from openbus.daemon.grants import Grants, Principal
from openbus.kernel.errors import BadRequest, PolicyRefused
from openbus.kernel.ids import is_pane_id
from openbus.kernel.scopes import Preset, parse_preset
from openbus.policy.model import CapDecision

log = logging.getLogger("openbus")

SET = Action("connect.set", tier=Tier.HUMAN, outside_effects=True)
DISCONNECT_ALL = Action("connect.disconnect_all", tier=Tier.HUMAN, outside_effects=True)
LIST_CONNECTIONS = Action("connect.list", tier=Tier.HUMAN)


CapSource = Callable[[str], CapDecision]
HarnessCheck = Callable[[str], None]  # raises PolicyRefused(field="harness") when forbidden
RevocationHook = Callable[[Principal, Preset], Awaitable[None]]
# (call, pane, preset) -> the answer for an agent with no token (it raises when it refuses)
UnconnectedHandler = Callable[[Call, str, Preset], Awaitable[Any]]


class Connect:
    def __init__(
        self, gate: Gate, grants: Grants, cap_source: CapSource, harness_check: HarnessCheck
    ) -> None:
        self.gate = gate
        self.grants = grants
        self.cap_source = cap_source
        self.check_harness = harness_check
        self._revocation_hooks: list[RevocationHook] = []
        self._unconnected: list[UnconnectedHandler] = []
        self._facts: ConnectFacts | None = None
        gate.register(SET, self._set)
        gate.register(DISCONNECT_ALL, self._disconnect_all)
        gate.register(LIST_CONNECTIONS, self._connections)

    def on_revocation(self, hook: RevocationHook) -> None:
        """Run ``hook(principal, preset)`` whenever an agent is narrowed or revoked, before
        the human's call returns (features end what the agent had open)."""
        self._revocation_hooks.append(hook)

    def on_unconnected(self, handler: UnconnectedHandler) -> None:
        """Let ``handler`` answer a preset set on an agent that holds no token."""
        self._unconnected.append(handler)

    def explain_with(self, facts: ConnectFacts) -> None:
        """Where the reasons for panes Connect cannot honour come from (the launch feature's
        facts: the directory, the grants, the launches it made without a grant)."""
        self._facts = facts

    def _pane_facts(self, pane: str, call: Call) -> PaneFacts:
        if self._facts is not None:
            return self._facts.facts(pane, call.actor)
        # no directory behind this Connect: what the grants alone say
        revoked = self.grants.revoked_on_pane(pane, str(call.actor.user))
        return PaneFacts(pane, shown=True, harness="claude", revoked=revoked)

    def _refusal(self, facts: PaneFacts) -> Exception:
        found = refusal(facts)
        assert found is not None, "only a pane without the caller's grant is refused"
        return found

    async def revoked(self, principal: Principal, preset: Preset) -> None:
        """Run every revocation hook for ``principal`` (one failing does not stop the rest)."""
        for hook in list(self._revocation_hooks):
            try:
                await hook(principal, preset)
            except Exception:
                log.exception("a revocation hook failed for %s", principal.id)

    def check_cap(self, owner: str, preset: Preset) -> CapDecision:
        cap = self.cap_source(owner)
        if not cap.allows(preset):
            raise PolicyRefused(cap.refusal(preset), field="preset")
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
        revoked = not principals and self.grants.revoked_on_pane(pane, call.actor.user)
        if revoked and preset is Preset.OFF:
            call.details["already"] = "revoked"
            return {"pane": pane, "preset": preset.value, "principals": []}
        if not principals and preset is not Preset.OFF:
            facts = self._pane_facts(pane, call)
            if not needs_new_token(facts):
                raise self._refusal(facts)
            cap = self.check_cap(call.actor.user, preset)
            call.details["cap"] = cap.preset.value
            for handler in self._unconnected:
                return await handler(call, pane, preset)
            raise self._refusal(facts)
        if not principals:
            raise self._refusal(self._pane_facts(pane, call))
        if preset is not Preset.OFF:
            cap = self.check_cap(call.actor.user, preset)
            call.details["cap"] = cap.preset.value
            for principal in principals:
                self.check_harness(principal.harness)
        for principal in principals:
            call.details.setdefault("principals", []).append(principal.id)
            call.details["from"] = principal.preset.value
            if preset is Preset.OFF:
                call.details["revoked"] = True
                call.write(self.grants.revoke(principal.id))
            else:
                call.write(self.grants.set_preset(principal.id, preset))
            if preset.rank < principal.preset.rank:
                call.after_commit_async.append(self._cascade(principal, preset))
        return {"pane": pane, "preset": preset.value, "principals": [p.id for p in principals]}

    async def _disconnect_all(self, call: Call) -> Any:
        assert call.actor.user is not None
        affected = [p for p in self.grants.active() if p.owner == call.actor.user]
        for principal in affected:  # off revokes: each of these tokens is refused from now on
            call.write(self.grants.revoke(principal.id))
            call.after_commit_async.append(self._cascade(principal, Preset.OFF))
        call.details["count"] = len(affected)
        call.details["principals"] = [p.id for p in affected]
        return {"disconnected": len(affected), "principals": [p.id for p in affected]}

    def effective_presets(self) -> dict[str, Preset]:
        """Every active principal's preset as the org policy's cap bounds it right now."""
        return {
            p.id: p.preset.at_most(self.cap_source(p.owner).preset) for p in self.grants.active()
        }

    async def policy_changed(self, before: dict[str, Preset]) -> None:
        """After a new policy took effect: cascade for every agent whose grant it narrowed.

        Scope is already checked against the new cap on every call; this cancels what the
        narrowed agents had queued or open and ends their streams, with a record each.
        """
        after = self.effective_presets()
        for principal in self.grants.active():
            old, new = before.get(principal.id), after.get(principal.id)
            if old is None or new is None or new.rank >= old.rank:
                continue
            self.gate.record(
                AuditDraft(
                    actor="system",
                    action="policy.narrowed",
                    outcome="ok",
                    target=principal.pane_id,
                    details={"principal": principal.id, "from": old.value, "to": new.value},
                )
            )
            await self._cascade(principal, new)()

    def _cascade(self, principal: Principal, preset: Preset) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            for hook in self._revocation_hooks:
                await hook(principal, preset)

        return run

    async def _connections(self, call: Call) -> Any:
        """The caller's connected agents by pane: preset granted, preset in effect, the cap."""
        listing = self.connections_of(call.actor)
        call.details["panes"] = len(listing["connections"])
        return listing

    def connections_of(self, actor: Actor) -> dict[str, Any]:
        """The human ``actor``'s connected agents by pane, and why Connect cannot be honoured
        on each other pane it sees (what ``connect.list`` answers)."""
        user = actor.user
        assert user is not None
        cap = self.cap_source(user).preset
        panes: dict[str, dict[str, Any]] = {}
        for principal in sorted(self.grants.active(), key=lambda p: p.created):
            if principal.owner != user or principal.pane_id is None:
                continue
            panes[principal.pane_id] = {  # the newest principal on a pane wins
                "pane": principal.pane_id,
                "incarnation": principal.incarnation,
                "harness": principal.harness,
                "launcher": principal.launcher,
                "actor": str(principal.actor()),
                "preset": principal.preset.value,
                "effective": principal.preset.at_most(cap).value,
            }
        unavailable = self._facts.unavailable(actor) if self._facts is not None else {}
        return {
            "cap": cap.value,
            "connections": sorted(panes.values(), key=_pane_order),
            "unavailable": sorted(
                ({"pane": pane, "reason": reason} for pane, reason in unavailable.items()),
                key=_pane_order,
            ),
        }


def _pane_order(entry: dict[str, Any]) -> tuple[int, str]:
    pane = str(entry["pane"])
    return (int(pane[1:]) if pane[1:].isdigit() else 1 << 30, pane)
