"""A reconcile of many files reads them with a helper process: what it writes is what it would
write alone, and a helper that cannot start or dies leaves the reading to the reconcile."""

from __future__ import annotations

import fcntl
import logging
import os
import signal
import struct
import sys
import termios
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from openbus.daemon.history import parallel, reconcile
from openbus.daemon.history.files import read_file
from openbus.daemon.history.index import HistoryIndex
from openbus.daemon.history.parallel import ParseHelper
from openbus.daemon.history.parse_helper import _answer
from openbus.daemon.history.sources import Sources
from openbus.kernel.testing import FixedClock
from tests.daemon.history.homes import ClaudeHome, CodexHome, opencode_database
from tests.support.wait import wait_until


@dataclass
class Homes:
    tmp: Path
    claude: ClaudeHome
    codex: CodexHome
    opencode: Path
    lone_surrogate: Path  # a transcript with a prompt no JSON text can carry

    def sources(self) -> Sources:
        return Sources((self.claude.root,), (self.codex.root,), opencode_dirs=(self.opencode,))

    def index(self, name: str) -> HistoryIndex:
        return HistoryIndex(self.tmp / name / "history.db", self.sources(), clock=FixedClock())


@pytest.fixture
def homes(tmp_path: Path) -> Homes:
    claude = ClaudeHome(tmp_path / "claude")
    codex = CodexHome(tmp_path / "codex")
    for i in range(24):
        path = claude.session(
            f"c-{i}", f"/w/app{i % 3}", [f"fix the flaky test number {i}", "and the docs"]
        )
        os.utime(path, ns=(10**18 + i, 10**18 + i))  # the order they are written in
    for i in range(12):
        codex.rollout(f"x-{i}", "/w/app0", [f"migrate table {i} to postgres"], start=i)
    codex.name("x-3", "Table three")
    opencode = tmp_path / "opencode"
    opencode_database(opencode, "ses_one", "trace the slow endpoint")
    lone = claude.session("c-lone", "/w/app0", ["broken PLACEHOLDER emoji"])
    lone.write_bytes(lone.read_bytes().replace(b"PLACEHOLDER", b"\\ud83d"))
    return Homes(tmp_path, claude, codex, opencode, lone)


@dataclass
class Spied:
    helpers: list[ParseHelper]
    read_here: list[str]  # files this process read itself
    taken: list[int]  # units the helper answered


@pytest.fixture
def spied(monkeypatch: pytest.MonkeyPatch) -> Iterator[Spied]:
    """Small units, a helper for any pass, started before the pass reads anything (so it has
    units to read), and the files each side reads counted."""
    seen = Spied([], [], [])
    monkeypatch.setattr(reconcile, "HELPER_MIN", 1)
    monkeypatch.setattr(reconcile, "UNIT", 3)
    start = reconcile.start_helper

    def started(names):  # type: ignore[no-untyped-def]
        helper = start(names)
        if helper is not None:
            wait_until(helper.started, what="the parse helper's start")
            seen.helpers.append(helper)
        return helper

    monkeypatch.setattr(reconcile, "start_helper", started)

    def here(harness, path, names):  # type: ignore[no-untyped-def]
        seen.read_here.append(str(path))
        return read_file(harness, path, names)

    monkeypatch.setattr(reconcile, "read_file", here)
    take = ParseHelper.take

    def taken(self):  # type: ignore[no-untyped-def]
        unit, results = take(self)
        seen.taken.append(unit)
        return unit, results

    monkeypatch.setattr(ParseHelper, "take", taken)
    yield seen


def _entries(index: HistoryIndex) -> list[tuple[object, ...]]:
    """Every entry, in the order the index wrote them (rowid order), with all its fields."""
    rows = index.store._db.execute("SELECT * FROM sessions ORDER BY id").fetchall()
    return [tuple(row) for row in rows]


def _alone(homes: Homes) -> list[tuple[object, ...]]:
    """The entries a pass with no helper writes."""
    index = homes.index("alone")
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(reconcile, "HELPER_MIN", 10**9)
            stats = index.reconcile()
        assert stats.errors == []
        return _entries(index)
    finally:
        index.close()


def _gone(pid: int) -> bool:
    return not Path(f"/proc/{pid}").exists()


def test_a_pass_read_with_a_helper_writes_what_it_writes_alone(homes: Homes, spied: Spied) -> None:
    alone = _alone(homes)
    spied.read_here.clear()
    index = homes.index("shared")
    try:
        stats = index.reconcile()
        assert (stats.changed, stats.indexed, stats.errors) == (38, 38, [])
        assert stats.read_by_helper == 38 - len(spied.read_here) - 1  # OpenCode's is read here
        assert _entries(index) == alone
        assert index.get("codex", "x-3").title == "Table three"
        assert index.get("claude", "c-lone").prompts == ("broken \ufffd emoji",)
        assert index.get("opencode", "ses_one").prompts == ("trace the slow endpoint",)
    finally:
        index.close()
    assert len(spied.helpers) == 1 and spied.taken  # the helper read some units ...
    assert len(spied.read_here) < 37  # ... and this process not every file
    assert _gone(spied.helpers[0].pid)


def test_a_file_no_json_can_carry_is_read_by_the_reconcile_itself(
    homes: Homes, spied: Spied, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reconcile, "UNIT", 100)  # one unit: the helper's, every file of it
    index = homes.index("shared")
    try:
        index.reconcile()
    finally:
        index.close()
    assert spied.taken == [0]
    assert spied.read_here == [str(homes.lone_surrogate)]


def test_a_helper_that_dies_leaves_its_units_to_the_reconcile(
    homes: Homes, spied: Spied, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    give = ParseHelper.give

    def dies_with_its_first_unit(self, unit, transcripts):  # type: ignore[no-untyped-def]
        os.kill(self.pid, signal.SIGSTOP)  # so it answers nothing of what it is given
        give(self, unit, transcripts)
        os.kill(self.pid, signal.SIGKILL)

    monkeypatch.setattr(ParseHelper, "give", dies_with_its_first_unit)
    alone = _alone(homes)
    index = homes.index("shared")
    try:
        with caplog.at_level(logging.WARNING, logger="openbus.history"):
            stats = index.reconcile()
        assert (stats.indexed, stats.errors, stats.read_by_helper) == (38, [], 0)
        assert _entries(index) == alone
    finally:
        index.close()
    assert "the parse helper is dropped" in caplog.text
    assert spied.taken == []
    assert _gone(spied.helpers[0].pid)


def test_a_helper_that_cannot_start_leaves_the_pass_to_the_reconcile(
    homes: Homes, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reconcile, "HELPER_MIN", 1)
    monkeypatch.setattr(sys, "executable", str(homes.tmp / "no-such-python"))
    index = homes.index("shared")
    try:
        stats = index.reconcile()
        assert (stats.indexed, stats.errors) == (38, [])
        assert _entries(index) == _alone(homes)
    finally:
        index.close()


def test_a_pass_of_fewer_files_than_a_helper_pays_for_starts_none(
    homes: Homes, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[object] = []
    monkeypatch.setattr(reconcile, "start_helper", started.append)
    assert reconcile.HELPER_MIN > 38
    index = homes.index("shared")
    try:
        assert index.reconcile().indexed == 38
    finally:
        index.close()
    assert started == []


def test_a_helper_starts_while_the_walk_goes_on_once_enough_files_have_changed(
    homes: Homes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It boots (tens of milliseconds) while the rest of the files are listed and stat-ed."""
    monkeypatch.setattr(reconcile, "HELPER_MIN", 5)
    listed = 0
    listing = Sources.listing

    def counted(self, errors):  # type: ignore[no-untyped-def]
        nonlocal listed
        for item in listing(self, errors):
            listed += 1
            yield item

    monkeypatch.setattr(Sources, "listing", counted)
    start = reconcile.start_helper
    listed_at_start: list[int] = []

    def started(names):  # type: ignore[no-untyped-def]
        listed_at_start.append(listed)
        return start(names)

    monkeypatch.setattr(reconcile, "start_helper", started)
    index = homes.index("shared")
    try:
        assert index.reconcile().indexed == 38
    finally:
        index.close()
    assert listed_at_start == [5]  # of 38 listed


def test_a_cancelled_pass_ends_its_helper(
    homes: Homes, spied: Spied, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reconcile, "WRITE_BATCH", 3)
    cancel = threading.Event()
    index = homes.index("shared")
    try:
        stats = index.reconcile(progress=lambda done, _total: done and cancel.set(), cancel=cancel)
        assert 3 <= stats.indexed < 38
        assert index.store.count() == stats.indexed
    finally:
        index.close()
    assert _gone(spied.helpers[0].pid)


def test_the_helper_answers_in_the_order_it_was_given_and_reads_only_what_it_is_told(
    homes: Homes,
) -> None:
    helper = parallel.start_helper({})
    assert helper is not None
    try:
        wait_until(helper.started, what="the parse helper's start")
        one = str(homes.claude.root / "projects" / "-w-app1" / "c-1.jsonl")
        listed = [
            ("claude", one, homes.claude.root, None),
            ("claude", str(homes.tmp / "missing.jsonl"), homes.claude.root, None),
        ]
        helper.give(7, listed[:1])
        helper.give(8, listed[1:])
        unit, results = helper.take()
        assert unit == 7 and results == [read_file("claude", one, {})]
        unit, results = helper.take()
        assert unit == 8 and len(results) == 1 and "No such file" in str(results[0])
    finally:
        helper.close()
    assert _gone(helper.pid)


def test_the_helper_answers_every_unit_it_holds_while_none_is_taken(homes: Homes) -> None:
    """The reconcile takes answers only between its own reads and writes: meanwhile the helper
    goes on answering every unit it was given (its answers wait in the pipe) rather than
    blocking on the first that does not fit."""
    long = homes.claude.session("c-long", "/w/app0", ["a long prompt " * 100])
    units = [[("claude", str(long), homes.claude.root, None)] * 32] * parallel.AHEAD
    expected = sum(
        len(_answer(n, [[h, p, str(r)] for h, p, r, _ in u], {})) for n, u in enumerate(units)
    )
    assert expected > 64 * 1024  # more than a pipe holds by default
    helper = parallel.start_helper({})
    assert helper is not None
    try:
        wait_until(helper.started, what="the parse helper's start")
        for n, unit in enumerate(units):
            helper.give(n, unit)
        # the helper's end of the pipe, opened again: what waits in it
        answers = os.open(f"/proc/{helper.pid}/fd/1", os.O_RDONLY)
        try:
            wait_until(lambda: _waiting(answers) == expected, what="every answer in the pipe")
        finally:
            os.close(answers)
        assert [helper.take()[0] for _ in units] == list(range(len(units)))
    finally:
        helper.close()


def _waiting(fd: int) -> int:
    """The bytes that wait in a pipe."""
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
