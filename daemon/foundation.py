"""What every feature of the daemon stands on: the state database, the audit log, the org
policy, grants, the gate, cards and Connect, built in that order.

Nothing here knows of tmux, history, MCP or HTTP. Every default that concerns identity,
consent, policy or audit is the closed one: grants are capped by the policy runtime (local
mode without a policy: the documented "no org policy" decision), a refused policy reload is
audited by the policy watch, and a database that cannot be opened stops the start.
"""

from __future__ import annotations

from dataclasses import dataclass

from openbus.daemon import consent_actions
from openbus.daemon.audit.log import AuditLog
from openbus.daemon.cards import Cards
from openbus.daemon.config import Config
from openbus.daemon.connect import Connect
from openbus.daemon.core.audit import AuditDraft
from openbus.daemon.core.sampling import RefusalSampler
from openbus.daemon.feature import Feature
from openbus.daemon.gate import Gate
from openbus.daemon.grants import Grants
from openbus.daemon.policy_runtime import PolicyRuntime
from openbus.daemon.refusals import AnonymousRefusals
from openbus.daemon.state import StateDB
from openbus.kernel.clock import Clock, Random


@dataclass(frozen=True)
class Foundation:
    config: Config
    clock: Clock
    random: Random
    db: StateDB
    audit: AuditLog
    policy: PolicyRuntime
    grants: Grants
    gate: Gate
    cards: Cards
    connect: Connect
    refusals: AnonymousRefusals

    @classmethod
    def build(cls, config: Config, *, clock: Clock, random: Random) -> Foundation:
        config.daemon.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        db = StateDB(config.db_path)
        audit = AuditLog(db, clock)
        policy = PolicyRuntime.from_config(config, clock=clock)
        grants = Grants(db, clock, random, cap_for=lambda owner: policy.cap_for(owner).preset)
        agent_refusals = RefusalSampler(
            burst=config.audit.agent_refusal_burst,
            window=config.audit.agent_refusal_window_seconds,
        )
        gate = Gate(audit, grants, clock=clock, agent_refusals=agent_refusals)
        cards = Cards(db, clock, random)
        consent_actions.register(gate, cards)
        return cls(
            config=config,
            clock=clock,
            random=random,
            db=db,
            audit=audit,
            policy=policy,
            grants=grants,
            gate=gate,
            cards=cards,
            connect=Connect(gate, grants, policy.cap_for, policy.check_harness),
            refusals=AnonymousRefusals(gate, clock),
        )


class CardExpiry(Feature):
    """Resolves every card whose time has passed, once a second."""

    name = "card expiry sweep"

    def __init__(self, gate: Gate, cards: Cards) -> None:
        self.gate = gate
        self.cards = cards

    def tick(self) -> None:
        consent_actions.sweep_expired(self.gate, self.cards)


class PolicyWatch(Feature):
    """Polls the policy file (two stat calls a second); a new policy cascades at once, a
    refused one is audited and the one in force stays."""

    name = "policy watch"

    def __init__(self, policy: PolicyRuntime, connect: Connect, gate: Gate) -> None:
        self.policy = policy
        self.connect = connect
        self.gate = gate

    async def tick(self) -> None:
        if self.policy.loaded is None:
            return
        before = self.connect.effective_presets()
        changed = self.policy.check_for_change()
        for rejection in self.policy.take_rejections():
            self.gate.record(
                AuditDraft(
                    actor="system",
                    action="policy.rejected",
                    outcome="refused",
                    target=str(rejection.path),
                    details={
                        "reason": rejection.reason,
                        "in_force": rejection.in_force.version if rejection.in_force else None,
                    },
                )
            )
        if changed:
            await self.connect.policy_changed(before)
