"""Re-seed: control is restarted when its context passes the limit or it does project work."""

from __future__ import annotations

from typing import Any

from openbus.daemon.core.reseed import ReseedWatch


def assistant(usage: dict[str, Any] | None = None, tools: tuple[str, ...] = ()) -> dict[str, Any]:
    content = [{"type": "tool_use", "name": name, "input": {}} for name in tools]
    return {"type": "assistant", "message": {"usage": usage or {}, "content": content}}


def test_the_last_turns_context_is_what_counts() -> None:
    watch = ReseedWatch()
    watch.observe(assistant({"input_tokens": 900, "cache_read_input_tokens": 100}))
    assert watch.verdict(1500) is None
    watch.observe(assistant({"input_tokens": 10, "cache_creation_input_tokens": 1600}))
    assert watch.verdict(1500) == "its context reached 1610 tokens (limit 1500)"


def test_editing_files_or_running_commands_is_drift() -> None:
    watch = ReseedWatch()
    watch.observe(assistant(tools=("mcp__openbus__hand_off",)))
    assert watch.verdict(10**9) is None
    watch.observe(assistant(tools=("Edit", "Bash")))
    assert watch.verdict(10**9) == "its charter drifted: it called Bash, Edit"


def test_other_records_and_odd_values_are_ignored() -> None:
    watch = ReseedWatch()
    for record in (
        {"type": "user", "message": {"usage": {"input_tokens": 10**9}}},
        {"type": "assistant", "message": "text"},
        assistant({"input_tokens": True, "cache_read_input_tokens": -5}),
    ):
        watch.observe(record)
    assert watch.context_tokens == 0
    assert watch.verdict(1) is None
