"""A signed org policy for tests that run the daemon in hosted mode."""

from __future__ import annotations

from pathlib import Path

from openbus.policy.signing import load_private_key, write_keypair, write_signature

DEFAULT_POLICY = """\
org = "test"
version = {version}
issued = "2026-11-30T00:00:00Z"

[caps]
default = "{default}"
"""


def signed_policy(
    directory: Path, text: str | None = None, *, version: int = 1, default: str = "collaborate"
) -> dict[str, str]:
    """Write a policy and its signature under ``directory``; return the ``[policy]`` section."""
    directory.mkdir(parents=True, exist_ok=True)
    private, public = directory / "org.key", directory / "org.pub"
    if not private.exists():
        write_keypair(private, public)
    policy = directory / "policy.toml"
    data = (
        text if text is not None else DEFAULT_POLICY.format(version=version, default=default)
    ).encode()
    policy.write_bytes(data)
    write_signature(policy, data, load_private_key(private))
    return {"file": str(policy), "org_public_key": str(public)}
