"""Who may start which action: the one authorization rule."""

from __future__ import annotations

import pytest

from openbus.daemon.core import actors
from openbus.daemon.core.actions import Action, authorize
from openbus.daemon.core.consent import Tier
from openbus.kernel.errors import Forbidden, NotConnected
from openbus.kernel.scopes import Preset, Scope, effective_scopes

LIST = Action("directory.list", scope=Scope.READ)
KEYS = Action("keys.press", scope=Scope.ACT, tier=Tier.NEVER_FOR_PEERS)
DECIDE = Action("cards.decide", tier=Tier.HUMAN, outside_effects=True)
AGENT = actors.agent_session("claude", "s-1", "p_1")


def test_a_human_runs_human_actions() -> None:
    authorize(actors.human("alice"), DECIDE, frozenset())


def test_an_agent_without_a_grant_is_not_connected() -> None:
    with pytest.raises(NotConnected, match="not connected"):
        authorize(AGENT, LIST, frozenset())


def test_an_agent_needs_the_actions_scope() -> None:
    assert authorize(AGENT, LIST, Preset.OBSERVE.scopes) is Scope.READ
    with pytest.raises(NotConnected):
        authorize(AGENT, Action("send", scope=Scope.MESSAGE), Preset.OBSERVE.scopes)


def test_act_is_never_granted_to_an_ordinary_agent_whatever_it_holds() -> None:
    with pytest.raises(Forbidden, match="never offered"):
        authorize(AGENT, KEYS, frozenset(Scope))


def test_human_only_actions_are_not_offered_to_agents() -> None:
    with pytest.raises(Forbidden):
        authorize(AGENT, DECIDE, frozenset(Scope))


def test_control_holds_act_under_its_charter() -> None:
    assert authorize(actors.CONTROL, KEYS, frozenset()) is Scope.ACT
    with pytest.raises(Forbidden):
        authorize(actors.CONTROL, DECIDE, frozenset())


def test_the_cap_bounds_the_grant() -> None:
    assert effective_scopes(Preset.COLLABORATE, Preset.OBSERVE) == Preset.OBSERVE.scopes
    assert effective_scopes(Preset.OBSERVE, Preset.COLLABORATE) == Preset.OBSERVE.scopes
    assert effective_scopes(Preset.COLLABORATE, Preset.OFF) == frozenset()
