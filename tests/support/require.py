"""``OPENBUS_REQUIRE``: the real parts a run must exercise, so a skip cannot pass for a test.

A test that needs one of the real parts below skips where the part is missing: a developer
without root or npm still gets a green run of everything else. ``OPENBUS_REQUIRE`` (a comma
list, e.g. ``harness,root``; CI sets it) turns such a skip into a failure naming the part and
the skip's reason. A skip counts for a part when

* the test carries the part's marker (``harness``, ``root``, ``chromium``): any skip of it,
  from a ``skipif`` mark, a fixture or the test body, since a marked test exists to exercise
  that part; or
* the skip was raised by ``skip_missing(part, reason)``, which the support code uses where
  the part is found missing (``tmux`` has no marker: nearly every test needs it).

Other skips (no POSIX ACLs on this filesystem, no Docker engine, an older systemd-analyze)
stay skips. A ``skip_missing`` of a marked part in a test without that marker fails whatever
the variable says: the test must be marked so that ``-m`` selects it and the rule above sees it.

Loaded from ``tests/conftest.py`` as a plugin (``pytest_plugins``).
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterable
from typing import NoReturn

import pytest

PARTS = {
    "harness": "the real Claude Code and Codex CLIs (make harnesses)",
    "root": "root (real users and groups, PAM, mounts)",
    "tmux": "a tmux binary (make system-deps)",
    "chromium": "a Chromium for the browser test (make system-deps)",
}
MARKED = ("harness", "root", "chromium")  # a test needing one carries the marker of its name
ENV = "OPENBUS_REQUIRE"
_required_key = pytest.StashKey[frozenset[str]]()


def skip_missing(part: str, reason: str) -> NoReturn:
    """Skip the test because ``part`` is missing (a failure when ``OPENBUS_REQUIRE`` names it)."""
    if part not in PARTS:
        raise ValueError(f"unknown part {part!r}")
    skip = pytest.skip.Exception(reason)
    skip.openbus_part = part  # type: ignore[attr-defined]  # read back by the report hook
    raise skip


def parse_required(value: str | None) -> frozenset[str]:
    names = frozenset(n.strip() for n in (value or "").split(",") if n.strip())
    unknown = sorted(names - PARTS.keys())
    if unknown:
        raise pytest.UsageError(
            f"{ENV} names unknown part(s) {', '.join(unknown)}; known: {', '.join(sorted(PARTS))}"
        )
    return names


def _named_parts(exc: BaseException) -> Iterable[str]:
    part = getattr(exc, "openbus_part", None)
    if part is not None:
        yield part
    elif isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _named_parts(inner)


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_required_key] = parse_required(os.environ.get(ENV))
    for part in MARKED:  # the markers are registered here, next to what they mean
        config.addinivalue_line("markers", f"{part}: needs {PARTS[part]}")


def pytest_report_header(config: pytest.Config) -> str:
    required = config.stash[_required_key]
    return f"{ENV}: {', '.join(sorted(required)) if required else 'nothing (skips stay skips)'}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if not report.skipped or hasattr(report, "wasxfail") or call.excinfo is None:
        return report
    reason = getattr(call.excinfo.value, "msg", None) or (
        report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    )
    named = set(_named_parts(call.excinfo.value))
    marked = {part for part in MARKED if item.get_closest_marker(part) is not None}
    unmarked = sorted((named & set(MARKED)) - marked)
    if unmarked:
        report.outcome = "failed"
        report.longrepr = (
            f"skipped for a missing {', '.join(unmarked)} but not marked "
            f"{' and '.join(f'@pytest.mark.{p}' for p in unmarked)}: mark it ({reason})"
        )
        return report
    required = item.config.stash[_required_key]
    missing = sorted((named | marked) & required)
    if missing:
        report.outcome = "failed"
        report.longrepr = f"{ENV} requires {', '.join(missing)}, but this test skipped: {reason}"
    return report
