"""What a hosted daemon trusts of its tunnel: the tunnel's pinned public keys and its uid."""

from __future__ import annotations

import pwd
from typing import Any

from openbus.daemon.config import Config
from openbus.kernel.errors import ConfigError
from openbus.kernel.tunnel_signature import load_public_keys


def tunnel_trust(config: Config) -> tuple[list[Any], int]:
    """The tunnel's pinned public keys and its uid; a clear ``ConfigError`` otherwise."""
    hosted = config.hosted
    where = str(config.path) if config.path else "<defaults>"
    key = "hosted.tunnel_public_key"
    if hosted.tunnel_public_key is None:
        raise ConfigError("hosted mode needs the tunnel's public key", path=where, key=key)
    try:
        keys = load_public_keys(hosted.tunnel_public_key.read_bytes())
    except OSError as exc:
        raise ConfigError(
            f"cannot read {hosted.tunnel_public_key}: {exc.strerror}", path=where, key=key
        ) from None
    except ValueError:
        raise ConfigError("not an Ed25519 public key", path=where, key=key) from None
    try:
        tunnel_uid = pwd.getpwnam(hosted.tunnel_user).pw_uid
    except KeyError:
        raise ConfigError(
            f"no such user {hosted.tunnel_user!r}", path=where, key="hosted.tunnel_user"
        ) from None
    return keys, tunnel_uid
