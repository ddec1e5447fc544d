"""Loading and reloading: verified bytes only, never older, never laxer by fallback."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from openbus.kernel.errors import ConfigError
from openbus.kernel.scopes import Preset
from openbus.kernel.testing import FixedClock
from openbus.policy.errors import PolicyInvalid, PolicyRollback, PolicySignatureError
from openbus.policy.loader import PolicyLoader, PolicyRejection
from openbus.policy.signing import load_public_keys, signature_path
from tests.policy.conftest import OrgKeys, SignedWriter, make_keys, policy_text


class Harness:
    def __init__(self, tmp_path: Path, keys: OrgKeys, write: SignedWriter) -> None:
        self.tmp_path = tmp_path
        self.keys = keys
        self.write = write
        self.state = tmp_path / "state" / "policy-state.json"
        self.path = tmp_path / "policy.toml"
        self.rejections: list[PolicyRejection] = []
        self.clock = FixedClock()

    def loader(self) -> PolicyLoader:
        return PolicyLoader(
            self.path,
            load_public_keys([self.keys.public]),
            self.clock,
            state_file=self.state,
            on_rejected=self.rejections.append,
        )


@pytest.fixture
def h(tmp_path: Path, org_keys: OrgKeys, write_signed: SignedWriter) -> Harness:
    return Harness(tmp_path, org_keys, write_signed)


def test_a_valid_policy_loads_and_records_its_version(h: Harness) -> None:
    h.write(policy_text(version=3))
    loaded = h.loader().load()
    assert loaded.version == 3 and loaded.policy.org == "example"
    assert json.loads(h.state.read_text())["version"] == 3


def test_start_up_refuses_a_tampered_policy(h: Harness) -> None:
    h.write(policy_text())
    h.path.write_text(policy_text(default="collaborate"))
    with pytest.raises(PolicySignatureError):
        h.loader().load()


def test_start_up_refuses_a_policy_whose_signature_is_missing(h: Harness) -> None:
    h.write(policy_text())
    signature_path(h.path).unlink()
    with pytest.raises(PolicySignatureError):
        h.loader().load()


def test_start_up_refuses_a_signed_but_invalid_policy(h: Harness) -> None:
    h.write(policy_text(extra="[limits]\nhop_limit = 40\n"))
    with pytest.raises(PolicyInvalid) as caught:
        h.loader().load()
    assert "limits.hop_limit" in caught.value.message


def test_a_version_bump_that_narrows_a_cap_is_reported_by_the_loader(h: Harness) -> None:
    h.write(policy_text(version=3, default="collaborate"))
    loader = h.loader()
    loader.load()
    assert loader.policy is not None
    assert loader.policy.effective_cap("carol").preset is Preset.COLLABORATE
    h.write(policy_text(version=4, default="observe"))
    assert loader.reload() is True
    assert loader.policy.effective_cap("carol").preset is Preset.OBSERVE
    assert h.rejections == []


def test_reloading_the_same_bytes_changes_nothing(h: Harness) -> None:
    h.write(policy_text())
    loader = h.loader()
    first = loader.load()
    assert loader.reload() is False
    assert loader.current is first and h.rejections == []


def test_a_lower_version_is_refused_on_reload_and_the_last_good_stays(h: Harness) -> None:
    h.write(policy_text(version=5, default="off"))
    loader = h.loader()
    good = loader.load()
    h.write(policy_text(version=4, default="collaborate"))
    assert loader.reload() is False
    assert loader.current is good
    (rejection,) = h.rejections
    assert isinstance(rejection.error, PolicyRollback)
    assert "version 4" in rejection.reason and "5" in rejection.reason
    assert str(h.path) in rejection.reason
    assert rejection.in_force is good


def test_the_same_version_with_different_bytes_is_refused(h: Harness) -> None:
    h.write(policy_text(version=5, default="off"))
    loader = h.loader()
    loader.load()
    h.write(policy_text(version=5, default="collaborate"))
    assert loader.reload() is False
    assert loader.policy is not None and loader.policy.default_cap is Preset.OFF
    assert isinstance(h.rejections[0].error, PolicyRollback)


def test_a_rollback_is_refused_across_a_restart(h: Harness) -> None:
    h.write(policy_text(version=7, default="off"))
    h.loader().load()
    h.write(policy_text(version=6, default="collaborate"))  # validly signed, but older
    with pytest.raises(PolicyRollback) as caught:
        h.loader().load()  # a fresh loader: the daemon restarted
    assert "version 6" in caught.value.message and "recorded on this box" in caught.value.message


def test_the_same_version_with_other_bytes_is_refused_across_a_restart(h: Harness) -> None:
    h.write(policy_text(version=7, default="off"))
    h.loader().load()
    h.write(policy_text(version=7, default="collaborate"))
    with pytest.raises(PolicyRollback):
        h.loader().load()


def test_the_same_policy_loads_again_after_a_restart(h: Harness) -> None:
    h.write(policy_text(version=7))
    h.loader().load()
    assert h.loader().load().version == 7


@pytest.mark.parametrize("breakage", ["tamper", "delete", "unsign", "invalid", "wrong-key"])
def test_a_bad_reload_keeps_the_last_good_policy_and_is_reported(h: Harness, breakage: str) -> None:
    h.write(policy_text(version=2, default="off"))
    loader = h.loader()
    good = loader.load()
    if breakage == "tamper":
        h.path.write_text(policy_text(version=3, default="collaborate"))
    elif breakage == "delete":
        h.path.unlink()
    elif breakage == "unsign":
        h.path.write_text(policy_text(version=3))
        signature_path(h.path).unlink()
    elif breakage == "invalid":
        h.write(policy_text(version=3, default="everything"))
    else:
        h.write(policy_text(version=3), keys=make_keys(h.tmp_path / "other"))
    h.clock.advance(10)
    assert loader.reload() is False
    assert loader.current is good  # never a fallback to "no policy"
    (rejection,) = h.rejections
    assert isinstance(rejection.error, ConfigError)
    assert str(h.path) in rejection.reason
    assert rejection.at == h.clock.now()


def test_a_corrupt_state_file_fails_closed_naming_it(h: Harness) -> None:
    h.write(policy_text())
    h.state.parent.mkdir(parents=True)
    h.state.write_text("{not json")
    with pytest.raises(ConfigError) as caught:
        h.loader().load()
    assert str(h.state) in caught.value.message


def test_the_loaded_policy_is_the_verified_bytes(h: Harness) -> None:
    h.write(policy_text(version=9))
    loaded = h.loader().load()
    assert loaded.digest == hashlib.sha256(h.path.read_bytes()).hexdigest()
    assert loaded.loaded_at == h.clock.now()
