"""Actors are written the same way everywhere."""

from __future__ import annotations

import pytest

from openbus.daemon.core import actors
from openbus.kernel.errors import BadRequest


def test_actor_names_follow_the_design() -> None:
    assert str(actors.human("alice")) == "human:alice"
    assert str(actors.agent_session("claude", "1f2e", "p_1")) == "agent:claude:1f2e"
    assert str(actors.agent_pane("codex", "%12", 4242, "p_2")) == "agent:codex:pane:%12:4242"
    assert str(actors.CONTROL) == "control" and str(actors.SYSTEM) == "system"


def test_an_agent_keeps_its_principal_across_binding() -> None:
    before = actors.agent_pane("codex", "%12", 4242, "p_2")
    after = actors.agent_session("codex", "019a", "p_2")
    assert before.principal == after.principal == "p_2"


@pytest.mark.parametrize("bad", ["", "a b", "x" * 100, "alice\n"])
def test_a_bad_user_name_is_refused(bad: str) -> None:
    with pytest.raises(BadRequest):
        actors.human(bad)
