"""Waiting for a condition with a bounded timeout: the only way tests wait."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


class Timeout(AssertionError):
    pass


def wait_until(
    predicate: Callable[[], T],
    *,
    timeout: float = 10.0,
    interval: float = 0.02,
    what: str = "condition",
) -> T:
    """Poll ``predicate`` until it returns something truthy; return that. Fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # the condition may not be checkable yet
            last_error = exc
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_error!r})" if last_error else ""
            raise Timeout(f"timed out after {timeout}s waiting for {what}{detail}")
        time.sleep(interval)


async def async_wait_until(
    predicate: Callable[[], Awaitable[T]],
    *,
    timeout: float = 10.0,
    interval: float = 0.02,
    what: str = "condition",
) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = await predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise Timeout(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)


NO_DELAY = 0  # sleeping for zero seconds is asyncio's documented way to yield without waiting


async def let_others_run() -> None:
    """Yield to the event loop once, so tasks already ready take their turn (no waiting)."""
    await asyncio.sleep(NO_DELAY)


def until_execed(pid: int) -> None:
    """Wait until ``pid``'s exec has laid out its arguments. ``Popen`` returns as soon as the
    child has left the parent's memory, before the kernel has named the new image and written
    its argv; a read of its process in that window sees an exec half done."""
    wait_until(lambda: Path(f"/proc/{pid}/cmdline").read_bytes(), what=f"pid {pid} to exec")
