"""The composition root: what one daemon process is made of, in start order.

Theory of operation
-------------------
``build(config, clock=, random=, extra=())`` is the one place that names every feature. Each
feature is built from the ports it uses and nothing else, registers its gate actions while it
is built, and is never changed afterwards:

1. the foundation: state db, audit log, org policy, grants (capped by the policy), the gate,
   cards and the human's consent actions, Connect, anonymous-refusal sampling;
2. the card-expiry sweep and the policy watch;
3. the fleet directory (tmux adapter, directory, watcher; ``directory.list``);
4. the history index (its pane lookup is the directory's);
5. the audit export (checkpoints and the OTLP shipper), whether or not HTTP is served;
6. launch (structured launchers, tokens, the liveness of launched agents; on a hosted box in
   ``pool`` mode, the agent-user pool that gives each agent its own uid);
   then restart-to-connect (``restart.Restarts``: it finishes open restart records at start)
   and the ``resume.Resumer`` port (resume a session, restore a lost fleet);
7. messaging on the directory's fleet; the session tools (on launch, messaging and the
   history index); the control session and routing (threads, the dispatcher, act tools);
   then the pane detail with messaging's, the family's and control's sections, the human's
   keys into a pane (answering its menu, typing to an idle agent) and the human's feed (what a
   page shows, pushed as it changes: one audited subscription, not polls);
8. the MCP endpoint over every feature's tools, its tokens verified by launch (its sessions
   capped per agent, counted on ``/healthz``);
9. ``extra``: features supplied by the caller (``bench/`` adds its no-op tool this way).

The ``Daemon`` starts the features in this order, stops them in reverse, runs their ``tick``
on one housekeeping tick and gathers their ``health`` for ``/healthz``. A feature that cannot
be built stops the start with the error that says why; none runs quietly without its ports.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from openbus.daemon import messaging as messaging_feature
from openbus.daemon.agent_users import AgentUsers
from openbus.daemon.audit.shipper import Exporter
from openbus.daemon.audit_export import AuditExport
from openbus.daemon.config import Config
from openbus.daemon.control.charter import CHARTER
from openbus.daemon.control.mcp_tools import CONTROL_TOOLS
from openbus.daemon.control.service import ControlService
from openbus.daemon.directory_service import DirectoryFeature, register_pane_detail
from openbus.daemon.feature import Feature, Housekeeping
from openbus.daemon.foundation import CardExpiry, Foundation, PolicyWatch
from openbus.daemon.grants import CONTROL_ROLE
from openbus.daemon.history.service import HistoryService, open_index
from openbus.daemon.human_feed import HumanFeed
from openbus.daemon.launch import LaunchService, LiveTokens
from openbus.daemon.mcp.endpoint import McpEndpoint
from openbus.daemon.mcp.masking import masker
from openbus.daemon.mcp.observe import OBSERVE_TOOLS
from openbus.daemon.mcp.tools import McpTool, ToolRegistry
from openbus.daemon.messaging.fleet import DirectoryFleet
from openbus.daemon.messaging.mcp_tools import MESSAGING_TOOLS
from openbus.daemon.messaging.service import MessagingService
from openbus.daemon.pane_input import PaneInput
from openbus.daemon.pane_owners import PaneOwners
from openbus.daemon.refusals import AgentRefusals
from openbus.daemon.restart import Restarts
from openbus.daemon.resume import Resumer
from openbus.daemon.sessions.mcp_tools import SESSION_TOOLS
from openbus.daemon.sessions.service import SessionTools
from openbus.kernel.clock import Clock, Random

log = logging.getLogger("openbus")


@dataclass(frozen=True)
class Extra:
    """A feature the caller adds (built from the foundation), with the MCP tools it offers."""

    build: Callable[[Foundation], Feature]
    tools: Sequence[McpTool] = ()


@dataclass(frozen=True)
class Options:
    """Knobs of the audit export that tests and the benchmarks set (defaults: production)."""

    exporter: Exporter | None = None
    backoff_cap: float = 10.0
    batch_size: int = 512


@dataclass
class Daemon:
    foundation: Foundation
    directory: DirectoryFeature
    history: HistoryService
    audit_export: AuditExport
    launch: LaunchService
    restarts: Restarts
    resumer: Resumer
    messaging: MessagingService
    sessions: SessionTools
    control: ControlService
    mcp: McpEndpoint
    features: tuple[Feature, ...]
    housekeeping: Housekeeping
    _started: list[Feature] = field(default_factory=list)

    @property
    def config(self) -> Config:
        return self.foundation.config

    async def start(self) -> None:
        for feature in self.features:
            await feature.start()
            self._started.append(feature)
        self.housekeeping.start()

    async def stop(self) -> None:
        await self.housekeeping.stop()
        for feature in reversed(self._started):
            try:
                await feature.stop()
            except Exception:
                log.exception("%s: error while stopping", feature.name)
        self._started.clear()
        self.foundation.db.close()

    def health(self) -> dict[str, Any]:
        seq, _ = self.foundation.audit.head()
        body: dict[str, Any] = {
            "ok": True,
            "audit": {"seq": seq},
            "gate": self.foundation.gate.stats.as_dict(),
        }
        for feature in self.features:
            section: Mapping[str, Any] | None = feature.health()
            if section is not None:
                body[feature.name] = dict(section)
        return body


def build(
    config: Config,
    *,
    clock: Clock,
    random: Random,
    extra: Sequence[Extra] = (),
    options: Options = Options(),
) -> Daemon:
    base = Foundation.build(config, clock=clock, random=random)
    gate = base.gate
    sweeps: tuple[Feature, ...] = (
        CardExpiry(gate, base.cards),
        PolicyWatch(base.policy, base.connect, gate),
        base.refusals,
        AgentRefusals(gate),
    )
    owners = PaneOwners(base.grants, config.hosted, clock)
    directory = DirectoryFeature(gate, config, clock, random, owners)
    history = HistoryService(gate, open_index(config, clock, directory.pane_for_pid, masker()))
    audit_export = AuditExport(
        config,
        clock,
        base.audit,
        base.policy,
        gate,
        exporter=options.exporter,
        backoff_cap=options.backoff_cap,
        batch_size=options.batch_size,
    )
    launch = LaunchService(
        config=config,
        clock=clock,
        random=random,
        gate=gate,
        grants=base.grants,
        connect=base.connect,
        tmux=directory.tmux,
        directory=directory.directory,
        owners=owners,
        pool=AgentUsers.from_config(config, clock),
    )
    restarts = Restarts(
        config=config,
        gate=gate,
        grants=base.grants,
        cards=base.cards,
        connect=base.connect,
        launch=launch,
        directory=directory.directory,
        tmux=directory.tmux,
        history=history.index,
        clock=clock,
    )
    resumer = Resumer(
        config=config,
        gate=gate,
        grants=base.grants,
        connect=base.connect,
        launch=launch,
        history=history.index,
    )
    messaging = messaging_feature.build(
        gate=gate,
        grants=base.grants,
        cards=base.cards,
        connect=base.connect,
        clock=clock,
        policy=base.policy,
        fleet=DirectoryFleet(directory.directory, directory.tmux),
        db=base.db,
        owners=owners,
    )
    sessions = SessionTools(
        config=config,
        gate=gate,
        grants=base.grants,
        cards=base.cards,
        connect=base.connect,
        launch=launch,
        messaging=messaging,
        directory=directory.directory,
        history=history.index,
        db=base.db,
        clock=clock,
        random=random,
    )
    control = ControlService(
        gate=gate,
        grants=base.grants,
        cards=base.cards,
        directory=directory.directory,
        tmux=directory.tmux,
        owners=owners,
        messaging=messaging,
        launch=launch,
        resumer=resumer,
        config=config,
        clock=clock,
        db=base.db,
    )
    register_pane_detail(
        gate,
        directory.directory,
        owners,
        [messaging.pane_section, sessions.pane_section, control.pane_section],
    )
    PaneInput(gate, DirectoryFleet(directory.directory, directory.tmux), owners)
    feed = HumanFeed(gate, directory, base.cards, base.connect, sessions.children_of)
    added = tuple(e.build(base) for e in extra)
    tools = ToolRegistry(
        [
            *OBSERVE_TOOLS,
            *MESSAGING_TOOLS,
            *SESSION_TOOLS,
            *CONTROL_TOOLS,
            *(tool for e in extra for tool in e.tools),
        ]
    )
    mcp = McpEndpoint(
        listen=config.daemon,
        gate=gate,
        grants=base.grants,
        connect=base.connect,
        tools=tools,
        verifier=LiveTokens(base.grants, launch),
        launches=launch,
        refusals=base.refusals,
        clock=clock,
        role_instructions={CONTROL_ROLE: CHARTER},
    )
    features = (
        *sweeps,
        directory,
        history,
        audit_export,
        launch,
        restarts,
        messaging,
        sessions,
        control,
        feed,
        mcp,
        *added,
    )
    return Daemon(
        foundation=base,
        directory=directory,
        history=history,
        audit_export=audit_export,
        launch=launch,
        restarts=restarts,
        resumer=resumer,
        messaging=messaging,
        sessions=sessions,
        control=control,
        mcp=mcp,
        features=features,
        housekeeping=Housekeeping(features),
    )
