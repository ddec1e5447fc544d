"""Errors of the org policy package.

They all derive from the daemon's ``ConfigError`` (the policy is configuration the daemon
refuses to start without when hosted), so every edge already prints them as one line naming
the file. None of them ever carries key material.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from openbus.kernel.errors import ConfigError


@dataclass(frozen=True)
class SchemaIssue:
    """One problem in a policy file: the dotted field, its line (1-based) and what is wrong."""

    field: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.field}: {self.message}"


class PolicyInvalid(ConfigError):
    """The policy file is not valid TOML or does not follow the schema."""

    code = "policy_invalid"

    def __init__(self, path: str, issues: Sequence[SchemaIssue]) -> None:
        self.issues = tuple(issues)
        first = self.issues[0] if self.issues else None
        count = len(self.issues)
        summary = "; ".join(str(issue) for issue in self.issues)
        head = "invalid policy" if count <= 1 else f"invalid policy ({count} errors)"
        # The issues name their fields and lines themselves; ``key`` points at the first.
        super().__init__(f"{head}: {summary}", path=path)
        self.key = self.field = first.field if first else None


class PolicySignatureError(ConfigError):
    """The signature is missing, malformed, by an unpinned key, or over other bytes.

    Deliberately opaque: the message is the same whatever went wrong, so the error says
    nothing useful to someone probing the verifier. It names the files involved.
    """

    code = "policy_signature"

    def __init__(self, policy_path: str, signature_path: str) -> None:
        super().__init__(
            f"signature {signature_path} is missing or does not verify against the pinned org key",
            path=policy_path,
        )
        self.signature_path = signature_path


class PolicyKeyError(ConfigError):
    """A key file cannot be read or is not an Ed25519 key in the expected PEM form."""

    code = "policy_key"


class PolicyRollback(ConfigError):
    """A policy older than (or different at the same version from) the one in force."""

    code = "policy_rollback"
