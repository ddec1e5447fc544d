"""What an agent may see of a history entry: seed 000's allowlist, and nothing else.

"History is index fields only": harness and session id (what ``get_session`` takes), repo,
title, cwd, branches, PRs, last-active time, matched terms, and only the liveness routing
needs (state and pane). Never prompts (a subagent's task is model-written and untrusted),
never the resume argv, never a transcript path, never a pid.

Of those, the text that came from transcripts or git (``SHOWN_TEXT_FIELDS``: title, repo, cwd,
branches, PRs) is masked before an agent reads it (``mcp.observe``). The index asks the masker
(a ``TextScreen``) about that text once, in a pass after the entry is written, and keeps the
answer with the masker's fingerprint (``SessionEntry.clean_under``); ``project_for_agent``
hands it on (``AgentView.clean_under``), so a hit found clean under the rules now in force is
not masked again on every search.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

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


# the fields of ``AGENT_FIELDS`` whose text came from transcripts or git: masked for an agent
SHOWN_TEXT_FIELDS = ("repo", "title", "cwd", "branches", "prs")


class TextScreen(Protocol):
    """What masks an agent's text (``mcp.masking.Masker``): whether texts hold nothing it
    would mask, and the fingerprint of the rules it masks by (None: its answers are not to be
    kept)."""

    @property
    def fingerprint(self) -> int | None: ...

    def clean(self, texts: Iterable[str]) -> bool: ...


def shown_texts(entry: SessionEntry) -> list[str]:
    """The strings of an entry's ``SHOWN_TEXT_FIELDS``, in their order (a list field's each)."""
    texts: list[str] = []
    for name in SHOWN_TEXT_FIELDS:
        value = getattr(entry, name)
        if isinstance(value, tuple):
            texts.extend(value)
        elif value is not None:
            texts.append(value)
    return texts


class AgentView(dict[str, Any]):
    """An agent's view of an entry: a plain dict of ``AGENT_FIELDS`` (what is sent), and the
    fingerprint its shown text was kept clean under (``SessionEntry.clean_under``), which is
    not sent."""

    clean_under: int | None = None


def project_for_agent(
    entry: SessionEntry, matched_terms: Sequence[str], liveness: Liveness
) -> AgentView:
    projected = AgentView(
        {
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
    )
    assert tuple(projected) == AGENT_FIELDS
    projected.clean_under = entry.clean_under
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
