"""Per-harness screen parsers: pure functions of (screen text, evidence).

``parse(text, evidence)`` dispatches on ``evidence.harness``; every parser returns a
``Reading`` (state, composer_empty, title, summary, PR links). See ``base`` for the rules they
share and each module's docstring for its harness's markers.
"""

from __future__ import annotations

from collections.abc import Callable

from openbus.daemon.screens import claude, codex, gemini, omp, opencode
from openbus.daemon.screens.base import (
    HARNESSES,
    STATES,
    ClaudeStatus,
    Evidence,
    Reading,
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


def parse(text: str, evidence: Evidence) -> Reading:
    return PARSERS.get(evidence.harness, parse_unknown)(text, evidence)


__all__ = [
    "HARNESSES",
    "PARSERS",
    "STATES",
    "ClaudeStatus",
    "Evidence",
    "Reading",
    "State",
    "parse",
    "pr_links",
    "strip_ansi",
]
