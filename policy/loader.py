"""Loading the signed policy, and reloading it without ever going laxer or older.

Theory of operation
-------------------
A ``PolicyLoader`` holds at most one policy *in force*. It moves through two states::

    EMPTY --load() ok--> IN_FORCE --reload() ok--> IN_FORCE (newer version)
      |                     |
      load() fails:         reload() fails: the policy in force stays, the failure goes to
      raises                ``on_rejected`` (the daemon audits it), reload() returns False

Every (re)load reads the policy bytes once, verifies the detached signature over those bytes
against the pinned keys, parses those same bytes, then applies the version rule:

* a version lower than the one in force, or than the highest ever accepted on this box (the
  ``state_file``), is a rollback and is refused;
* the same version with different bytes is refused too (a version names one document);
* the same version with the same bytes is "no change";
* a higher version is accepted: the state file is updated (atomically, fsynced) *before* the
  new policy is put in force, so a crash can never leave the box accepting an older policy.

There is no fallback: a missing file, a bad signature or a schema error on reload keeps the
last good policy, never "no policy". The state file records the org, the highest version and
the digest of its bytes; deleting it is the operator's deliberate way to reset rollback
protection (for example when a box moves to another org).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from openbus.kernel.clock import Clock
from openbus.kernel.errors import ConfigError
from openbus.policy.errors import PolicyRollback
from openbus.policy.model import Policy
from openbus.policy.schema import parse_policy
from openbus.policy.signing import verify_file

log = logging.getLogger("openbus.policy")


@dataclass(frozen=True)
class LoadedPolicy:
    """A policy in force: the value, the digest of its exact bytes, the key that signed it."""

    policy: Policy
    digest: str
    key_id: str
    loaded_at: float
    path: Path

    @property
    def version(self) -> int:
        return self.policy.version


@dataclass(frozen=True)
class PolicyRejection:
    """A reload that was refused; the policy in force (if any) is unchanged."""

    path: Path
    reason: str  # one line, names the file; never key material
    error: ConfigError
    in_force: LoadedPolicy | None
    at: float


@dataclass(frozen=True)
class _Seen:
    org: str
    version: int
    digest: str


class PolicyLoader:
    """Loads ``path`` (signed by one of ``public_keys``) and reloads it on demand."""

    def __init__(
        self,
        path: Path,
        public_keys: Sequence[Ed25519PublicKey],
        clock: Clock,
        *,
        state_file: Path | None = None,
        on_rejected: Callable[[PolicyRejection], None] | None = None,
    ) -> None:
        self.path = path
        self.public_keys = tuple(public_keys)
        self.clock = clock
        self.state_file = state_file
        self.on_rejected = on_rejected
        self._current: LoadedPolicy | None = None
        self._lock = threading.Lock()

    @property
    def current(self) -> LoadedPolicy | None:
        return self._current

    @property
    def policy(self) -> Policy | None:
        current = self._current
        return current.policy if current else None

    # ------------------------------------------------------------------ public

    def load(self) -> LoadedPolicy:
        """Load (or re-check) the policy; raise a ``ConfigError`` subclass when refused."""
        with self._lock:
            loaded, _changed = self._admit()
            return loaded

    def reload(self) -> bool:
        """Try the file again. True when a new policy is now in force; never raises.

        A refused reload keeps the policy in force and is reported to ``on_rejected``.
        """
        with self._lock:
            try:
                _loaded, changed = self._admit()
            except ConfigError as exc:
                self._reject(exc)
                return False
            return changed

    # ------------------------------------------------------------------ rules

    def _admit(self) -> tuple[LoadedPolicy, bool]:
        verified = verify_file(self.path, self.public_keys)
        policy = parse_policy(verified.data, str(self.path))
        digest = hashlib.sha256(verified.data).hexdigest()
        current = self._current
        if current is not None:
            self._check_version(policy, digest, current.policy.version, current.digest, "in force")
            if current.digest == digest:
                return current, False
        seen = self._read_state()
        if seen is not None:
            self._check_version(policy, digest, seen.version, seen.digest, "recorded on this box")
        loaded = LoadedPolicy(
            policy=policy,
            digest=digest,
            key_id=verified.key_id,
            loaded_at=self.clock.now(),
            path=self.path,
        )
        if seen is None or seen.version < policy.version:
            self._write_state(_Seen(policy.org, policy.version, digest))
        self._current = loaded
        return loaded, True

    def _check_version(
        self, policy: Policy, digest: str, version: int, known_digest: str, where: str
    ) -> None:
        if policy.version < version:
            raise PolicyRollback(
                f"version {policy.version} is older than version {version} {where}; "
                "refusing a rollback",
                path=str(self.path),
                key="version",
            )
        if policy.version == version and digest != known_digest:
            raise PolicyRollback(
                f"version {policy.version} has different content from the version {version} "
                f"{where}; a changed policy needs a higher version",
                path=str(self.path),
                key="version",
            )

    def _reject(self, error: ConfigError) -> None:
        rejection = PolicyRejection(
            path=self.path,
            reason=error.message,
            error=error,
            in_force=self._current,
            at=self.clock.now(),
        )
        log.warning("org policy reload refused, keeping the policy in force: %s", error.message)
        if self.on_rejected is not None:
            self.on_rejected(rejection)

    # ------------------------------------------------------------------ state file

    def _read_state(self) -> _Seen | None:
        if self.state_file is None:
            return None
        where = str(self.state_file)
        try:
            raw = self.state_file.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ConfigError(f"cannot read: {exc.strerror}", path=where) from None
        try:
            data = json.loads(raw)
            seen = _Seen(str(data["org"]), int(data["version"]), str(data["digest"]))
        except (ValueError, KeyError, TypeError):
            raise ConfigError(
                "corrupt policy state (delete it only to reset rollback protection)", path=where
            ) from None
        return seen

    def _write_state(self, seen: _Seen) -> None:
        if self.state_file is None:
            return
        target = self.state_file
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        body = json.dumps(
            {"org": seen.org, "version": seen.version, "digest": seen.digest}, sort_keys=True
        ).encode()
        try:
            target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            try:
                os.write(fd, body + b"\n")
                os.fsync(fd)
            finally:
                os.close(fd)
            tmp.replace(target)
            dir_fd = os.open(target.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise ConfigError(
                f"cannot record the policy version: {exc.strerror}", path=str(target)
            ) from None
