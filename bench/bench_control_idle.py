"""Control's cost on the stub model: tokens per routed request, and requests per idle hour.

The real daemon, one worker pane, and the real Claude Code as control against the stub, set
up as ``tests/daemon/control/test_real_control.py`` sets it up (no control runs at first).

1. A routed request: an ambiguous ``openbus ask`` starts control (first use); its scripted
   turn is the test's: ``wait_for_changes`` (the request), ``list_panes``, ``hand_off``,
   ``reply``, one more ``wait_for_changes`` that answers empty, and the end of the turn.
   Counted from the ask to the end of that turn: the model requests Claude Code made and
   their size in tokens, estimated as the request body's JSON (system, messages, tools)
   at 4 characters a token (the stub counts no tokens). Printed; no target.
2. Idle: control's turn has ended; then ``OPENBUS_BENCH_IDLE_SECONDS`` (default 600: ten
   minutes) with the directory unchanged. Counted: model requests from control and tokens,
   with the daemon's looks at control's transcript (one a second) and the feed revision to
   show the daemon ran and nothing changed. Target: zero per idle hour.

Run: ``.venv/bin/python -m bench.bench_control_idle`` (or ``make bench``); needs the harness
CLIs (``make harnesses``).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.daemon.control.test_real_control import (  # noqa: E402
    cli_json,
    control_fleet,
    control_turn,
)
from tests.support.stub_model import RecordedRequest, running_stub_model  # noqa: E402
from tests.support.tmux import tmux_server  # noqa: E402
from tests.support.wait import wait_until  # noqa: E402

IDLE_SECONDS = float(os.environ.get("OPENBUS_BENCH_IDLE_SECONDS", "600"))
CHARS_PER_TOKEN = 4


def _model(requests: list[RecordedRequest]) -> list[RecordedRequest]:
    return [r for r in requests if r.kind in ("turn", "title")]


def _tokens(requests: list[RecordedRequest]) -> int:
    return sum(len(json.dumps(r.body)) // CHARS_PER_TOKEN for r in requests)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="obcontrol-", ignore_cleanup_errors=True) as tmp:
        root = Path(tmp)
        with (
            running_stub_model() as stub,
            tmux_server(root / "tmux") as tmux,
            control_fleet(root, stub, tmux) as fleet,
        ):
            turn = control_turn(stub, fleet, "Draft the release notes for the parser change.")
            seen = len(stub.requests)
            asked = cli_json(fleet.daemon, "ask", "what should we work on next?", "--wait", "50")
            assert asked["sent_to"] is None, asked  # to control
            turn.wait_finished(timeout=120)
            routed = _model(list(stub.requests)[seen:])
            print(
                f"routed request through control (started on first use, the test's scripted "
                f"turn): {len(routed)} model requests, ~{_tokens(routed):,} tokens (request "
                f"JSON / {CHARS_PER_TOKEN}), {_tokens(routed) // max(len(routed), 1):,} a "
                f"request; the largest {max(_tokens([r]) for r in routed):,}",
                flush=True,
            )

            wait_until(
                lambda: any(
                    p.get("control") and p["state"] == "idle"
                    for p in cli_json(fleet.daemon, "directory")["panes"]
                ),
                timeout=60,
                what="control's pane idle after its turn",
            )
            before = fleet.health()["control"]
            seen = len(stub.requests)
            started = time.monotonic()
            time.sleep(IDLE_SECONDS)
            idle = time.monotonic() - started
            after = fleet.health()["control"]
            during = _model(list(stub.requests)[seen:])
            hours = idle / 3600
            print(
                f"idle control, directory unchanged for {idle:.0f} s (feed revision "
                f"{before['feed_revision']} -> {after['feed_revision']}, the daemon looked at "
                f"control's transcript {after['looks'] - before['looks']} times, "
                f"{after['nudges'] - before['nudges']} lines typed into its pane): "
                f"{len(during)} model requests, {_tokens(during)} tokens; per idle hour "
                f"{len(during) / hours:.1f} requests, {_tokens(during) / hours:.0f} tokens "
                f"(target 0: {'met' if not during else 'missed'})",
                flush=True,
            )


if __name__ == "__main__":
    main()
