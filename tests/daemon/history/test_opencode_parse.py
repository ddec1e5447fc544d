"""OpenCode's rows as a session: the human's text parts are its prompts, OpenCode's own
additions and placeholder titles are not, and a database that cannot be read fails only its own
sessions."""

from __future__ import annotations

import json
import os
from pathlib import Path

from openbus.daemon.history.index import HistoryIndex
from openbus.daemon.history.model import OPENCODE
from openbus.daemon.history.opencode import DB_FILE, ref, split_ref
from openbus.daemon.history.parse import parse_opencode
from openbus.daemon.history.sources import Sources
from openbus.kernel.testing import FixedClock
from tests.daemon.history.homes import opencode_database


def _session(**extra: object) -> dict[str, object]:
    return {
        "id": "ses_1",
        "parent_id": None,
        "directory": "/w/app",
        "title": "Fix the login test",
        "time_created": 1_796_000_000_000,
        "time_updated": 1_796_000_090_000,
        **extra,
    }


def _text(text: str, **extra: object) -> str:
    return json.dumps({"type": "text", "text": text, **extra})


MESSAGES = [
    ("m1", json.dumps({"role": "user", "time": {"created": 1_796_000_001_000}})),
    ("m2", json.dumps({"role": "assistant", "time": {"created": 1_796_000_002_000}})),
    ("m3", json.dumps({"role": "user", "time": {"created": 1_796_000_003_000}})),
]


def test_the_users_text_parts_are_prompts_and_the_answers_give_prs() -> None:
    parts = [
        ("m1", _text("fix the flaky login test")),
        ("m1", _text("<file contents the harness attached>", synthetic=True)),
        ("m2", _text("opened https://github.com/acme/app/pull/7")),
        ("m3", _text("now the docs")),
        ("m3", _text("and the changelog")),
    ]
    parsed = parse_opencode(_session(), MESSAGES, parts)
    assert parsed is not None
    assert (parsed.harness, parsed.session_id, parsed.cwd) == (OPENCODE, "ses_1", "/w/app")
    assert parsed.prompts == ("fix the flaky login test", "now the docs\nand the changelog")
    assert parsed.prs == ("https://github.com/acme/app/pull/7",)
    assert parsed.title == "Fix the login test"
    assert (parsed.started, parsed.last_active) == (1_796_000_000.0, 1_796_000_090.0)
    assert not parsed.subagent


def test_a_part_that_does_not_read_is_skipped_even_nested_past_the_decoder() -> None:
    parts = [
        ("m1", _text("fix the flaky login test")),
        ("m1", "{"),
        ("m1", '{"text": ' + "[" * 100_000 + "]" * 100_000 + "}"),
        ("m3", _text("now the docs")),
    ]
    parsed = parse_opencode(_session(), MESSAGES, parts)
    assert parsed is not None
    assert parsed.prompts == ("fix the flaky login test", "now the docs")


def test_a_placeholder_title_gives_way_to_the_first_prompt_and_a_parent_makes_a_subagent() -> None:
    session = _session(title="Child session - 2026-12-01T21:00:00.000Z", parent_id="ses_0")
    parsed = parse_opencode(session, MESSAGES[:1], [("m1", _text("find the callers"))])
    assert parsed is not None
    assert parsed.title == "find the callers"
    assert parsed.subagent and parsed.parent_session_id == "ses_0"


def test_a_row_without_an_id_is_no_session() -> None:
    assert parse_opencode(_session(id=""), [], []) is None


def test_a_session_reference_names_its_database_and_id() -> None:
    db = Path("/d/opencode") / DB_FILE
    assert ref(db, "ses_1") == Path("/d/opencode/opencode.db#ses_1")
    assert split_ref(ref(db, "ses_1")) == (db, "ses_1")
    assert split_ref(db) is None and split_ref(Path("/d/other.db#ses_1")) is None


def test_a_database_that_cannot_be_read_is_reported_and_the_rest_indexed(tmp_path: Path) -> None:
    data = tmp_path / "opencode"
    data.mkdir()
    (data / DB_FILE).write_bytes(b"not a database at all" * 100)
    index = HistoryIndex(
        tmp_path / "history.db", Sources(opencode_dirs=(data,)), clock=FixedClock()
    )
    try:
        stats = index.reconcile()
    finally:
        index.close()
    assert stats.indexed == 0
    [error] = stats.errors
    assert error.startswith(f"cannot read OpenCode's database {data / DB_FILE}: ")


def test_a_database_nobody_has_open_is_read_without_leaving_a_file_beside_it(
    tmp_path: Path,
) -> None:
    db = opencode_database(tmp_path / "opencode", "ses_1", "read me without a trace")
    before = sorted(os.listdir(db.parent))
    assert before == [DB_FILE]
    index = HistoryIndex(
        tmp_path / "history.db", Sources(opencode_dirs=(db.parent,)), clock=FixedClock()
    )
    try:
        assert index.reconcile().indexed == 1
        assert index.get(OPENCODE, "ses_1").prompts == ("read me without a trace",)
    finally:
        index.close()
    assert sorted(os.listdir(db.parent)) == before
