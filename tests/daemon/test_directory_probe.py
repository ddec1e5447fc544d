"""The process probe's reading of what harnesses write beside their processes."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from openbus.daemon.directory_probe import ProcessProbe, StatFiles, proc_identity
from tests.support.fds import open_to
from tests.support.wait import until_execed, wait_until


@pytest.fixture
def claude_like(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """A real process whose environment names a Claude config dir, as Claude Code's does."""
    config = tmp_path / "claude"
    (config / "sessions").mkdir(parents=True)
    env = {**os.environ, "CLAUDE_CONFIG_DIR": str(config)}
    process = subprocess.Popen(["sleep", "600"], env=env)
    try:
        # until its exec, the child shows the parent's environment, not the one given
        wait_until(
            lambda: Path(f"/proc/{process.pid}/cmdline").read_bytes().startswith(b"sleep\0"),
            timeout=10,
            what="the process exec'd with its environment",
        )
        yield process, config
    finally:
        process.kill()
        process.wait()


def test_a_claude_status_file_is_read_for_its_process(
    claude_like: tuple[subprocess.Popen[bytes], Path],
) -> None:
    process, config = claude_like
    status = {"pid": process.pid, "status": "busy", "sessionId": "s1"}
    (config / "sessions" / f"{process.pid}.json").write_text(json.dumps(status))
    found = ProcessProbe().claude_status(proc_identity(process.pid))
    assert found is not None and (found.status, found.session_id) == ("busy", "s1")


@pytest.mark.parametrize(
    "text", ["{", "[1, 2]", '{"status": ' + "[" * 100_000 + "]" * 100_000 + "}"]
)
def test_a_status_file_that_does_not_read_is_no_status_even_nested_past_the_decoder(
    claude_like: tuple[subprocess.Popen[bytes], Path], text: str
) -> None:
    process, config = claude_like
    (config / "sessions" / f"{process.pid}.json").write_text(text)
    assert ProcessProbe().claude_status(proc_identity(process.pid)) is None


def test_a_status_file_that_is_a_fifo_is_no_status_and_holds_no_probe(
    claude_like: tuple[subprocess.Popen[bytes], Path],
) -> None:
    """An agent can put a FIFO where its status file is looked for: the probe (on the
    daemon's event loop) reads nothing from it and goes on, rather than waiting forever."""
    process, config = claude_like
    os.mkfifo(config / "sessions" / f"{process.pid}.json")
    found: list[object] = []
    probing = threading.Thread(
        target=lambda: found.append(ProcessProbe().claude_status(proc_identity(process.pid))),
        daemon=True,
    )
    probing.start()
    probing.join(timeout=30)  # a blocking open would still be waiting
    assert not probing.is_alive() and found == [None]


def test_a_shell_whose_arguments_cannot_be_read_is_not_taken_for_a_prompt() -> None:
    """Inside an exec the kernel names the new image before it lays out its arguments, so a
    ``sh -c 'exec sleep 600'`` caught there reads as ``sh`` with no arguments; an exited
    process not reaped yet reads the same. Neither is a shell a person types at: the answer is
    ``unknown`` and is asked again."""
    shell = subprocess.Popen(["sh", "-c", "exit 0"])
    try:
        wait_until(lambda: _state(shell.pid) == "Z", timeout=10, what="the shell exited, unreaped")
        assert Path(f"/proc/{shell.pid}/comm").read_text().strip() == "sh"
        assert Path(f"/proc/{shell.pid}/cmdline").read_bytes() == b""
        probe = ProcessProbe()
        assert probe.detect(shell.pid).harness == "unknown"
        assert probe.detect(shell.pid, walk_now=True).harness == "unknown"  # not held as final
    finally:
        shell.wait()


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


# ---------------------------------------------------------------- held stat files


def _held_for(pid: int) -> int:
    """How many of this process's open files are ``/proc/<pid>/stat``."""
    return len(open_to(f"/proc/{pid}/stat"))


def _started(*argv: str) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(list(argv), stdin=subprocess.PIPE)
    until_execed(process.pid)
    return process


def _ended(process: subprocess.Popen[bytes]) -> None:
    process.kill()
    process.communicate()


def test_a_process_stat_file_is_held_open_and_read_again_as_the_process_changes() -> None:
    """A script that execs keeps its pid: the held file gives the new name."""
    process = _started("sh", "-c", "read line; exec sleep 30")
    stats = StatFiles()
    try:
        first = stats.stat(process.pid)
        assert first is not None and first[3] == "sh"
        assert _held_for(process.pid) == 1
        assert process.stdin is not None
        process.stdin.write(b"go\n")
        process.stdin.flush()
        found = wait_until(
            lambda: (s := stats.stat(process.pid)) is not None and s[3] == "sleep" and s,
            what="the exec'd name",
        )
        assert found[2] == first[2]  # the same process: the same start time
        assert _held_for(process.pid) == 1 and stats.held() == 1
    finally:
        _ended(process)
        stats.close()
    assert _held_for(process.pid) == 0


def test_a_held_stat_file_of_a_reaped_process_is_closed_and_its_pid_read_again() -> None:
    process = _started("sleep", "30")
    stats = StatFiles()
    try:
        assert stats.stat(process.pid) is not None
        _ended(process)
        assert stats.stat(process.pid) is None
        assert stats.held() == 0 and _held_for(process.pid) == 0
    finally:
        stats.close()


def test_the_least_recently_read_stat_file_is_closed_first_past_the_bound() -> None:
    processes = [_started("sleep", "30") for _ in range(3)]
    a, b, c = (p.pid for p in processes)
    stats = StatFiles(most=2)
    try:
        for pid in (a, b, a, c):
            assert stats.stat(pid) is not None
        assert (_held_for(a), _held_for(b), _held_for(c)) == (1, 0, 1)
        assert stats.stat(b) is not None  # read again by its path
        assert (_held_for(a), _held_for(b), _held_for(c)) == (0, 1, 1)
    finally:
        for process in processes:
            _ended(process)
        stats.close()


def test_a_collected_probe_closes_the_stat_files_it_held() -> None:
    process = _started("sleep", "30")
    try:
        probe = ProcessProbe()
        assert probe.detect(process.pid).harness == "unknown"  # not a shell nor a harness
        assert _held_for(process.pid) == 1
        del probe
        gc.collect()
        assert _held_for(process.pid) == 0
    finally:
        _ended(process)


_OUT_OF_FILES = """
import errno, os, resource, subprocess, sys
from openbus.daemon.directory_probe import StatFiles
resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
processes = [subprocess.Popen(["sleep", "30"]) for _ in range(4)]
pids = [p.pid for p in processes]
stats = StatFiles()
fillers = []
def fill():
    while True:
        try:
            fillers.append(os.open("/dev/null", os.O_RDONLY))
        except OSError as exc:
            assert exc.errno == errno.EMFILE
            return
fill()
for _ in range(2):
    os.close(fillers.pop())
found = [stats.stat(pid) for pid in pids[:3]]  # the third makes room: the first is closed
print(all(found), stats.held())
stats.close()
fill()
try:
    stats.stat(pids[3])
except OSError as exc:
    print("raised", errno.errorcode[exc.errno])
for p in processes:
    p.kill()
"""


def test_out_of_file_descriptors_a_held_file_makes_room_and_none_left_is_an_error() -> None:
    """Not ``None`` (no such process): the directory keeps such a pane's entry as it was."""
    ran = subprocess.run(
        [sys.executable, "-c", _OUT_OF_FILES], capture_output=True, text=True, timeout=60
    )
    assert ran.stdout.split("\n")[:2] == ["True 2", "raised EMFILE"], ran.stderr
