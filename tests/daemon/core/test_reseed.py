"""Re-seed: control is restarted when its context passes the limit or it does project work."""

from __future__ import annotations

import json
from pathlib import Path
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


DATA = Path(__file__).parents[1] / "history" / "data"


def test_a_codex_rollouts_token_counts_give_its_context_and_mcp_calls_are_no_drift() -> None:
    watch = ReseedWatch()
    for path in ("codex-interactive-rollout.jsonl", "codex-exec-mcp-rollout.jsonl"):
        for line in (DATA / path).read_text().splitlines():
            watch.observe(json.loads(line))
    # the last token_count's last request: 10 in, 5 out (Codex counts the total)
    assert watch.context_tokens == 15
    assert watch.verdict(15) is None  # its MCP calls (namespace mcp__steer) are no drift
    # the stub's requests are all 15 tokens: a later, larger one in the same shape
    grown = json.loads(TOKEN_COUNT.replace('"total_tokens":15}', '"total_tokens":4000}', 1))
    watch.observe(grown)
    assert watch.verdict(1000) == "its context reached 4000 tokens (limit 1000)"


TOKEN_COUNT = next(
    line
    for line in reversed((DATA / "codex-interactive-rollout.jsonl").read_text().splitlines())
    if '"token_count"' in line
)


def test_a_control_whose_first_request_passes_the_limit_is_not_reseeded_for_size() -> None:
    watch = ReseedWatch()
    watch.observe(assistant({"input_tokens": 2000}))  # the charter and a large directory
    watch.observe(assistant({"input_tokens": 2500}))
    assert watch.born_over(1500)
    assert watch.verdict(1500) is None  # a fresh control would start as large
    watch.observe(assistant(tools=("Bash",)))
    assert watch.verdict(1500) == "its charter drifted: it called Bash"  # drift still counts


def codex_call(kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
    payload: dict[str, Any] = {"type": kind, "name": name, "arguments": "{}", "call_id": "c1"}
    if namespace:
        payload["namespace"] = namespace
    return {"type": "response_item", "payload": payload}


def test_codex_running_commands_or_patching_files_is_drift() -> None:
    watch = ReseedWatch()
    watch.observe(codex_call("function_call", "hand_off", "mcp__openbus"))
    watch.observe(codex_call("function_call", "exec_command", "mcp__other"))
    assert watch.verdict(10**9) is None
    watch.observe(codex_call("function_call", "exec_command"))
    watch.observe(codex_call("custom_tool_call", "apply_patch"))
    assert watch.verdict(10**9) == "its charter drifted: it called apply_patch, exec_command"


def gemini_message(tokens: int, *tools: str) -> dict[str, Any]:
    calls = [{"id": f"c{i}", "name": name, "args": {}} for i, name in enumerate(tools)]
    total = {"input": tokens, "output": 5, "cached": tokens // 2, "total": tokens + 5}
    return {"type": "gemini", "content": "", "tokens": total, "toolCalls": calls}


def test_gemini_cli_messages_give_its_context_and_its_shell_and_edit_tools_are_drift() -> None:
    watch = ReseedWatch()
    watch.observe({"type": "user", "content": [{"text": "hello"}]})
    watch.observe(gemini_message(900, "mcp_openbus_wait_for_changes"))
    watch.observe(gemini_message(1200))
    assert watch.context_tokens == 1200 and watch.verdict(1000) is not None
    assert watch.verdict(10**9) is None  # an MCP tool's call is no drift
    watch.observe(gemini_message(1300, "run_shell_command", "replace"))
    assert watch.verdict(10**9) == "its charter drifted: it called replace, run_shell_command"


OUT_OF_ORDER = DATA / "claude-2.1.197-turns-written-out-of-order.jsonl"


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_turns_claude_code_wrote_out_of_order_are_read_in_the_order_they_happened() -> None:
    # a real transcript: the second turn (6,000 tokens) typed while control answered its
    # first (10 tokens), and Claude Code appended the second turn's records first
    lines = records(OUT_OF_ORDER)
    contexts = [r["message"]["usage"]["input_tokens"] for r in lines if r["type"] == "assistant"]
    assert contexts == [6000, 10]  # the file's order
    watch = ReseedWatch()
    for record in lines:
        watch.observe(record)
    assert (watch.first_context, watch.context_tokens) == (10, 6000)
    assert not watch.born_over(5000)
    assert watch.verdict(5000) == "its context reached 6000 tokens (limit 5000)"


def test_nothing_is_decided_on_size_while_an_earlier_record_is_still_to_come() -> None:
    lines = records(OUT_OF_ORDER)
    first_turn = next(i for i, r in enumerate(lines) if r.get("parentUuid", "") is None)
    watch = ReseedWatch()
    for record in lines[:first_turn]:  # the second turn alone: it names a parent not read
        watch.observe(record)
    assert not watch.complete
    assert not watch.born_over(5000) and watch.verdict(5000) is None
    watch.observe(assistant(tools=("Bash",)))
    assert watch.verdict(5000) == "its charter drifted: it called Bash"  # drift needs no order
    for record in lines[first_turn:]:
        watch.observe(record)
    assert watch.complete and watch.first_context == 10


def stamped(tokens: int, at: str) -> dict[str, Any]:
    return {**assistant({"input_tokens": tokens}), "timestamp": at}


def test_records_are_ordered_by_their_timestamps_and_the_file_where_they_have_none() -> None:
    watch = ReseedWatch()
    watch.observe(stamped(300, "2026-12-05T04:26:00.000Z"))
    watch.observe(stamped(100, "2026-12-05T04:25:00+00:00"))  # earlier, read later
    watch.observe(stamped(200, "2026-12-05T04:25:30"))  # no zone: UTC
    assert (watch.first_context, watch.context_tokens) == (100, 300)
    watch.observe(stamped(400, "not a time"))  # unreadable: after what was read
    watch.observe(assistant({"input_tokens": 500}))
    assert watch.context_tokens == 500


def test_a_parent_claude_code_never_wrote_holds_decisions_back_for_one_look_only() -> None:
    watch = ReseedWatch()
    watch.observe({"type": "user", "uuid": "u1", "parentUuid": None, "message": {}})
    watch.observe({**assistant({"input_tokens": 100}), "uuid": "a1", "parentUuid": "u1"})
    # a phantom: a parent held in the harness's memory, never written
    watch.observe({"type": "user", "uuid": "u2", "parentUuid": "phantom", "message": {}})
    watch.observe({**assistant({"input_tokens": 9000}), "uuid": "a2", "parentUuid": "u2"})
    watch.read_to_end()  # the file's end: the parent may still be written
    assert watch.verdict(5000) is None
    watch.read_to_end()  # a look later, still not written: given up
    assert watch.complete
    assert watch.verdict(5000) == "its context reached 9000 tokens (limit 5000)"
