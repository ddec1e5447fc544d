"""Refusals of callers with no identity, audited but sampled (see ``core.sampling``).

A flood of forged identities or query-string tokens is counted in summary records instead of
filling the audit store: per sampling key, the first refusals of a window are recorded one by
one and the rest as one ``refusals.suppressed`` record when the window closes. Agents'
refusals are sampled (and the agents rate-limited) by the gate itself; ``AgentRefusals``
closes their windows on the housekeeping tick.
"""

from __future__ import annotations

from openbus.daemon.core.audit import AuditDraft
from openbus.daemon.core.sampling import RefusalSampler, Suppressed
from openbus.daemon.feature import Feature
from openbus.daemon.gate import Gate
from openbus.kernel.clock import Clock


class AnonymousRefusals(Feature):
    name = "refusal summaries"

    def __init__(self, gate: Gate, clock: Clock, sampler: RefusalSampler | None = None) -> None:
        self.gate = gate
        self.clock = clock
        self.sampler = sampler or RefusalSampler()

    def refuse(self, key: str, draft: AuditDraft) -> None:
        """Audit a refusal of a caller with no identity, sampled per ``key``."""
        admitted, due = self.sampler.admit(key, self.clock.monotonic())
        self._record_suppressed(due)
        if admitted:
            self.gate.record(draft)

    def tick(self) -> None:
        self._record_suppressed(self.sampler.sweep(self.clock.monotonic()))

    def _record_suppressed(self, due: list[Suppressed]) -> None:
        for summary in due:
            self.gate.record(summary.draft())


class AgentRefusals(Feature):
    """Records the summaries of agents' refusal windows once they close (see ``Gate``)."""

    name = "agent refusal summaries"

    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    def tick(self) -> None:
        self.gate.sweep_refusals()
