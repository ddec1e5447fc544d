"""OpenCode's sessions, as each pinned version writes them into its ``opencode.db`` against the
stub (a session whose task started a child session), are found in its data dir, read without
writing the database, searched through the history actions, resumed by ``--session``, and
expunged from the index alone."""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from openbus.daemon.compose import Daemon
from openbus.daemon.core import actors
from openbus.daemon.history import opencode
from openbus.daemon.history.expunge import harness_keeps
from openbus.daemon.history.index import HistoryIndex
from openbus.daemon.history.model import OPENCODE, LiveState
from openbus.daemon.history.reconcile import parse_transcript
from openbus.daemon.history.sources import Sources
from openbus.kernel.errors import NotFound
from openbus.kernel.testing import FixedClock
from tests.daemon.history.homes import history_daemon
from tests.support.harnesses import Pin, pin_params, workdir
from tests.support.more_harnesses import Harness, make_harness, run_print
from tests.support.stub_model import StubModel, call_tool, hold, reply, running_stub_model

pytestmark = pytest.mark.harness

PROMPT = "index this opencode session please"
TASK = "list the callers of authenticate"
PR = "https://github.com/acme/widgets/pull/42"


@dataclass
class Written:
    harness: Harness
    stub: StubModel
    parent: str
    child: str

    @property
    def db(self) -> Path:
        return self.harness.data_dir / opencode.DB_FILE


def _digest(db: Path) -> str:
    """The database with its WAL, byte for byte."""
    h = hashlib.sha256()
    for path in (db, db.with_name(db.name + "-wal")):
        if path.exists():
            h.update(path.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module", params=pin_params("opencode"))
def written(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Written]:
    """One ``opencode run`` per pin: its task tool starts a child session, then it answers."""
    pin: Pin = request.param
    root = tmp_path_factory.mktemp(pin.id)
    with running_stub_model() as stub:
        cwd = workdir(root)
        subprocess.run(["git", "init", "-q", str(cwd)], check=True)
        subprocess.run(
            ["git", "-C", str(cwd), "remote", "add", "origin", "git@github.com:acme/widgets.git"],
            check=True,
        )
        harness = make_harness("opencode", root, stub, cwd, pin.version)
        task = {"description": "find callers", "prompt": TASK, "subagent_type": "general"}
        stub.script(call_tool("task", task), reply(f"opened {PR}"), match="index this")
        stub.script(reply("no callers"), match=TASK)
        run_print(harness, PROMPT)
        db = harness.data_dir / opencode.DB_FILE
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            rows = dict(conn.execute("SELECT id, parent_id FROM session").fetchall())
        conn.close()
        [parent] = [sid for sid, up in rows.items() if up is None]
        [child] = [sid for sid, up in rows.items() if up == parent]
        yield Written(harness, stub, parent, child)


def test_an_opencode_session_and_its_child_are_read_with_id_cwd_prompt_pr_title_and_times(
    written: Written,
) -> None:
    sources = Sources(opencode_dirs=(written.harness.data_dir,))
    found = {t.path: t for t in sources.transcripts()}
    assert set(found) == {
        opencode.ref(written.db, written.parent),
        opencode.ref(written.db, written.child),
    }
    parsed, key = parse_transcript(found[opencode.ref(written.db, written.parent)], {})
    assert parsed is not None and parsed.harness == OPENCODE
    assert parsed.session_id == written.parent
    assert parsed.cwd == str(written.harness.cwd)
    assert parsed.prompts == (f'"{PROMPT}"',)  # opencode run quotes a prompt of several words
    assert parsed.title == "Stub title"  # what OpenCode's title call got from the stub
    assert parsed.prs == (PR,)
    assert parsed.started is not None and parsed.last_active is not None
    assert parsed.started <= parsed.last_active
    assert not parsed.subagent and parsed.parent_session_id is None
    assert key == found[opencode.ref(written.db, written.parent)].key

    child, _ = parse_transcript(found[opencode.ref(written.db, written.child)], {})
    assert child is not None
    assert child.subagent and child.parent_session_id == written.parent
    assert child.prompts == (TASK,)
    assert child.title == "find callers (@general subagent)"
    assert (
        sources.find_transcript(OPENCODE, written.child)
        == found[opencode.ref(written.db, written.child)]
    )
    assert sources.find_transcript(OPENCODE, "ses_nothing") is None


def test_reading_the_database_leaves_it_byte_for_byte_as_it_was(
    written: Written, tmp_path: Path
) -> None:
    before = _digest(written.db)
    index = HistoryIndex(
        tmp_path / "history.db",
        Sources(opencode_dirs=(written.harness.data_dir,)),
        clock=FixedClock(),
    )
    try:
        assert index.reconcile().indexed == 2
    finally:
        index.close()
    assert _digest(written.db) == before


@pytest.fixture
def daemon(written: Written, tmp_path: Path) -> Iterator[Daemon]:
    """The daemon's history over an OpenCode launcher's home (no OpenCode dir of its own)."""
    none = str(tmp_path / "none")
    history = {"claude_config_dirs": [none], "codex_homes": [none]}
    home = str(written.harness.home)
    launchers = {"oc": {"harness": "opencode", "argv": ["opencode"], "env": {"HOME": home}}}
    with history_daemon(tmp_path, history, launchers) as built:
        yield built


def test_an_opencode_session_is_found_by_a_search_with_its_repo_resume_argv_and_liveness(
    written: Written, daemon: Daemon
) -> None:
    human = actors.human("root")
    gate = daemon.foundation.gate
    result = asyncio.run(gate.run(human, "history.search", {"q": "index opencode session"}))
    [hit] = [h for h in result["results"] if h["session_id"] == written.parent]
    assert hit["harness"] == "opencode"
    assert hit["repo"] == "github.com/acme/widgets"
    assert hit["prs"] == [PR]
    assert hit["resume_argv"] == ["opencode", "--session", written.parent]
    assert hit["liveness"]["state"] == "not_running"  # nothing holds its database open

    result = asyncio.run(gate.run(human, "history.search", {"q": "callers authenticate"}))
    [child] = [h for h in result["results"] if h["session_id"] == written.child]
    assert child["subagent"] is True and child["resume_argv"] is None
    assert child["parent_session_id"] == written.parent


def test_an_opencode_session_is_pushed_by_its_id_or_its_reference_path(
    written: Written, tmp_path: Path
) -> None:
    index = HistoryIndex(
        tmp_path / "history.db",
        Sources(opencode_dirs=(written.harness.data_dir,)),
        clock=FixedClock(),
    )
    try:
        by_id = index.push(harness=OPENCODE, session_id=written.child)
        assert by_id is not None and by_id.parent_session_id == written.parent
        by_path = index.push(transcript_path=opencode.ref(written.db, written.parent))
        assert by_path is not None and by_path.session_id == written.parent
        with pytest.raises(NotFound):
            index.push(harness=OPENCODE, session_id="ses_nothing")
        with pytest.raises(NotFound):
            index.push(transcript_path=opencode.ref(written.db, "ses_nothing"))
        assert index.count() == 2
    finally:
        index.close()


def test_expunging_an_opencode_session_forgets_it_and_its_child_and_says_how_to_delete_it(
    written: Written, daemon: Daemon
) -> None:
    before = _digest(written.db)
    human = actors.human("root")
    gate = daemon.foundation.gate
    params = {"harness": "opencode", "session_id": written.parent}
    result = asyncio.run(gate.run(human, "history.expunge", params))
    assert result["removed"] == []
    assert f"opencode session delete {written.parent}" in result["kept"]
    index = daemon.history.index
    assert index.store.find(OPENCODE, written.parent) is None
    assert index.store.find(OPENCODE, written.child) is None
    index.reconcile()  # OpenCode's copy is unchanged: it stays out of the index
    assert index.store.find(OPENCODE, written.parent) is None
    assert _digest(written.db) == before


def _copy(written: Written, tmp_path: Path) -> Harness:
    """The harness over a copy of the run's home, so the other tests read the run as it was."""
    home = tmp_path / "home"
    shutil.copytree(written.harness.home, home, symlinks=True)
    h = written.harness
    return Harness("opencode", h.version, h.binary, home, h.cwd, h.stub, dict(h.env_vars))


def test_the_delete_an_opencode_expunge_names_removes_opencodes_copy_and_its_last_trace(
    written: Written, tmp_path: Path
) -> None:
    harness = _copy(written, tmp_path)
    index = HistoryIndex(
        tmp_path / "history.db", Sources(opencode_dirs=(harness.data_dir,)), clock=FixedClock()
    )
    try:
        index.reconcile()
        index.expunge(OPENCODE, written.parent)
        kept = harness_keeps(OPENCODE, written.parent) or ""
        command = kept.rpartition(": ")[2].split()
        assert command == ["opencode", "session", "delete", written.parent]
        subprocess.run(
            [*harness.command, *command[1:]],
            env=harness.env(),
            cwd=harness.cwd,
            capture_output=True,
            timeout=60,
            check=True,
        )
        stats = index.reconcile()
        assert stats.indexed == 0
        assert index.store.find(OPENCODE, written.parent) is None
        assert str(opencode.ref(harness.data_dir / opencode.DB_FILE, written.parent)) not in (
            index.store.files()
        )
    finally:
        index.close()


def test_an_opencode_session_resumed_by_its_resume_argv_is_reindexed_and_unknown_while_it_runs(
    written: Written, tmp_path: Path
) -> None:
    harness = _copy(written, tmp_path)
    clock = FixedClock()
    index = HistoryIndex(
        tmp_path / "history.db", Sources(opencode_dirs=(harness.data_dir,)), clock=clock
    )
    try:
        index.reconcile()
        held = written.stub.script(hold(), reply("resumed fine"), match="second prompt here")
        resume = index.get(OPENCODE, written.parent).resume_argv
        assert resume is not None
        _opencode, flag, session_id = resume  # the TUI's flag; `opencode run` takes it too
        argv = [*harness.command, "run", flag, session_id, "second prompt here"]
        proc = subprocess.Popen(
            argv, env=harness.env(), cwd=harness.cwd, stdout=subprocess.PIPE, text=True
        )
        try:
            held.wait_holding(60)
            entry = index.get(OPENCODE, written.parent)
            assert index.liveness(entry).state is LiveState.RUNNING_UNKNOWN
            held.release()
            assert proc.wait(60) == 0
        finally:
            proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        assert index.reconcile().indexed == 1  # the resumed session only
        entry = index.get(OPENCODE, written.parent)
        assert entry.prompts == (f'"{PROMPT}"', '"second prompt here"')
        clock.advance(10)
        assert index.liveness(entry).state is LiveState.NOT_RUNNING
    finally:
        index.close()
