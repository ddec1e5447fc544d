"""openbus-policy end to end, as an org admin and a box operator run it."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.policy.conftest import Accounts


def run(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "openbus.policy.cli", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def ok(*argv: str, cwd: Path) -> str:
    result = run(*argv, cwd=cwd)
    assert result.returncode == 0, result.stderr
    return result.stdout


def fails(*argv: str, cwd: Path) -> str:
    result = run(*argv, cwd=cwd)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


POLICY = """\
org = "example"
version = {version}
issued = "2026-11-30T00:00:00Z"

[caps]
default = "off"

[caps.users]
alice = "collaborate"

[caps.groups]
{groups}
"""


def test_an_admin_can_keygen_sign_verify_and_show(tmp_path: Path) -> None:
    ok("keygen", "org.pem", "org.pub", cwd=tmp_path)
    assert stat.S_IMODE((tmp_path / "org.pem").stat().st_mode) == 0o600
    (tmp_path / "policy.toml").write_text(POLICY.format(version=3, groups='staff = "observe"'))
    out = ok("sign", "policy.toml", "--key", "org.pem", cwd=tmp_path)
    assert "policy.toml.sig" in out
    assert (tmp_path / "policy.toml.sig").exists()
    assert "valid" in ok("verify", "policy.toml", "--pubkey", "org.pub", cwd=tmp_path)
    verified = json.loads(
        ok("verify", "policy.toml", "--pubkey", "org.pub", "--json", cwd=tmp_path)
    )
    assert verified["valid"] is True and verified["version"] == 3
    shown = ok("show", "policy.toml", cwd=tmp_path)
    assert "version:   3" in shown and "group staff: observe" in shown
    data = json.loads(ok("show", "policy.toml", "--json", "--pubkey", "org.pub", cwd=tmp_path))
    assert data["caps"]["users"] == {"alice": "collaborate"}
    assert data["signature"].startswith("valid")


def test_verify_exits_non_zero_on_tampered_bytes_wrong_key_and_missing_signature(
    tmp_path: Path,
) -> None:
    ok("keygen", "org.pem", "org.pub", cwd=tmp_path)
    ok("keygen", "other.pem", "other.pub", cwd=tmp_path)
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY.format(version=1, groups=""))
    ok("sign", "policy.toml", "--key", "org.pem", cwd=tmp_path)

    line = fails("verify", "policy.toml", "--pubkey", "other.pub", cwd=tmp_path)
    assert "policy.toml.sig" in line

    policy.write_text(policy.read_text().replace('"off"', '"collaborate"', 1))
    fails("verify", "policy.toml", "--pubkey", "org.pub", cwd=tmp_path)

    (tmp_path / "policy.toml.sig").unlink()
    fails("verify", "policy.toml", "--pubkey", "org.pub", cwd=tmp_path)


def test_sign_refuses_an_invalid_policy_naming_field_and_line(tmp_path: Path) -> None:
    ok("keygen", "org.pem", "org.pub", cwd=tmp_path)
    (tmp_path / "policy.toml").write_text(
        POLICY.format(version=1, groups="") + "\n[limits]\nmessage_bytes = 1000000\n"
    )
    line = fails("sign", "policy.toml", "--key", "org.pem", cwd=tmp_path)
    assert "limits.message_bytes" in line and "line 15" in line
    assert not (tmp_path / "policy.toml.sig").exists()


def test_keygen_refuses_to_overwrite_and_leaves_the_key_alone(tmp_path: Path) -> None:
    ok("keygen", "org.pem", "org.pub", cwd=tmp_path)
    before = (tmp_path / "org.pem").read_bytes()
    line = fails("keygen", "org.pem", "new.pub", cwd=tmp_path)
    assert "org.pem" in line and "overwrite" in line
    assert (tmp_path / "org.pem").read_bytes() == before
    assert not (tmp_path / "new.pub").exists()


def test_errors_never_print_key_material(tmp_path: Path) -> None:
    ok("keygen", "org.pem", "org.pub", cwd=tmp_path)
    (tmp_path / "policy.toml").write_text(POLICY.format(version=1, groups=""))
    line = fails("sign", "policy.toml", "--key", "org.pub", cwd=tmp_path)
    assert "org.pub" in line and "BEGIN" not in line


def test_a_missing_policy_file_is_one_line_naming_it(tmp_path: Path) -> None:
    ok("keygen", "org.pem", "org.pub", cwd=tmp_path)
    assert "nope.toml" in fails("verify", "nope.toml", "--pubkey", "org.pub", cwd=tmp_path)
    assert "nope.toml" in fails("show", "nope.toml", cwd=tmp_path)


@pytest.mark.root
def test_explain_a_user_in_two_groups_with_real_accounts(
    tmp_path: Path, accounts: Accounts
) -> None:
    staff = accounts.group("staff")
    admins = accounts.group("admins")
    primary = accounts.group("prim")
    bob = accounts.user("bob", primary=primary, groups=(staff, admins))
    groups = f'"{staff}" = "observe"\n"{admins}" = "collaborate"\n'
    (tmp_path / "policy.toml").write_text(POLICY.format(version=2, groups=groups))
    ok("keygen", "org.pem", "org.pub", cwd=tmp_path)
    ok("sign", "policy.toml", "--key", "org.pem", cwd=tmp_path)

    text = ok("explain", bob, "--policy", "policy.toml", "--pubkey", "org.pub", cwd=tmp_path)
    assert "cap:    collaborate" in text
    assert f"rule:   caps.groups.{admins} (line 13)" in text
    assert f"  * caps.groups.{admins} = collaborate (line 13)" in text
    assert f"    caps.groups.{staff} = observe (line 12)" in text
    assert "    caps.default = off (line 6)" in text
    assert f"groups: {primary}, " in text  # the primary group first

    body = json.loads(
        ok("explain", bob, "--policy", "policy.toml", "--pubkey", "org.pub", "--json", cwd=tmp_path)
    )
    assert body["cap"] == "collaborate" and body["rule"] == f"caps.groups.{admins}"
    assert body["groups"][0] == primary and set(body["groups"]) == {primary, staff, admins}
    assert [m["rule"] for m in body["matching"] if m["wins"]] == [f"caps.groups.{admins}"]


def test_explain_refuses_an_unverified_policy(tmp_path: Path) -> None:
    ok("keygen", "org.pem", "org.pub", cwd=tmp_path)
    (tmp_path / "policy.toml").write_text(POLICY.format(version=2, groups=""))
    line = fails("explain", "root", "--policy", "policy.toml", "--pubkey", "org.pub", cwd=tmp_path)
    assert "policy.toml.sig" in line


@pytest.mark.parametrize("verb", ["keygen", "sign", "verify", "show", "explain"])
def test_every_verb_has_help(tmp_path: Path, verb: str) -> None:
    assert verb in ok(verb, "--help", cwd=tmp_path) or "usage" in ok(verb, "--help", cwd=tmp_path)


def test_explain_for_someone_not_on_this_box_applies_the_default_and_says_so(
    tmp_path: Path,
) -> None:
    ok("keygen", "org.pem", "org.pub", cwd=tmp_path)
    (tmp_path / "policy.toml").write_text(POLICY.format(version=2, groups=""))
    ok("sign", "policy.toml", "--key", "org.pem", cwd=tmp_path)
    ghost = "obtest-nobody-here"
    text = ok("explain", ghost, "--policy", "policy.toml", "--pubkey", "org.pub", cwd=tmp_path)
    assert "cap:    off" in text and "rule:   caps.default" in text
    assert f"{ghost} is not a user on this box" in text
