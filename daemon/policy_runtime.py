"""The daemon's side of the org policy: load it at start, watch it, answer caps cheaply.

Theory of operation
-------------------
``PolicyRuntime`` is built from ``[policy] file`` / ``org_public_key`` and the hosted flag:

* no ``[policy] file`` in local mode: no org policy; every user's cap is ``collaborate`` with
  the rule "no org policy (local mode)", no harness is forbidden, limits are built-in;
  otherwise ``check_harness`` refuses a harness outside ``[harnesses] allowed`` (launch and
  Connect call it);
* no ``[policy] file`` (or no pinned key) in hosted mode: ``ConfigError``, the daemon does
  not start (a hosted box runs under its org's policy);
* a configured policy whose signature is missing or bad, or which does not validate, or is
  older than the highest version this box accepted: the constructor raises (a
  ``ConfigError`` subclass naming the file), in either mode: fail closed.

After start, ``reload()`` (SIGHUP) and ``check_for_change()`` (a cheap poll of the policy's
and the signature's inode, size and mtime) try the file again; a refused reload keeps the
policy in force, calls ``on_rejected`` and keeps the rejection for ``take_rejections()``, so the
daemon's policy watch can audit it. ``cap_for(user)`` is on
every call's path: the user's groups are looked up through NSS at most once per
``group_ttl`` seconds (injected clock), and the decision is cached against the digest of the
policy in force, so a narrowed policy applies on the very next call.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

from openbus.daemon.config import Config, PolicyConfig
from openbus.kernel.clock import Clock
from openbus.kernel.errors import ConfigError, PolicyRefused
from openbus.kernel.limits import BUILTIN_LIMITS, Limits
from openbus.policy.accounts import UnknownUser, groups_of
from openbus.policy.loader import LoadedPolicy, PolicyLoader, PolicyRejection
from openbus.policy.model import CapDecision, Policy, no_policy_decision
from openbus.policy.signing import load_public_keys, signature_path

STATE_FILE_NAME = "policy-state.json"
DEFAULT_GROUP_TTL = 5.0

FileStamp = tuple[int, int, int] | None  # (inode, size, mtime_ns), None when missing


def _stamp(path: Path) -> FileStamp:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _lookup_groups(user: str) -> tuple[str, ...]:
    try:
        return groups_of(user)
    except UnknownUser:
        return ()


class PolicyRuntime:
    """The org policy in force in this daemon, and the cap of every user under it."""

    def __init__(
        self,
        config: PolicyConfig,
        *,
        hosted: bool,
        clock: Clock,
        state_file: Path | None = None,
        on_rejected: Callable[[PolicyRejection], None] | None = None,
        groups_of: Callable[[str], tuple[str, ...]] = _lookup_groups,
        group_ttl: float = DEFAULT_GROUP_TTL,
        source: str = "[policy]",
    ) -> None:
        self.config = config
        self.hosted = hosted
        self.clock = clock
        self.on_rejected = on_rejected
        self._groups_of = groups_of
        self._group_ttl = group_ttl
        self._groups: dict[str, tuple[float, tuple[str, ...]]] = {}
        self._decisions: dict[str, tuple[float, str, CapDecision]] = {}
        self._watch_lock = threading.Lock()
        self._stamps: tuple[FileStamp, FileStamp] = (None, None)
        self._loader: PolicyLoader | None = None
        self._unreported: list[PolicyRejection] = []

        if config.file is None:
            if hosted:
                raise ConfigError(
                    "a hosted box needs an org policy: set [policy] file and org_public_key",
                    path=source,
                    key="policy.file",
                )
            return
        if config.org_public_key is None:
            raise ConfigError(
                "an org policy needs the org's pinned public key",
                path=source,
                key="policy.org_public_key",
            )
        keys = load_public_keys([config.org_public_key])
        self._loader = PolicyLoader(
            config.file, keys, clock, state_file=state_file, on_rejected=self._rejected
        )
        self._stamps = self._current_stamps()
        self._loader.load()  # raises: a box does not start under a bad policy

    @classmethod
    def from_config(
        cls,
        config: Config,
        *,
        clock: Clock,
        on_rejected: Callable[[PolicyRejection], None] | None = None,
    ) -> PolicyRuntime:
        """The runtime for a daemon config; the version state lives in the state dir."""
        return cls(
            config.policy,
            hosted=config.hosted.enabled,
            clock=clock,
            state_file=config.daemon.state_dir / STATE_FILE_NAME,
            on_rejected=on_rejected,
            source=str(config.path) if config.path else "<defaults>",
        )

    # ------------------------------------------------------------------ what is in force

    @property
    def loaded(self) -> LoadedPolicy | None:
        return self._loader.current if self._loader else None

    @property
    def policy(self) -> Policy | None:
        loaded = self.loaded
        return loaded.policy if loaded else None

    @property
    def limits(self) -> Limits:
        policy = self.policy
        return policy.limits if policy else BUILTIN_LIMITS

    def harness_allowed(self, harness: str) -> bool:
        policy = self.policy
        return policy is None or policy.harness_allowed(harness)

    def check_harness(self, harness: str) -> None:
        """``PolicyRefused`` naming the harness and the rule when the org policy forbids it."""
        policy = self.policy
        if policy is None or self.harness_allowed(harness):
            return
        allowed = ", ".join(sorted(policy.harnesses or ())) or "none"
        line = policy.lines.get(("harnesses", "allowed"))
        where = f" (line {line} of {self.config.file})" if line else f" ({self.config.file})"
        raise PolicyRefused(
            f"the org policy does not allow the {harness} harness: rule harnesses.allowed = "
            f"[{allowed}]{where}",
            field="harness",
        )

    def groups(self, user: str) -> tuple[str, ...]:
        """The user's groups, from NSS at most once per ``group_ttl`` seconds."""
        return self._cached_groups(user)[1]

    def _cached_groups(self, user: str) -> tuple[float, tuple[str, ...]]:
        now = self.clock.monotonic()
        cached = self._groups.get(user)
        if cached is not None and cached[0] > now:
            return cached
        entry = (now + self._group_ttl, self._groups_of(user))
        self._groups[user] = entry
        return entry

    def cap_for(self, user: str) -> CapDecision:
        """The highest preset ``user`` may grant right now, with its rule and reason."""
        loaded = self.loaded
        if loaded is None:
            return no_policy_decision(user)
        now = self.clock.monotonic()
        cached = self._decisions.get(user)
        if cached is not None and cached[0] > now and cached[1] == loaded.digest:
            return cached[2]
        expires, groups = self._cached_groups(user)
        decision = loaded.policy.effective_cap(user, groups)
        self._decisions[user] = (expires, loaded.digest, decision)
        return decision

    def forget_groups(self) -> None:
        """Drop cached group memberships (the next call looks them up again)."""
        self._groups.clear()
        self._decisions.clear()

    # ------------------------------------------------------------------ change

    def _current_stamps(self) -> tuple[FileStamp, FileStamp]:
        assert self.config.file is not None
        return (_stamp(self.config.file), _stamp(signature_path(self.config.file)))

    def reload(self) -> bool:
        """Try the policy file again (SIGHUP). True when a new policy is in force."""
        if self._loader is None:
            return False
        with self._watch_lock:
            self._stamps = self._current_stamps()
            return self._loader.reload()

    def check_for_change(self) -> bool:
        """Reload if the policy or its signature changed on disk since the last look.

        Costs two ``stat`` calls; a refused change is reported once, not on every poll.
        """
        if self._loader is None:
            return False
        if self._current_stamps() == self._stamps:
            return False
        return self.reload()

    def take_rejections(self) -> list[PolicyRejection]:
        """The refused reloads since the last call (each reported once)."""
        taken, self._unreported = self._unreported, []
        return taken

    def _rejected(self, rejection: PolicyRejection) -> None:
        self._unreported.append(rejection)
        if self.on_rejected is not None:
            self.on_rejected(rejection)
