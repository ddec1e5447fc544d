"""Org policy costs on the action path: ``PolicyRuntime.cap_for`` and a (re)load.

Figures, each with its floor measured in the same run:

* ``cap_for`` with a warm cache vs. a bare dict lookup (the floor of any cache);
* ``cap_for`` on a cold cache (NSS group lookup of a real user + rule choice) vs. the NSS
  lookup alone;
* ``check_for_change`` with nothing changed vs. two ``os.stat`` calls;
* a full load (read, Ed25519 verify, TOML parse and validation) vs. ``tomllib.loads`` alone.
"""

from __future__ import annotations

import os
import tempfile
import time
import tomllib
from collections.abc import Callable
from pathlib import Path

from openbus.daemon.config import PolicyConfig
from openbus.daemon.policy_runtime import PolicyRuntime
from openbus.kernel.testing import FixedClock
from openbus.policy.accounts import groups_of
from openbus.policy.loader import PolicyLoader
from openbus.policy.signing import (
    load_private_key,
    load_public_keys,
    signature_path,
    write_keypair,
    write_signature,
)

POLICY = """\
org = "bench"
version = 1
issued = "2026-11-30T00:00:00Z"

[caps]
default = "observe"

[caps.users]
{users}

[caps.groups]
root = "collaborate"
{groups}

[limits]
message_bytes = 8192
"""


def per_call(fn: Callable[[], object], n: int) -> float:
    fn()
    started = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - started) / n


def report(name: str, ours: float, floor: float, floor_name: str) -> None:
    ratio = ours / floor if floor else float("inf")
    print(
        f"{name:<28} {ours * 1e6:9.2f} us   {floor_name:<22} {floor * 1e6:9.2f} us   "
        f"ratio {ratio:6.1f}x"
    )


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_keypair(root / "org.pem", root / "org.pub")
        users = "\n".join(f'user{i} = "observe"' for i in range(200))
        groups = "\n".join(f'group{i} = "off"' for i in range(200))
        path = root / "policy.toml"
        path.write_text(POLICY.format(users=users, groups=groups))
        write_signature(path, path.read_bytes(), load_private_key(root / "org.pem"))

        clock = FixedClock()
        runtime = PolicyRuntime(
            PolicyConfig(file=path, org_public_key=root / "org.pub"),
            hosted=True,
            clock=clock,
            state_file=root / "state.json",
        )
        user = "root"
        runtime.cap_for(user)
        floor_dict = {user: runtime.cap_for(user)}
        report(
            "cap_for (warm cache)",
            per_call(lambda: runtime.cap_for(user), 200_000),
            per_call(lambda: floor_dict[user], 200_000),
            "dict lookup",
        )

        def cold() -> object:
            runtime.forget_groups()
            return runtime.cap_for(user)

        report(
            "cap_for (cold cache)",
            per_call(cold, 5_000),
            per_call(lambda: groups_of(user), 5_000),
            "NSS groups lookup",
        )

        sig = signature_path(path)
        report(
            "check_for_change (idle)",
            per_call(runtime.check_for_change, 50_000),
            per_call(lambda: (os.stat(path), os.stat(sig)), 50_000),
            "two os.stat",
        )

        keys = load_public_keys([root / "org.pub"])
        text = path.read_text()

        def full_load() -> object:
            return PolicyLoader(path, keys, clock).load()

        report(
            "load (verify + parse)",
            per_call(full_load, 500),
            per_call(lambda: tomllib.loads(text), 500),
            "tomllib.loads",
        )


if __name__ == "__main__":
    main()
