"""Fixtures for the org policy tests: keys, signed policy files, real users and groups."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from openbus.policy.signing import load_private_key, write_keypair, write_signature
from tests.support.require import skip_missing

EXAMPLE = """\
org = "example"
version = {version}
issued = "2026-11-30T00:00:00Z"

[caps]
default = "{default}"

[caps.users]
alice = "collaborate"

[caps.groups]
admins = "collaborate"
"""


def policy_text(version: int = 3, default: str = "observe", extra: str = "") -> str:
    return EXAMPLE.format(version=version, default=default) + extra


@dataclass
class OrgKeys:
    private: Path
    public: Path


def make_keys(directory: Path, name: str = "org") -> OrgKeys:
    directory.mkdir(parents=True, exist_ok=True)
    keys = OrgKeys(directory / f"{name}.pem", directory / f"{name}.pub")
    write_keypair(keys.private, keys.public)
    return keys


@pytest.fixture
def org_keys(tmp_path: Path) -> OrgKeys:
    return make_keys(tmp_path / "keys")


SignedWriter = Callable[..., Path]


@pytest.fixture
def write_signed(tmp_path: Path, org_keys: OrgKeys) -> SignedWriter:
    """Write a policy file (text) and sign its exact bytes with the org key."""

    def write(text: str, *, path: Path | None = None, keys: OrgKeys | None = None) -> Path:
        target = path or tmp_path / "policy.toml"
        target.write_text(text)
        signer = load_private_key((keys or org_keys).private)
        write_signature(target, target.read_bytes(), signer)
        return target

    return write


# --------------------------------------------------------------------------- real accounts


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True, timeout=60)


@dataclass
class Accounts:
    """Throwaway system users and groups, removed when the test ends."""

    prefix: str
    users: list[str]
    groups: list[str]

    def group(self, suffix: str) -> str:
        name = f"{self.prefix}{suffix}"
        _run("groupadd", name)
        self.groups.append(name)
        return name

    def user(self, suffix: str, *, primary: str | None = None, groups: tuple[str, ...] = ()) -> str:
        name = f"{self.prefix}{suffix}"
        argv = ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin"]
        if primary:
            argv += ["--gid", primary]
        else:
            argv += ["--no-user-group", "--gid", "nogroup"]
        if groups:
            argv += ["--groups", ",".join(groups)]
        _run(*argv, name)
        self.users.append(name)
        return name

    def add_to_group(self, user: str, group: str) -> None:
        _run("gpasswd", "--add", user, group)


@pytest.fixture
def accounts() -> Iterator[Accounts]:
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        skip_missing("root", "needs root and useradd to create real users and groups")
    made = Accounts(prefix=f"obtest-{secrets.token_hex(3)}-", users=[], groups=[])
    try:
        yield made
    finally:
        for user in reversed(made.users):
            subprocess.run(["userdel", user], check=False, capture_output=True, timeout=60)
        for group in reversed(made.groups):
            subprocess.run(["groupdel", group], check=False, capture_output=True, timeout=60)
