"""The directory's table: a pane whose watcher was lost says its state is as last seen."""

from __future__ import annotations

from openbus.daemon.cli_directory import format_directory


def pane(pane_id: str, **extra: object) -> dict[str, object]:
    return {
        "pane": pane_id,
        "session": "s",
        "window": {"index": 0},
        "harness": "claude",
        "state": "busy",
        "composer_empty": True,
        "last_activity": 0.0,
        **extra,
    }


def test_a_stale_pane_reads_stale_beside_its_last_seen_state() -> None:
    data = {
        "tmux": {"status": "running", "socket": "/tmp/s"},
        "panes": [pane("%1", stale=True), pane("%2", stale=False)],
    }
    rows = format_directory(data, now=10.0).splitlines()[2:]
    assert "busy (stale)" in rows[0] and "%1" in rows[0]
    assert "stale" not in rows[1]
