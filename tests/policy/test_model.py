"""Who may grant what: per-user rules win, groups grant like sudoers, else the default."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from openbus.kernel.scopes import Preset
from openbus.policy.model import NO_POLICY_RULE, Policy, explain_text, no_policy_decision

OBSERVE, OFF, COLLABORATE = Preset.OBSERVE, Preset.OFF, Preset.COLLABORATE


def policy(
    default: Preset = OBSERVE,
    users: dict[str, Preset] | None = None,
    groups: dict[str, Preset] | None = None,
) -> Policy:
    return Policy(
        org="example",
        version=1,
        issued=datetime(2026, 11, 30, tzinfo=UTC),
        default_cap=default,
        user_caps=users or {},
        group_caps=groups or {},
    )


def test_a_user_with_no_rules_gets_the_default() -> None:
    decision = policy(OBSERVE).effective_cap("carol", ["staff"])
    assert (decision.preset, decision.rule) == (OBSERVE, "caps.default")


def test_a_per_user_rule_wins_even_below_the_users_groups() -> None:
    p = policy(OBSERVE, users={"mallory": OFF}, groups={"admins": COLLABORATE})
    decision = p.effective_cap("mallory", ["admins"])
    assert (decision.preset, decision.rule) == (OFF, "caps.users.mallory")


def test_a_per_user_rule_wins_above_the_default() -> None:
    decision = policy(OFF, users={"alice": COLLABORATE}).effective_cap("alice")
    assert (decision.preset, decision.rule) == (COLLABORATE, "caps.users.alice")


def test_the_most_permissive_group_rule_applies() -> None:
    p = policy(OFF, groups={"staff": OBSERVE, "admins": COLLABORATE, "interns": OFF})
    decision = p.effective_cap("bob", ["interns", "staff", "admins"])
    assert (decision.preset, decision.rule) == (COLLABORATE, "caps.groups.admins")


def test_a_group_rule_is_more_specific_than_the_default_even_when_lower() -> None:
    decision = policy(OBSERVE, groups={"contractors": OFF}).effective_cap("eve", ["contractors"])
    assert (decision.preset, decision.rule) == (OFF, "caps.groups.contractors")


def test_ties_between_groups_go_to_the_first_name() -> None:
    p = policy(OFF, groups={"zeta": OBSERVE, "alpha": OBSERVE})
    assert p.effective_cap("u", ["zeta", "alpha"]).rule == "caps.groups.alpha"


def test_explain_for_a_user_in_two_groups_names_both_and_marks_the_winner() -> None:
    p = policy(OFF, groups={"staff": OBSERVE, "admins": COLLABORATE})
    text = p.explain("bob", ["staff", "admins"])
    assert "cap:    collaborate" in text
    assert "rule:   caps.groups.admins" in text
    assert "groups grant" in text
    assert "  * caps.groups.admins = collaborate" in text
    assert "    caps.groups.staff = observe" in text
    assert "    caps.default = off" in text


def test_a_refusal_names_the_cap_and_its_rule() -> None:
    decision = policy(OBSERVE).effective_cap("carol")
    assert not decision.allows(COLLABORATE) and decision.allows(OBSERVE)
    message = decision.refusal(COLLABORATE)
    assert "observe" in message and "caps.default" in message and "carol" in message


def test_without_a_policy_nothing_caps_the_preset() -> None:
    decision = no_policy_decision("me")
    assert (decision.preset, decision.rule) == (COLLABORATE, NO_POLICY_RULE)
    assert NO_POLICY_RULE in explain_text(decision)


def test_decisions_serialise_for_json() -> None:
    p = policy(OFF, users={"alice": OBSERVE}, groups={"admins": COLLABORATE})
    body = p.effective_cap("alice", ["admins"]).to_dict()
    assert body["cap"] == "observe" and body["rule"] == "caps.users.alice"
    assert [m["rule"] for m in body["matching"] if m["wins"]] == ["caps.users.alice"]
    assert len(body["matching"]) == 3


# --------------------------------------------------------------------------- properties

names = st.sampled_from(["ann", "ben", "cat", "dev", "ops", "sec", "qa"])
presets = st.sampled_from(list(Preset))
tables = st.dictionaries(names, presets, max_size=5)


@given(default=presets, users=tables, groups=tables, user=names, member_of=st.sets(names))
def test_the_cap_never_exceeds_the_most_permissive_matching_rule(
    default: Preset,
    users: dict[str, Preset],
    groups: dict[str, Preset],
    user: str,
    member_of: set[str],
) -> None:
    p = policy(default, users, groups)
    decision = p.effective_cap(user, sorted(member_of))
    matching = [default] + [groups[g] for g in member_of if g in groups]
    if user in users:
        matching.append(users[user])
    assert decision.preset.rank <= max(m.rank for m in matching)
    assert decision.preset in matching
    assert decision.winner is not None and decision.winner in decision.matching
    assert decision.winner.preset == decision.preset


@given(default=presets, users=tables, groups=tables, user=names, member_of=st.sets(names))
def test_explain_names_the_winning_rule_and_every_matching_rule(
    default: Preset,
    users: dict[str, Preset],
    groups: dict[str, Preset],
    user: str,
    member_of: set[str],
) -> None:
    p = policy(default, users, groups)
    decision = p.effective_cap(user, sorted(member_of))
    text = explain_text(decision)
    assert f"rule:   {decision.rule}" in text
    assert f"  * {decision.rule} = {decision.preset.value}" in text
    expected = 1 + (user in users) + len([g for g in member_of if g in groups])
    assert len(decision.matching) == expected
    for rule in decision.matching:
        assert rule.label in text


@given(default=presets, users=tables, groups=tables, user=names, member_of=st.sets(names))
def test_a_user_rule_always_decides_when_present_and_groups_only_widen_otherwise(
    default: Preset,
    users: dict[str, Preset],
    groups: dict[str, Preset],
    user: str,
    member_of: set[str],
) -> None:
    p = policy(default, users, groups)
    decision = p.effective_cap(user, sorted(member_of))
    group_rules = [groups[g] for g in member_of if g in groups]
    if user in users:
        assert decision.preset == users[user]
    elif group_rules:
        assert decision.preset == max(group_rules, key=lambda x: x.rank)
        for group in groups:  # joining one more group never narrows
            more = p.effective_cap(user, sorted(member_of | {group}))
            assert more.preset.rank >= decision.preset.rank
    else:
        assert decision.preset == default
