"""Transcript parsers over the real Claude Code and Codex transcripts and synthetic ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from openbus.daemon.history.model import (
    MAX_PROMPT_CHARS,
    MAX_PROMPTS,
    MAX_TITLE_CHARS,
    parse_time,
)
from openbus.daemon.history.parse import (
    _records,
    find_prs,
    parse_claude,
    parse_codex,
    parse_codex_thread_names,
    resume_argv,
    split_lines,
    time_span,
)
from tests.daemon.history.homes import DATA, ClaudeHome, CodexHome


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def test_the_real_interactive_claude_transcript_gives_the_humans_prompts_only() -> None:
    parsed = parse_claude(
        _lines(DATA / "claude-interactive-session.jsonl"),
        file_name="cc6fe10f-d359-41b1-bb7a-213c6c6783cb.jsonl",
    )
    assert parsed is not None
    assert parsed.session_id == "cc6fe10f-d359-41b1-bb7a-213c6c6783cb"
    assert parsed.cwd == "/home/dev/app-cc"
    assert parsed.prompts == (
        "hello SLEEP:8 slow turn please",
        'TOOL:echo:{"text":"interactive-claude"}',
        "again SLEEP:5 please",
        'TOOL:echo:{"text":"second"}',
    )
    assert parsed.title == "hello SLEEP:8 slow turn please"
    assert parsed.branches == ()  # "HEAD" is a detached head, not a branch
    assert not parsed.subagent
    assert parsed.started is not None and parsed.last_active is not None
    assert parsed.started < parsed.last_active


def test_prompts_claude_code_wrote_out_of_order_are_read_in_the_order_they_were_sent() -> None:
    # a real transcript: "a long task" was sent as the first turn ended, and Claude Code
    # appended its records before the first turn's
    lines = _lines(DATA / "claude-2.1.197-turns-written-out-of-order.jsonl")
    parsed = parse_claude(lines, file_name="8e72d12c-adb0-42f1-9200-6c03abce01e3.jsonl")
    assert parsed is not None
    assert [prompt[:31] for prompt in parsed.prompts] == [
        "You are the openbus control ses",
        "a long task",
    ]


def test_the_real_headless_claude_run_gives_its_task_text() -> None:
    parsed = parse_claude(
        _lines(DATA / "claude-print-mode-mcp-session.jsonl"),
        file_name="81729f0f-fd84-43d7-998c-8ead8988ebf2.jsonl",
    )
    assert parsed is not None
    assert parsed.prompts == ('TOOL:echo:{"text":"from-claude"}',)
    assert parsed.cwd == "/home/dev/e2e-run01/work"


def test_the_real_codex_rollouts_give_thread_id_prompts_and_thread_name() -> None:
    names = parse_codex_thread_names(_lines(DATA / "codex-session_index.jsonl"))
    parsed = parse_codex(_lines(DATA / "codex-interactive-rollout.jsonl"), thread_names=names)
    assert parsed is not None
    assert parsed.session_id == "01a22b31-0cef-7aa2-8a25-ebb9968b60fa"
    assert parsed.cwd == "/home/dev/app-cx"
    assert parsed.title == "hello codex SLEEP:8 slow"
    assert len(parsed.prompts) == 8
    assert parsed.prompts[0] == "hello codex SLEEP:8 slow"
    assert not any(p.startswith("<environment_context>") for p in parsed.prompts)

    headless = parse_codex(_lines(DATA / "codex-exec-mcp-rollout.jsonl"), thread_names=names)
    assert headless is not None
    assert headless.session_id == "01a22b2f-5f31-76d0-ab02-3f357f0bc7bb"
    assert headless.prompts == ('please TOOL:peek:{"text":"x"}',)
    assert headless.title == 'please TOOL:peek:{"text":"x"}'  # no thread name: first prompt


def test_claude_branches_prs_and_ai_title_are_read(tmp_path: Path) -> None:
    home = ClaudeHome(tmp_path)
    path = home.session(
        "s1",
        "/w/app",
        ["fix the login bug", "see https://github.com/acme/app/issues/3 and ship it"],
        branches=("HEAD", "fix/login"),
        replies=["on it", "opened https://github.com/acme/app/pull/42."],
        ai_title="Fix login bug",
    )
    parsed = parse_claude(_lines(path), file_name=path.name)
    assert parsed is not None
    assert parsed.branches == ("fix/login",)
    assert parsed.prs == ("https://github.com/acme/app/pull/42",)
    assert parsed.title == "Fix login bug"


def test_a_summary_line_titles_a_session_when_there_is_no_ai_title(tmp_path: Path) -> None:
    path = ClaudeHome(tmp_path).session("s2", "/w", ["first prompt"], summary="Refactor parser")
    parsed = parse_claude(_lines(path), file_name=path.name)
    assert parsed is not None and parsed.title == "Refactor parser"


def test_slash_command_echoes_meta_lines_and_interrupts_are_not_prompts() -> None:
    base = {"type": "user", "sessionId": "s", "cwd": "/w", "timestamp": "2026-11-30T06:00:00Z"}
    lines = [
        json.dumps(
            {**base, "message": {"role": "user", "content": "<command-name>/clear</command-name>"}}
        ),
        json.dumps({**base, "isMeta": True, "message": {"role": "user", "content": "meta"}}),
        json.dumps(
            {
                **base,
                "message": {
                    "role": "user",
                    "content": [{"type": "text", "text": "[Request interrupted by user]"}],
                },
            }
        ),
        json.dumps(
            {**base, "message": {"role": "user", "content": [{"type": "text", "text": "real one"}]}}
        ),
        "{not json",
        "",
    ]
    parsed = parse_claude(lines, file_name="s.jsonl")
    assert parsed is not None
    assert parsed.prompts == ("real one",)


def test_a_nested_subagent_transcript_is_a_subagent_with_its_task_and_parent(
    tmp_path: Path,
) -> None:
    home = ClaudeHome(tmp_path)
    path = home.subagent("parent-1", "a2ea5ba327db80df8", "/w", "Find every caller of resolve()")
    parsed = parse_claude(_lines(path), file_name=path.name)
    assert parsed is not None
    assert parsed.subagent
    assert parsed.session_id == "a2ea5ba327db80df8"
    assert parsed.parent_session_id == "parent-1"
    assert parsed.prompts == ("Find every caller of resolve()",)
    assert resume_argv("claude", parsed.session_id, subagent=True) is None


def test_an_old_style_flat_subagent_file_is_a_subagent_too(tmp_path: Path) -> None:
    path = ClaudeHome(tmp_path).subagent("p", "abc123", "/w", "task", nested=False)
    parsed = parse_claude(_lines(path), file_name=path.name)
    assert parsed is not None and parsed.subagent and parsed.session_id == "abc123"


def test_prompts_are_capped_in_count_and_length(tmp_path: Path) -> None:
    prompts = [f"prompt number {i}" for i in range(50)]
    prompts[0] = "x" * (MAX_PROMPT_CHARS * 3)
    path = ClaudeHome(tmp_path).session("s", "/w", prompts)
    parsed = parse_claude(_lines(path), file_name=path.name)
    assert parsed is not None
    assert len(parsed.prompts) == MAX_PROMPTS
    assert len(parsed.prompts[0]) == MAX_PROMPT_CHARS
    assert parsed.prompts[-1] == "prompt number 49"  # the last ones are kept too
    assert parsed.title is not None and len(parsed.title) <= MAX_TITLE_CHARS


def test_an_old_codex_rollout_with_git_info_and_user_message_events(tmp_path: Path) -> None:
    home = CodexHome(tmp_path)
    path = home.rollout(
        "t-old",
        "/w/svc",
        ["migrate the billing tables"],
        git={"branch": "feat/billing", "repository_url": "git@github.com:acme/svc.git"},
        replies=["see https://gitlab.example.com/acme/svc/-/merge_requests/7"],
        old_format=True,
    )
    parsed = parse_codex(_lines(path))
    assert parsed is not None
    assert parsed.prompts == ("migrate the billing tables",)
    assert parsed.branches == ("feat/billing",)
    assert parsed.origin == "git@github.com:acme/svc.git"
    assert parsed.prs == ("https://gitlab.example.com/acme/svc/-/merge_requests/7",)


def test_a_codex_thread_spawned_as_a_subagent_is_a_subagent(tmp_path: Path) -> None:
    source = {"subagent": {"thread_spawn": {"parent_thread_id": "t-parent", "depth": 1}}}
    path = CodexHome(tmp_path).rollout("t-child", "/w", ["review the diff"], source=source)
    parsed = parse_codex(_lines(path))
    assert parsed is not None
    assert parsed.subagent and parsed.parent_session_id == "t-parent"


def test_a_rollout_without_session_meta_is_not_a_session() -> None:
    assert parse_codex(['{"type":"event_msg","payload":{"type":"task_started"}}']) is None


def test_pr_links_from_github_and_gitlab_are_found() -> None:
    text = (
        "https://github.com/a/b/pull/12, https://github.com/a/b/issues/3 "
        "https://gitlab.com/g/sub/p/-/merge_requests/9/diffs"
    )
    assert find_prs(text) == [
        "https://github.com/a/b/pull/12",
        "https://gitlab.com/g/sub/p/-/merge_requests/9",
    ]


def test_timestamps_read_the_same_however_the_harness_spells_them() -> None:
    expected = 1_796_018_400.0  # 2026-11-30T06:00:00Z
    for spelling in (
        "2026-11-30T06:00:00Z",
        "2026-11-30T06:00:00.000Z",
        "2026-11-30T06:00:00.000000000Z",
        " 2026-11-30T06:00:00Z ",
        "2026-11-30T08:00:00+02:00",
        "2026-11-30T06:00:00",
        expected,
        expected * 1000,
    ):
        assert parse_time(spelling) == expected, spelling
    assert parse_time("2026-11-30T06:00:00.123456789Z") == pytest.approx(expected + 0.123456)
    assert parse_time("yesterday") is None and parse_time(True) is None


@pytest.mark.parametrize(
    "times",
    [
        ["2026-11-30T07:00:00.000Z", "2026-11-30T06:00:00.500Z", "2026-11-30T08:00:00.000Z"],
        ["2026-11-30T07:00:00Z", "2026-11-30T06:00:00Z", "2026-11-30T07:00:00Z"],
        ["2026-11-30T07:00:00.000Z", "2026-11-30T06:59:59Z"],  # two forms: "." sorts before "Z"
        # strings of the form that are no time, the least and the greatest
        ["2026-11-30T07:00:00.000Z", "2026-13-30T09:00:00.000Z", "0000-01-01T00:00:00.000Z"],
        ["2026-11-30T07:00:00.000Z", "2026-11-30T06:00:00.000Z\n2026-11-30T09:00:00.000Z"],
        ["2026-11-30T07:00:00.000Z", 1_796_018_400_000, "yesterday", "2026-11-30T08:00:00+01:00"],
        ["2026-11-30T07:00:00.000Z"],
    ],
)
def test_a_sessions_span_is_its_earliest_and_latest_time_however_its_times_are_written(
    times: list[object],
) -> None:
    readable = [t for t in map(parse_time, times) if t is not None]
    assert time_span(times) == (min(readable), max(readable))
    assert time_span(times[::-1]) == (min(readable), max(readable))


def test_a_session_with_no_readable_time_has_no_span() -> None:
    assert time_span([]) == (None, None)
    assert time_span(["2026-13-30T09:00:00.000Z", "", True]) == (None, None)


def _claude_line(cwd: str, prompt: str, when: str) -> bytes:
    record = {
        "type": "user",
        "sessionId": "s1",
        "cwd": cwd,
        "gitBranch": "main",
        "timestamp": when,
        "message": {"role": "user", "content": prompt},
    }
    return json.dumps(record, ensure_ascii=False).encode()


@pytest.mark.parametrize(
    "data",
    [
        b"\n".join(  # a byte order mark: the first line still read, as from its bytes
            [
                b"\xef\xbb\xbf" + _claude_line("/a", "first", "2026-11-30T06:00:00Z"),
                _claude_line("/b", "second", "2026-11-30T07:00:00Z"),
            ]
        ),
        b"\n".join(  # a line that is not UTF-8 is skipped, the others read
            [
                _claude_line("/a", "first", "2026-11-30T06:00:00Z"),
                _claude_line("/bad", "x", "2026-11-30T09:00:00Z").replace(b"x", b"\xff"),
                _claude_line("/b", "see https://github.com/o/r/pull/7 now", "2026-11-30T07:00Z"),
            ]
        ),
        b"\n".join(  # an object with more after it, values that are no object, two on a line
            [
                _claude_line("/a", "first", "2026-11-30T06:00:00Z"),
                _claude_line("/x", "x", "2026-11-30T09:00:00Z") + b" x",
                b'["an", "array"]',
                b"{} {}",
                b"{",
                _claude_line("/x", "x", "2026-11-30T09:00:00Z") * 2,
                _claude_line("/b", "second", "2026-11-30T07:00:00Z"),
            ]
        ),
        b"\r\n".join(  # CRLF, a line separator and a NUL escape inside the text, blank lines
            [
                _claude_line("/a", "first\u2028line \x85 \\u0000", "2026-11-30T06:00:00Z"),
                b"",
                b"  \x0c",
                _claude_line("/b", "second", "2026-11-30T07:00:00Z"),
                _claude_line("/c", "cut", "2026-11-30T08:00:00Z")[:-9],  # being written
            ]
        ),
        b"\n".join(  # what only json reads: a lone surrogate escape, NaN, a UTF-16 line
            [
                _claude_line("/a", "first \\ud800 half", "2026-11-30T06:00:00Z"),
                _claude_line("/n", "n", "2026-11-30T06:30:00Z").replace(b'"main"', b"NaN"),
                _claude_line("/u", "wide", "2026-11-30T06:40:00Z").decode().encode("utf-16-le"),
                _claude_line("/b", "second", "2026-11-30T07:00:00Z"),
            ]
        ),
        b"\n".join(  # a line nested deeper than any decoder goes, and a raw NUL in a string
            [
                _claude_line("/a", "first", "2026-11-30T06:00:00Z"),
                b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
                _claude_line("/x", "x\x00", "2026-11-30T08:00:00Z").replace(b"\\u0000", b"\x00"),
                _claude_line("/b", "second", "2026-11-30T07:00:00Z"),
            ]
        ),
    ],
)
def test_a_transcript_reads_as_json_loads_reads_each_of_its_lines(data: bytes) -> None:
    def plain(line: bytes) -> object:
        try:
            return json.loads(line)
        except (ValueError, RecursionError):
            return None

    objects = [v for v in map(plain, data.split(b"\n")) if isinstance(v, dict)]
    assert _same(list(_records(split_lines(data))), objects)
    parsed = parse_claude(split_lines(data), file_name="s1.jsonl")
    assert parsed is not None
    assert parsed.prompts[0].startswith("first") and parsed.cwd == "/b"


def _same(a: object, b: object) -> bool:
    """Equal, a NaN equal to a NaN."""
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(_same, a, b))
    return type(a) is type(b) and a == b
