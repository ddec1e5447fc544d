"""Replies read from a transcript as it grows: one per turn, only new bytes parsed."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from openbus.daemon.history.replies import ReplyReader
from tests.daemon.history.homes import DATA


def line(rec: dict[str, Any]) -> str:
    return json.dumps(rec) + "\n"


def claude_user(text: str) -> str:
    return line({"type": "user", "message": {"role": "user", "content": text}})


def claude_assistant(text: str) -> str:
    return line({"type": "assistant", "message": {"content": [{"type": "text", "text": text}]}})


def test_claude_replies_are_one_per_turn_and_the_last_is_pending(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(
        claude_user("the brief") + claude_assistant("pong") + claude_assistant("from the child")
    )
    reader = ReplyReader()
    first = reader.read(path, "claude")
    assert first.replies == () and first.pending == "pong\n\nfrom the child"
    with path.open("a") as handle:
        handle.write(claude_user("second round") + claude_assistant("again"))
        handle.write('{"type": "assistant", "mess')  # half a line being written
    second = reader.read(path, "claude")
    assert second.replies == ("pong\n\nfrom the child",)
    assert second.pending == "again"
    assert second.prompts == 2 and second.total == 1


def test_only_the_newest_replies_asked_for_are_handed_back_with_the_count_of_all(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text("".join(claude_user(f"q{i}") + claude_assistant(f"a{i}") for i in range(5)))
    reader = ReplyReader()
    newest = reader.read(path, "claude", last=2)
    assert newest.replies == ("a2", "a3") and newest.pending == "a4" and newest.total == 4
    assert reader.read(path, "claude").replies == ("a0", "a1", "a2", "a3")
    assert reader.read(path, "claude", last=10).replies == ("a0", "a1", "a2", "a3")


def test_a_replaced_file_is_read_again_from_the_start(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(claude_user("a") + claude_assistant("one") + claude_user("b"))
    reader = ReplyReader()
    assert reader.read(path, "claude").replies == ("one",)
    path.unlink()
    path.write_text(claude_user("c") + claude_assistant("two") + claude_user("d"))
    assert reader.read(path, "claude").replies == ("two",)


def codex(kind: str, payload: dict[str, Any]) -> str:
    return line({"type": kind, "payload": payload})


def test_codex_agent_messages_are_replies_and_items_are_not_counted_twice(tmp_path: Path) -> None:
    path = tmp_path / "rollout.jsonl"
    path.write_text(
        codex("session_meta", {"id": "t1", "cwd": "/w"})
        + codex("event_msg", {"type": "user_message", "message": "the brief"})
        + codex(
            "response_item",
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "pong"}],
            },
        )
        + codex("event_msg", {"type": "agent_message", "message": "pong"})
        + codex("event_msg", {"type": "task_complete"})
    )
    read = ReplyReader().read(path, "codex")
    assert read.replies == ("pong",)
    assert read.pending is None


def test_a_missing_transcript_has_no_replies(tmp_path: Path) -> None:
    assert ReplyReader().read(tmp_path / "none.jsonl", "claude").replies == ()


def test_a_line_longer_than_a_read_chunk_is_one_reply(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    big = "x" * (3 << 20)
    path.write_text(claude_user("a") + claude_assistant(big) + claude_user("b"))
    assert ReplyReader().read(path, "claude").replies == (big,)


def test_a_fifo_or_a_device_at_a_transcripts_path_has_no_replies_and_holds_no_reader(
    tmp_path: Path,
) -> None:
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)  # nobody writes it: a blocking open would wait forever
    zero = tmp_path / "zero.jsonl"
    zero.symlink_to("/dev/zero")
    reader = ReplyReader()
    for path in (fifo, zero):
        replies = reader.read(path, "claude")
        assert (replies.replies, replies.pending, replies.prompts) == ((), None, 0)


OUT_OF_ORDER = DATA / "claude-2.1.197-turns-written-out-of-order.jsonl"


def test_turns_claude_code_wrote_out_of_order_are_counted_in_the_order_they_happened(
    tmp_path: Path,
) -> None:
    # a real transcript: "a long task" was sent as the first turn ended, and Claude Code
    # appended that turn's records ("noted") before the first turn's ("standing by")
    path = tmp_path / "s.jsonl"
    path.write_bytes(OUT_OF_ORDER.read_bytes())
    read = ReplyReader().read(path, "claude")
    assert read.replies == ("standing by",)
    assert read.pending == "noted"
    assert read.prompts == 2 and read.total == 1


def stamped(rec: str, at: str) -> str:
    return line({**json.loads(rec), "timestamp": at})


def test_a_turn_read_later_but_stamped_earlier_is_put_in_its_place(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(
        stamped(claude_user("the brief"), "2026-12-05T04:00:00.000Z")
        + stamped(claude_user("a follow-up"), "2026-12-05T04:00:02.000Z")
        + stamped(claude_assistant("on it"), "2026-12-05T04:00:03.000Z")
    )
    reader = ReplyReader()
    assert reader.read(path, "claude").replies == ()
    with path.open("a") as handle:  # the first turn's reply, written after
        handle.write(stamped(claude_assistant("done"), "2026-12-05T04:00:01.000Z"))
        handle.write(claude_assistant("and more"))  # no timestamp: after what was read
    read = reader.read(path, "claude")
    assert read.replies == ("done",)
    assert read.pending == "on it\n\nand more"
    assert read.prompts == 2
