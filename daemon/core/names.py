"""Names people read: how cards, feeds and the pane detail speak of agents and panes.

Theory of operation
-------------------
Pure functions over values, no I/O. An agent is named by what a person sees of it, never by
its session UUID: ``agent_name`` gives ``claude "auth review" %10 on fix/login`` (harness,
title, pane, branch; what is unknown is left out). The rest put the directory's and the
message book's terms into plain words: ``composer_words`` (never "composer unknown"),
``hop_words`` (never "hop 0"), ``event_words`` (never ``title: None -> ...``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TITLE_CHARS = 60


def _quoted(text: str) -> str:
    flat = " ".join(text.split())
    if len(flat) > TITLE_CHARS:
        flat = flat[: TITLE_CHARS - 1] + "\u2026"
    return f'"{flat}"'


def agent_name(harness: str | None, title: str | None, pane: str | None, branch: str | None) -> str:
    """``claude "auth review" %10 on fix/login``; the parts not known are left out."""
    parts = [harness if harness and harness != "unknown" else "agent"]
    if title and title.strip():
        parts.append(_quoted(title))
    if pane:
        parts.append(pane)
    name = " ".join(parts)
    return f"{name} on {branch}" if branch else name


def actor_harness(actor: str) -> str | None:
    """The harness an agent actor names (``agent:claude:...`` -> ``claude``), else None."""
    kind, _, rest = actor.partition(":")
    if kind != "agent" or not rest:
        return None
    return rest.partition(":")[0] or None


def actor_pane(actor: str) -> str | None:
    """The pane an agent actor not yet bound to a session names (``agent:claude:pane:%3:41``
    -> ``%3``), else None."""
    _, found, rest = actor.partition(":pane:")
    return (rest.partition(":")[0] or None) if found and actor.startswith("agent:") else None


def composer_words(empty: bool | None) -> str:
    if empty is True:
        return "composer empty"
    if empty is False:
        return "draft in the composer"
    return "composer not visible on this screen"


def hop_words(hop: int) -> str:
    """Where a message stands in its conversation."""
    if hop <= 0:
        return "a new conversation"
    return f"reply {hop} in a conversation"


def _value(value: Any) -> str:
    return _quoted(value) if isinstance(value, str) else "nothing"


def event_words(event: Mapping[str, Any]) -> str:
    """One directory event (appeared, state, title, harness, incarnation, stale, fresh) in
    plain words."""
    kind = event.get("kind")
    before, after = event.get("from"), event.get("to")
    if kind == "appeared":
        harness = event.get("harness")
        return f"appeared, running {harness}" if harness and harness != "unknown" else "appeared"
    if kind == "state":
        return f"now {after} (was {before})"
    if kind == "title":
        if not after:
            return f"title {_value(before)} cleared"
        if not before:
            return f"title set to {_value(after)}"
        return f"title changed from {_value(before)} to {_value(after)}"
    if kind == "harness":
        return f"recognised as {after}"
    if kind == "incarnation":
        return f"a new process: {after} (was {before})"
    if kind == "stale":
        why = event.get("why")
        return f"stale, last seen as shown: {why}" if why else "stale, last seen as shown"
    if kind == "fresh":
        return "followed again (no longer stale)"
    return str(kind)
