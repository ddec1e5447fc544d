"""The daemon's PolicyRuntime: start-up fails closed, caps per real user, cheap reload."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from openbus.daemon.config import PolicyConfig, parse_config
from openbus.daemon.policy_runtime import STATE_FILE_NAME, PolicyRuntime
from openbus.kernel.errors import ConfigError
from openbus.kernel.limits import BUILTIN_LIMITS
from openbus.kernel.scopes import Preset
from openbus.kernel.testing import FixedClock
from openbus.policy.accounts import groups_of
from openbus.policy.errors import PolicyRollback, PolicySignatureError
from openbus.policy.loader import PolicyRejection
from openbus.policy.model import NO_POLICY_RULE
from openbus.policy.signing import signature_path
from tests.policy.conftest import Accounts, OrgKeys, SignedWriter, policy_text


class Fixture:
    def __init__(self, tmp_path: Path, keys: OrgKeys, write: SignedWriter) -> None:
        self.path = tmp_path / "policy.toml"
        self.state = tmp_path / "state" / STATE_FILE_NAME
        self.keys = keys
        self.write = write
        self.clock = FixedClock()
        self.rejections: list[PolicyRejection] = []

    def runtime(self, *, hosted: bool = True, **kwargs: Any) -> PolicyRuntime:
        return PolicyRuntime(
            PolicyConfig(file=self.path, org_public_key=self.keys.public),
            hosted=hosted,
            clock=self.clock,
            state_file=self.state,
            on_rejected=self.rejections.append,
            **kwargs,
        )


@pytest.fixture
def f(tmp_path: Path, org_keys: OrgKeys, write_signed: SignedWriter) -> Fixture:
    return Fixture(tmp_path, org_keys, write_signed)


def test_local_mode_without_a_policy_caps_nothing() -> None:
    runtime = PolicyRuntime(PolicyConfig(), hosted=False, clock=FixedClock())
    decision = runtime.cap_for("anyone")
    assert (decision.preset, decision.rule) == (Preset.COLLABORATE, NO_POLICY_RULE)
    assert runtime.limits == BUILTIN_LIMITS
    assert runtime.harness_allowed("gemini")
    assert runtime.reload() is False and runtime.check_for_change() is False


def test_hosted_mode_without_a_policy_refuses_to_start() -> None:
    with pytest.raises(ConfigError) as caught:
        PolicyRuntime(PolicyConfig(), hosted=True, clock=FixedClock(), source="/etc/x.toml")
    assert caught.value.key == "policy.file" and "/etc/x.toml" in caught.value.message


def test_a_policy_without_a_pinned_key_refuses_to_start(f: Fixture) -> None:
    f.write(policy_text())
    with pytest.raises(ConfigError) as caught:
        PolicyRuntime(PolicyConfig(file=f.path), hosted=False, clock=f.clock)
    assert caught.value.key == "policy.org_public_key"


@pytest.mark.parametrize("hosted", [True, False])
def test_a_bad_signature_refuses_to_start_naming_the_file(f: Fixture, hosted: bool) -> None:
    f.write(policy_text())
    f.path.write_text(policy_text(default="collaborate"))
    with pytest.raises(PolicySignatureError) as caught:
        f.runtime(hosted=hosted)
    assert str(f.path) in caught.value.message


def test_a_missing_signature_refuses_to_start(f: Fixture) -> None:
    f.write(policy_text())
    signature_path(f.path).unlink()
    with pytest.raises(PolicySignatureError):
        f.runtime()


def test_from_config_keeps_the_version_state_in_the_state_dir(f: Fixture, tmp_path: Path) -> None:
    f.write(policy_text(version=4))
    config = parse_config(
        {
            "daemon": {"state_dir": str(tmp_path / "st")},
            "policy": {"file": str(f.path), "org_public_key": str(f.keys.public)},
            "hosted": {"enabled": True},
        },
        str(tmp_path / "openbus.toml"),
    )
    runtime = PolicyRuntime.from_config(config, clock=f.clock)
    assert runtime.policy is not None and runtime.policy.version == 4
    assert (tmp_path / "st" / STATE_FILE_NAME).exists()


def test_a_narrowing_version_applies_on_the_next_cap_check(f: Fixture) -> None:
    f.write(policy_text(version=1, default="collaborate"))
    runtime = f.runtime(groups_of=lambda user: ())
    assert runtime.cap_for("carol").preset is Preset.COLLABORATE
    f.write(policy_text(version=2, default="observe"))
    assert runtime.check_for_change() is True
    decision = runtime.cap_for("carol")  # no clock advance: the cache keys on the policy
    assert (decision.preset, decision.rule) == (Preset.OBSERVE, "caps.default")


def test_an_unchanged_file_costs_no_reload(f: Fixture) -> None:
    f.write(policy_text())
    runtime = f.runtime()
    assert runtime.check_for_change() is False
    assert f.rejections == []


def test_a_refused_change_is_reported_once_and_the_last_good_stays(f: Fixture) -> None:
    f.write(policy_text(version=3, default="off"))
    runtime = f.runtime(groups_of=lambda user: ())
    f.write(policy_text(version=2, default="collaborate"))  # a validly signed rollback
    assert runtime.check_for_change() is False
    assert runtime.check_for_change() is False  # same bad file: not reported again
    (rejection,) = f.rejections
    assert isinstance(rejection.error, PolicyRollback)
    assert runtime.cap_for("carol").preset is Preset.OFF


def test_a_tampered_reload_via_sighup_keeps_the_policy_and_is_reported(f: Fixture) -> None:
    f.write(policy_text(version=3, default="off"))
    runtime = f.runtime(groups_of=lambda user: ())
    f.path.write_text(policy_text(version=4, default="collaborate"))
    assert runtime.reload() is False
    assert isinstance(f.rejections[0].error, PolicySignatureError)
    assert runtime.cap_for("carol").preset is Preset.OFF


def test_rollback_is_refused_when_the_daemon_restarts(f: Fixture) -> None:
    f.write(policy_text(version=8))
    f.runtime()
    f.write(policy_text(version=7))
    with pytest.raises(PolicyRollback):
        f.runtime()


def test_limits_and_harnesses_come_from_the_policy(f: Fixture) -> None:
    extra = '[harnesses]\nallowed = ["claude"]\n[limits]\nmessage_bytes = 2048\n'
    f.write(policy_text(extra=extra))
    runtime = f.runtime()
    assert runtime.limits.message_bytes == 2048
    assert runtime.limits.hop_limit == BUILTIN_LIMITS.hop_limit
    assert runtime.harness_allowed("claude") and not runtime.harness_allowed("codex")


def test_group_lookups_are_cached_for_a_few_seconds(f: Fixture) -> None:
    f.write(policy_text())
    calls: list[str] = []

    def lookup(user: str) -> tuple[str, ...]:
        calls.append(user)
        return ("admins",)

    runtime = f.runtime(groups_of=lookup, group_ttl=5.0)
    for _ in range(100):
        assert runtime.cap_for("bob").rule == "caps.groups.admins"
    assert calls == ["bob"]
    f.clock.advance(5.0)
    runtime.cap_for("bob")
    assert calls == ["bob", "bob"]


# --------------------------------------------------------------------------- real accounts


@pytest.mark.root
def test_caps_follow_real_group_membership(f: Fixture, tmp_path: Path, accounts: Accounts) -> None:
    staff = accounts.group("staff")
    admins = accounts.group("admins")
    primary = accounts.group("prim")
    bob = accounts.user("bob", primary=primary, groups=(staff,))
    lead = accounts.user("lead", primary=admins)  # a rule on the PRIMARY group counts too
    extra = f'"{staff}" = "observe"\n"{admins}" = "collaborate"\n'
    f.write(policy_text(default="off") + extra)
    runtime = f.runtime(group_ttl=5.0)

    decision = runtime.cap_for(bob)
    assert (decision.preset, decision.rule) == (Preset.OBSERVE, f"caps.groups.{staff}")
    assert decision.groups[0] == primary and staff in decision.groups
    lead_decision = runtime.cap_for(lead)
    assert (lead_decision.preset, lead_decision.rule) == (
        Preset.COLLABORATE,
        f"caps.groups.{admins}",
    )
    assert runtime.cap_for("alice").rule == "caps.users.alice"
    unknown = runtime.cap_for(f"{accounts.prefix}ghost")
    assert (unknown.preset, unknown.rule, unknown.groups) == (Preset.OFF, "caps.default", ())

    accounts.add_to_group(bob, admins)
    assert runtime.cap_for(bob).preset is Preset.OBSERVE  # cached for a few seconds
    f.clock.advance(5.0)
    widened = runtime.cap_for(bob)
    assert (widened.preset, widened.rule) == (Preset.COLLABORATE, f"caps.groups.{admins}")


@pytest.mark.root
def test_the_runtime_and_explain_agree_on_a_real_user(f: Fixture, accounts: Accounts) -> None:
    staff = accounts.group("staff")
    admins = accounts.group("admins")
    carol = accounts.user("carol", groups=(staff, admins))
    f.write(policy_text(default="off") + f'"{staff}" = "observe"\n"{admins}" = "observe"\n')
    runtime = f.runtime()
    assert runtime.policy is not None
    offline = runtime.policy.effective_cap(carol, groups_of(carol))
    assert runtime.cap_for(carol) == offline
    assert offline.rule == f"caps.groups.{min(staff, admins)}"
