"""Which panes a caller sees: the rules without I/O."""

from __future__ import annotations

from openbus.daemon.core.pane_view import view_of

PANES = [{"pane": "%1", "incarnation": "i1"}, {"pane": "%2", "incarnation": "i2"}]


def test_in_local_mode_and_for_an_operator_every_pane_is_seen() -> None:
    assert view_of("alice", hosted=False, operator=False, owned=()).cut(PANES) == PANES
    assert view_of("ops", hosted=True, operator=True, owned=()).cut(PANES) == PANES


def test_on_a_hosted_box_a_human_sees_the_panes_of_the_agents_they_launched() -> None:
    view = view_of("alice", hosted=True, operator=False, owned=[("%1", "i1")])
    assert view.cut(PANES) == [PANES[0]]


def test_a_pane_id_reused_by_another_process_is_no_longer_the_humans() -> None:
    view = view_of("alice", hosted=True, operator=False, owned=[("%2", "old")])
    assert view.cut(PANES) == [] and not view.sees("%2", None)


def test_no_known_owner_sees_nothing_on_a_hosted_box() -> None:
    assert view_of(None, hosted=True, operator=False, owned=[("%1", "i1")]).cut(PANES) == []
