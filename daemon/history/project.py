"""What an agent may see of a history entry: seed 000's allowlist, and nothing else.

"History is index fields only": harness and session id (what ``get_session`` takes), repo,
title, cwd, branches, PRs, last-active time, matched terms, and only the liveness routing
needs (state and pane). Never prompts (a subagent's task is model-written and untrusted),
never the resume argv, never a transcript path, never a pid.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from openbus.daemon.history.model import Liveness, SessionEntry, iso

AGENT_FIELDS = (
    "harness",
    "session_id",
    "repo",
    "title",
    "cwd",
    "branches",
    "prs",
    "last_active",
    "matched_terms",
    "liveness",
)


def project_for_agent(
    entry: SessionEntry, matched_terms: Sequence[str], liveness: Liveness
) -> dict[str, Any]:
    projected = {
        "harness": entry.harness,
        "session_id": entry.session_id,
        "repo": entry.repo,
        "title": entry.title,
        "cwd": entry.cwd,
        "branches": list(entry.branches),
        "prs": list(entry.prs),
        "last_active": iso(entry.last_active),
        "matched_terms": list(matched_terms),
        "liveness": liveness.for_routing(),
    }
    assert tuple(projected) == AGENT_FIELDS
    return projected


def full_for_human(
    entry: SessionEntry, matched_terms: Sequence[str], liveness: Liveness
) -> dict[str, Any]:
    """The whole entry, for the human API (prompts, resume argv, transcript path, pid)."""
    return {
        **entry.to_dict(),
        "matched_terms": list(matched_terms),
        "liveness": {"state": liveness.state.value, "pane": liveness.pane, "pid": liveness.pid},
    }
