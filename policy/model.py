"""The org policy as a value, and the rule that decides each user's cap.

Theory of operation
-------------------
A ``Policy`` is what a validated, signed policy file says; it is immutable and does no I/O.
Its main question is "what is the highest preset this user may grant?", answered by
``effective_cap(user, groups)`` as a ``CapDecision``: the preset, the rule it came from, and a
sentence saying why.

The rule is chosen by specificity, and within groups by permissiveness:

1. A per-user rule (``[caps.users]``) wins outright, whether it is above or below the user's
   group rules: it is how an admin singles one person out, up or down.
2. Otherwise, if any of the user's groups (primary and supplementary) has a rule
   (``[caps.groups]``), the most permissive of those applies. Groups grant, as in sudoers:
   being in one more group never takes a permission away. Ties go to the group whose name
   sorts first, so the answer is deterministic.
3. Otherwise ``caps.default`` applies (``off`` when the policy does not say).

So the effective cap is always the preset of one matching rule, and never above the most
permissive matching rule. ``explain`` lists every matching rule and marks the winner.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from openbus.kernel.limits import BUILTIN_LIMITS, Limits
from openbus.kernel.scopes import Preset

RuleKind = Literal["user", "group", "default", "none"]

NO_POLICY_RULE = "no org policy (local mode)"
NO_POLICY_WHY = "no org policy is configured on this box (local mode), so nothing caps the preset"


_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def dotted(*parts: str) -> str:
    """The dotted TOML form of a key path, quoting parts that are not bare keys."""
    return ".".join(p if _BARE_KEY.match(p) else '"' + p.replace('"', '\\"') + '"' for p in parts)


@dataclass(frozen=True)
class CapRule:
    """One line of ``[caps]``: who it matches and the highest preset it allows."""

    kind: RuleKind
    name: str | None
    preset: Preset
    line: int | None = None

    @property
    def key(self) -> tuple[str, ...]:
        if self.kind == "user":
            return ("caps", "users", self.name or "")
        if self.kind == "group":
            return ("caps", "groups", self.name or "")
        if self.kind == "default":
            return ("caps", "default")
        return ()

    @property
    def label(self) -> str:
        return dotted(*self.key) if self.key else NO_POLICY_RULE

    def describe(self) -> str:
        where = f" (line {self.line})" if self.line else ""
        return f"{self.label} = {self.preset.value}{where}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.label,
            "kind": self.kind,
            "name": self.name,
            "preset": self.preset.value,
            "line": self.line,
        }


@dataclass(frozen=True)
class CapDecision:
    """The highest preset ``user`` may grant, the rule that says so, and why."""

    user: str
    preset: Preset
    rule: str
    reason: str
    groups: tuple[str, ...] = ()
    why: str = ""  # the reason without the list of other matching rules
    winner: CapRule | None = None
    matching: tuple[CapRule, ...] = ()

    def allows(self, preset: Preset) -> bool:
        return preset.rank <= self.preset.rank

    def refusal(self, wanted: Preset) -> str:
        """The sentence for a grant above the cap (names the cap and its rule)."""
        return (
            f"the org policy caps {self.user} at {self.preset.value} "
            f"({self.rule}); {wanted.value} is above that cap"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "user": self.user,
            "groups": list(self.groups),
            "cap": self.preset.value,
            "rule": self.rule,
            "line": self.winner.line if self.winner else None,
            "reason": self.reason,
            "matching": [dict(r.to_dict(), wins=(r == self.winner)) for r in self.matching],
        }


@dataclass(frozen=True)
class AuditExport:
    """Where audit records ship off-box, and whether that is required."""

    required: bool = False
    endpoint: str | None = None
    protocol: str = "grpc"
    credential_file: Path | None = None
    # box name -> the fingerprints of the audit keys it may sign checkpoints with (pinned
    # for ``openbus audit verify``; more than one while a box's key is being replaced)
    key_fingerprints: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key_fingerprints", _frozen(self.key_fingerprints))

    def to_dict(self) -> dict[str, Any]:
        return {
            "export_required": self.required,
            "endpoint": self.endpoint,
            "protocol": self.protocol,
            "credential_file": str(self.credential_file) if self.credential_file else None,
            "key_fingerprints": {
                box: sorted(prints) for box, prints in sorted(self.key_fingerprints.items())
            },
        }


@dataclass(frozen=True)
class HostedDefaults:
    """Hosted boxes' defaults: Connect off for new agents, control connected (its charter)."""

    connect_default: Preset = Preset.OFF
    control: Literal["connected", "off"] = "connected"

    def to_dict(self) -> dict[str, Any]:
        return {"connect_default": self.connect_default.value, "control": self.control}


def _frozen(mapping: Mapping[Any, Any]) -> Mapping[Any, Any]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True)
class Policy:
    """A validated org policy. ``lines`` maps key paths to their line in the file."""

    org: str
    version: int
    issued: datetime
    default_cap: Preset = Preset.OFF
    user_caps: Mapping[str, Preset] = field(default_factory=dict)
    group_caps: Mapping[str, Preset] = field(default_factory=dict)
    harnesses: frozenset[str] | None = None  # None: the policy does not restrict harnesses
    audit: AuditExport = field(default_factory=AuditExport)
    limits: Limits = BUILTIN_LIMITS
    hosted: HostedDefaults = field(default_factory=HostedDefaults)
    lines: Mapping[tuple[str, ...], int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "user_caps", _frozen(self.user_caps))
        object.__setattr__(self, "group_caps", _frozen(self.group_caps))
        object.__setattr__(self, "lines", _frozen(self.lines))

    # ------------------------------------------------------------------ rules

    def _rule(self, kind: RuleKind, name: str | None, preset: Preset) -> CapRule:
        key = CapRule(kind, name, preset).key
        return CapRule(kind, name, preset, self.lines.get(key))

    def default_rule(self) -> CapRule:
        return self._rule("default", None, self.default_cap)

    def matching_rules(self, user: str, groups: Iterable[str]) -> tuple[CapRule, ...]:
        """Every rule that matches: the user's, then its groups' (sorted), then the default."""
        rules: list[CapRule] = []
        if user in self.user_caps:
            rules.append(self._rule("user", user, self.user_caps[user]))
        for group in sorted(set(groups)):
            if group in self.group_caps:
                rules.append(self._rule("group", group, self.group_caps[group]))
        rules.append(self.default_rule())
        return tuple(rules)

    def effective_cap(self, user: str, groups: Iterable[str] = ()) -> CapDecision:
        """The highest preset ``user`` (a member of ``groups``) may grant. See the module doc."""
        group_list = tuple(dict.fromkeys(groups))
        matching = self.matching_rules(user, group_list)
        user_rules = [r for r in matching if r.kind == "user"]
        group_rules = [r for r in matching if r.kind == "group"]
        if user_rules:
            winner = user_rules[0]
            why = f"a per-user rule for {user} applies; it overrides group rules and the default"
        elif group_rules:
            winner = max(group_rules, key=lambda r: r.preset.rank)  # first of the ties
            why = (
                f"no per-user rule for {user}; the most permissive rule among {user}'s groups "
                f"applies (groups grant, like sudoers)"
            )
        else:
            winner = matching[-1]
            why = f"no per-user rule for {user} and no rule for any of {user}'s groups"
        others = [r.describe() for r in matching if r is not winner]
        also = f"; other matching rules: {', '.join(others)}" if others else ""
        reason = f"{why}{also}"
        return CapDecision(
            user=user,
            preset=winner.preset,
            rule=winner.label,
            reason=reason,
            groups=group_list,
            why=why,
            winner=winner,
            matching=matching,
        )

    def explain(self, user: str, groups: Iterable[str] = ()) -> str:
        return explain_text(self.effective_cap(user, groups))

    # ------------------------------------------------------------------ the rest

    def harness_allowed(self, harness: str) -> bool:
        return self.harnesses is None or harness in self.harnesses

    def to_dict(self) -> dict[str, Any]:
        return {
            "org": self.org,
            "version": self.version,
            "issued": self.issued.isoformat().replace("+00:00", "Z"),
            "caps": {
                "default": self.default_cap.value,
                "users": {k: v.value for k, v in sorted(self.user_caps.items())},
                "groups": {k: v.value for k, v in sorted(self.group_caps.items())},
            },
            "harnesses": sorted(self.harnesses) if self.harnesses is not None else None,
            "audit": self.audit.to_dict(),
            "limits": self.limits.as_dict(),
            "hosted": self.hosted.to_dict(),
        }


@functools.lru_cache(maxsize=1024)
def no_policy_decision(user: str) -> CapDecision:
    """Local mode with no org policy: nothing caps what the user may grant. (One frozen value
    per user, kept: every agent's scope check asks for it.)"""
    rule = CapRule("none", None, Preset.COLLABORATE)
    return CapDecision(
        user=user,
        preset=Preset.COLLABORATE,
        rule=NO_POLICY_RULE,
        reason=NO_POLICY_WHY,
        why=NO_POLICY_WHY,
        winner=rule,
        matching=(rule,),
    )


def explain_text(decision: CapDecision) -> str:
    """The human form of a decision: the cap, the rule, why, and every matching rule."""
    line = f" (line {decision.winner.line})" if decision.winner and decision.winner.line else ""
    groups = ", ".join(decision.groups) if decision.groups else "(none)"
    out = [
        f"user:   {decision.user}",
        f"groups: {groups}",
        f"cap:    {decision.preset.value}",
        f"rule:   {decision.rule}{line}",
        f"why:    {decision.why or decision.reason}",
        "matching rules:",
    ]
    for rule in decision.matching:
        mark = "*" if rule == decision.winner else " "
        out.append(f"  {mark} {rule.describe()}")
    return "\n".join(out)
