"""Per-harness screen parsers: pure functions of (screen text, evidence).

``parse(text, evidence)`` dispatches on ``evidence.harness``; every parser returns a
``Reading`` (state, composer_empty, title, summary, PR links). See ``base`` for the rules they
share and each module's docstring for its harness's markers.
"""

from __future__ import annotations

from collections.abc import Callable

from openbus.daemon.screens import claude, codex, gemini, generic, omp, opencode
from openbus.daemon.screens.base import (
    HARNESSES,
    STATES,
    ClaudeStatus,
    Evidence,
    Reading,
    Rule,
    State,
    pr_links,
    strip_ansi,
)
from openbus.daemon.screens.generic import parse_shell, parse_unknown

Parser = Callable[[str, Evidence], Reading]

PARSERS: dict[str, Parser] = {
    "claude": claude.parse,
    "codex": codex.parse,
    "opencode": opencode.parse,
    "omp": omp.parse,
    "gemini": gemini.parse,
    "shell": parse_shell,
}


# Each parser's rules by id (a reading's ``rule``), for explaining a state.
RULES: dict[str, dict[str, Rule]] = {
    "claude": claude.RULES,
    "codex": codex.RULES,
    "opencode": opencode.RULES,
    "omp": omp.RULES,
    "gemini": gemini.RULES,
    "shell": generic.RULES,
}


def parse(text: str, evidence: Evidence) -> Reading:
    return PARSERS.get(evidence.harness, parse_unknown)(text, evidence)


def parser_name(harness: str) -> str:
    """Which parser reads a harness's screen (its own name, ``shell``, or ``generic``)."""
    return harness if harness in PARSERS else "generic"


def rule_of(harness: str, rule: str) -> Rule | None:
    """The rule ``rule`` of the parser reading ``harness``; None when it has no such rule."""
    return RULES.get(harness, generic.RULES).get(rule)


__all__ = [
    "HARNESSES",
    "PARSERS",
    "RULES",
    "STATES",
    "ClaudeStatus",
    "Evidence",
    "Reading",
    "Rule",
    "State",
    "parse",
    "parser_name",
    "pr_links",
    "rule_of",
    "strip_ansi",
]
