"""A pane's process watched by its pidfd: real processes, a real event loop."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import subprocess
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace

from openbus.daemon.tmux.adapter import PaneInfo
from openbus.daemon.tmux.processes import REPORTS, ProcessWatch
from tests.support.fds import open_to
from tests.support.wait import async_wait_until, let_others_run

BASE = PaneInfo(
    pane_id="%1",
    pid=0,
    current_command="sleep",
    cwd="/",
    title="",
    dead=False,
    dead_status=None,
    in_mode=False,
    width=80,
    height=24,
    window_id="@1",
    window_index=0,
    window_name="w",
    session_id="$1",
    session_name="s",
)


def pane(pid: int, pane_id: str = "%1", *, dead: bool = False) -> PaneInfo:
    return replace(BASE, pane_id=pane_id, pid=pid, dead=dead)


def run(scenario: Callable[[ProcessWatch, list[str]], Awaitable[None]], **kw: object) -> None:
    async def main() -> None:
        told: list[str] = []
        watch = ProcessWatch(told.append, **kw)  # type: ignore[arg-type]
        try:
            await scenario(watch, told)
        finally:
            watch.clear()

    asyncio.run(main())


@contextlib.contextmanager
def sleepers(n: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``n`` real processes for panes to name, ended after the test whatever happened."""
    procs = [subprocess.Popen(["sleep", "600"]) for _ in range(n)]
    try:
        yield procs
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def told_any(told: list[str]) -> Callable[[], Awaitable[list[str]]]:
    async def check() -> list[str]:
        return told

    return check


def pidfds() -> set[str]:
    return open_to("anon_inode:[pidfd]")


def test_a_watched_process_that_exits_is_told_once() -> None:
    async def scenario(watch: ProcessWatch, told: list[str]) -> None:
        watch.follow(pane(proc.pid))
        watch.follow(pane(proc.pid))  # again: the same process, one pidfd
        assert (watch.watched, watch.complete) == (1, True)
        proc.kill()
        proc.wait()
        await async_wait_until(told_any(told), what="the exit told")
        await let_others_run()
        assert told == ["%1"]
        assert (watch.watched, watch.complete) == (0, True)  # owed a new reading

    with sleepers(1) as (proc,):
        run(scenario)


def test_a_new_process_in_the_pane_replaces_the_old_ones_pidfd() -> None:
    async def scenario(watch: ProcessWatch, told: list[str]) -> None:
        watch.follow(pane(old.pid))
        watch.follow(pane(new.pid))
        old.kill()
        old.wait()
        await let_others_run()
        assert told == []  # the old process is no longer followed
        new.kill()
        new.wait()
        await async_wait_until(told_any(told), what="the new one's exit told")

    with sleepers(2) as (old, new):
        run(scenario)


def test_a_process_gone_before_it_is_followed_is_told_and_then_left_to_the_listing() -> None:
    """tmux may go on naming a process that has exited (its server not caught up yet): it is
    told as exited, each time, until it has been told ``REPORTS`` times; then the pane is left
    unwatched, so the rounds list every pane's process again, rather than loop."""
    gone = subprocess.Popen(["true"])
    gone.wait()

    async def scenario(watch: ProcessWatch, told: list[str]) -> None:
        for _ in range(REPORTS):
            watch.follow(pane(gone.pid))
            await let_others_run()
        assert told == ["%1"] * REPORTS
        assert watch.complete
        watch.follow(pane(gone.pid))
        await let_others_run()
        assert len(told) == REPORTS
        assert not watch.complete
        watch.follow(pane(gone.pid, dead=True))  # tmux has caught up: the pane is dead
        assert watch.watched == 0

    run(scenario)


def test_with_no_pidfd_to_be_had_the_pane_is_left_to_the_listing_until_forgotten() -> None:
    def no_pidfd(pid: int) -> int:
        raise OSError(errno.EMFILE, "Too many open files")

    async def scenario(watch: ProcessWatch, told: list[str]) -> None:
        watch.follow(pane(proc.pid))
        assert (watch.watched, watch.complete) == (0, False)
        watch.sync([])  # the pane has gone
        assert watch.complete

    with sleepers(1) as (proc,):
        run(scenario, open_pidfd=no_pidfd)


def test_a_dead_pane_and_a_forgotten_one_hold_no_descriptor() -> None:
    async def scenario(watch: ProcessWatch, told: list[str]) -> None:
        before = pidfds()
        watch.sync([pane(first.pid, "%1"), pane(second.pid, "%2")])
        assert watch.watched == 2
        opened = pidfds() - before
        assert len(opened) == 2
        watch.sync([pane(first.pid, "%1", dead=True)])  # %1 dead, %2 gone
        assert watch.watched == 0
        assert not pidfds() & opened

    with sleepers(2) as (first, second):
        run(scenario)


def test_a_dead_pane_leaves_its_respawn_to_the_listing_until_it_names_a_live_process() -> None:
    """``respawn-pane`` on a dead pane is announced to no control client and there is no
    process to watch: only a listing of the panes' dead flags can see it."""

    async def scenario(watch: ProcessWatch, told: list[str]) -> None:
        watch.sync([pane(first.pid, "%1", dead=True), pane(second.pid, "%2")])
        assert (watch.watched, watch.complete) == (1, False)
        watch.follow(pane(first.pid, "%1"))  # respawned: a live process again
        assert (watch.watched, watch.complete) == (2, True)
        watch.follow(pane(first.pid, "%1", dead=True))
        watch.forget("%1")  # a dead pane closed
        assert (watch.watched, watch.complete) == (1, True)

    with sleepers(2) as (first, second):
        run(scenario)
