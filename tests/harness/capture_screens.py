"""Capture real screens of Claude Code and Codex into the screen parsers' eval set.

Run: ``.venv/bin/python -m tests.harness.capture_screens [PIN ...]`` (needs ``make harnesses``;
a PIN is ``claude-2.1.332``, default every pin in the Makefile's ``HARNESS_PINS``). Each screen
lands in ``tests/daemon/screens/captured/<pin>/<case>.txt`` (``tmux capture-pane -p``; the
``*-escapes.txt`` ones with ``-e``) with ``<case>.json`` beside it: the expected reading at the
top level (``harness``, ``state``, ``composer_empty``, optional ``title_hint``), plus the
``evidence`` a watcher would have had at that moment (pane title, Claude's live status file)
and where the screen came from. The harnesses run from fixed directories under
``/tmp/openbus-capture`` so the paths on screen do not change between captures.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.harnesses import (
    CLAUDE_BUSY,
    CLAUDE_IDLE,
    CLAUDE_PERMISSION,
    CODEX_BUSY,
    CODEX_IDLE,
    PINS,
    ClaudeHarness,
    Pin,
    make_claude,
    make_codex,
    submit_prompt,
    type_prompt,
    wait_for_codex_ready,
)
from tests.support.more_harnesses import EXIT, MARKERS, make_harness, shell_call
from tests.support.stub_model import StubModel, call_tool, hold, reply, running_stub_model
from tests.support.tmux import TmuxServer, tmux_server
from tests.support.wait import wait_until

OUT = Path(__file__).resolve().parents[1] / "daemon" / "screens" / "captured"
ROOT = Path("/tmp/openbus-capture")
MCP_TOKEN = "capture-token-0123456789"


class Capturer:
    def __init__(self, tmux: TmuxServer, pane: str, pin: Pin) -> None:
        self.tmux = tmux
        self.pane = pane
        self.harness = pin.name
        self.pin = pin
        labels = {"claude": "Claude Code", "codex": "Codex CLI", "opencode": "OpenCode"}
        self.version = f"{labels.get(pin.name, pin.name)} {pin.version}"
        self.out = OUT / pin.id
        self.out.mkdir(parents=True, exist_ok=True)
        self.claude: ClaudeHarness | None = None

    def title_hint(self, pane_title: str, screen: str) -> str | None:
        """The session title the screen shows: Claude sets the pane title to a status glyph
        and the title ("Claude Code" before it has one); Codex's footer line reads
        ``model · cwd · thread name``."""
        if self.harness == "claude":
            glyph, _, title = pane_title.partition(" ")
            return title if glyph and title and title != "Claude Code" else None
        for line in screen.splitlines():
            parts = [p.strip() for p in line.split(" · ")]
            if len(parts) == 3 and parts[0].startswith("stub-model"):
                return parts[2]
        return None

    def save(
        self,
        name: str,
        state: str,
        composer_empty: bool | None,
        why: str,
        *,
        escapes: bool = False,
    ) -> None:
        screen = self.tmux.capture(self.pane, escapes=escapes)
        pane_title = self.tmux.pane_field(self.pane, "pane_title")
        title_hint = self.title_hint(pane_title, self.tmux.capture(self.pane))
        evidence: dict[str, Any] = {"pane_title": pane_title}
        if self.tmux.pane_dead(self.pane):
            evidence["dead"] = True
        if self.claude is not None:
            live = self.claude.live_status()
            if live:
                evidence["claude_status"] = {
                    "status": live[0].get("status"),
                    "waiting_for": live[0].get("waitingFor"),
                }
        doc: dict[str, Any] = {
            "harness": self.harness,
            "state": state,
            "composer_empty": composer_empty,
        }
        if title_hint is not None:
            doc["title_hint"] = title_hint
        doc["evidence"] = evidence
        doc["source"] = f"captured by tests/harness/capture_screens.py from the real {self.version}"
        doc["why"] = why
        (self.out / f"{name}.txt").write_text(screen, encoding="utf-8")
        (self.out / f"{name}.json").write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
        print(f"captured {self.pin.id}/{name}")


@contextmanager
def world(name: str) -> Iterator[tuple[StubModel, TmuxServer, Path]]:
    root = ROOT / name
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    cwd = root / f"app-{name}"
    cwd.mkdir()
    with running_stub_model(mcp_token=MCP_TOKEN) as stub, tmux_server(root / "tmux") as tmux:
        yield stub, tmux, cwd


def capture_claude(pin: Pin) -> None:
    with world("cc") as (stub, tmux, cwd):
        claude = make_claude(cwd.parent, stub, cwd, pin.version)
        argv = claude.tui_argv(*claude.mcp_args("steer", stub.mcp_url, "STEER_TOKEN"))
        pane = tmux.new_window(argv, claude.env(STEER_TOKEN=MCP_TOKEN), cwd, remain_on_exit=True)
        cap = Capturer(tmux, pane, pin)
        cap.claude = claude
        tmux.wait_for(pane, CLAUDE_IDLE)
        cap.save("idle", "idle", True, "fresh session against the stub, empty composer")

        type_prompt(tmux, pane, "hello slow turn please")
        cap.save("draft", "idle", False, "a typed, unsent prompt in the composer")
        turn = stub.script(hold(), reply("STUB-REPLY: held turn released"), match="slow turn")
        tmux.keys(pane, "Enter")
        turn.wait_holding()
        tmux.wait_for(pane, CLAUDE_BUSY)
        wait_until(lambda: claude.live_status()[0].get("status") == "busy", what="busy status")
        cap.save("busy", "busy", True, "a turn held open by the stub: spinner line")
        cap.save("busy-escapes", "busy", True, "the held turn, captured with -e", escapes=True)
        turn.release()
        tmux.wait_for(pane, "STUB-REPLY: held turn released", CLAUDE_IDLE)
        cap.save("after-turn", "idle", True, "a finished turn: reply and '✻ <Verb>ed for'")

        tool = stub.script(
            call_tool("mcp__steer__echo", {"text": "captured"}),
            reply("STUB-FINAL: tool returned: {tool_result}"),
            match="TOOL:echo",
        )
        submit_prompt(tmux, pane, "TOOL:echo please")
        tmux.wait_for(pane, CLAUDE_PERMISSION, "1. Yes")
        wait_until(lambda: claude.live_status()[0].get("status") == "waiting", what="waiting")
        cap.save("permission-menu", "menu", None, "MCP tool permission dialog")
        tmux.keys(pane, "Enter")
        tool.wait_finished()
        tmux.wait_for(pane, "STUB-FINAL: tool returned", CLAUDE_IDLE)
        wait_until(lambda: claude.live_status()[0].get("status") == "idle", what="idle status")
        cap.save("after-tool", "idle", True, "after an approved MCP tool call")
        cap.save("after-tool-escapes", "idle", True, "after the tool turn, with -e", escapes=True)

        cap.claude = None  # the live status file goes away on /exit
        submit_prompt(tmux, pane, "/exit")
        wait_until(lambda: tmux.pane_dead(pane), timeout=20, what="claude to exit")
        cap.save("exited", "exited", None, "after /exit; the pane stays (remain-on-exit)")


def capture_codex(pin: Pin) -> None:
    with world("cx") as (stub, tmux, cwd):
        codex = make_codex(cwd.parent, stub, cwd, pin.version)
        stub.title = "Slow turn check"
        argv = codex.tui_argv(*codex.mcp_args("steer", stub.mcp_url, "STEER_TOKEN"))
        pane = tmux.new_window(argv, codex.env(STEER_TOKEN=MCP_TOKEN), cwd, remain_on_exit=True)
        cap = Capturer(tmux, pane, pin)
        wait_for_codex_ready(tmux, pane)
        cap.save("idle", "idle", True, "fresh session against the stub, placeholder shown")

        type_prompt(tmux, pane, "hello codex slow turn")
        cap.save("draft", "idle", False, "a typed, unsent prompt in the composer")
        turn = stub.script(hold(), reply("STUB-REPLY: held turn released"), match="slow turn")
        tmux.keys(pane, "Enter")
        turn.wait_holding()
        tmux.wait_for(pane, "Working", CODEX_BUSY)
        cap.save(
            "busy",
            "busy",
            True,
            "a turn held open by the stub: '• Working (… esc to interrupt)'",
        )
        cap.save(
            "busy-escapes",
            "busy",
            True,
            "the held turn, captured with -e",
            escapes=True,
        )
        turn.release()
        tmux.wait_for(pane, "STUB-REPLY: held turn released", "Worked for", CODEX_IDLE)
        cap.save(
            "after-turn",
            "idle",
            True,
            "a finished turn: reply and 'Worked for'",
        )

        tool = stub.script(
            call_tool("mcp__steer__echo", {"text": "captured"}),
            reply("STUB-FINAL: tool returned: {tool_result}"),
            match="TOOL:echo",
        )
        submit_prompt(tmux, pane, "TOOL:echo please")
        tmux.wait_for(pane, 'Allow the steer MCP server to run tool "echo"?', "1. Allow")
        cap.save("mcp-approval-menu", "menu", None, "MCP tool approval prompt")
        tmux.keys(pane, "Enter")
        tool.wait_finished()
        tmux.wait_for(pane, "STUB-FINAL: tool returned", "Called steer.echo", CODEX_IDLE)
        tmux.wait_for(pane, "Worked for", absent=[CODEX_BUSY])
        cap.save(
            "after-tool",
            "idle",
            True,
            "after an approved MCP tool call",
        )


# OpenCode takes most of a minute to draw on a busy two-core host
START_TIMEOUT = 120.0


def capture_more(pin: Pin) -> None:
    """OpenCode, omp or Gemini CLI: idle, a draft, a held turn, its reply, a shell command's
    permission prompt, after the tool, 60-column and 15-row panes, a short-pane draft, exited."""
    name = pin.name
    marks = MARKERS[name]  # type: ignore[index]
    with world(name) as (stub, tmux, cwd):
        harness = make_harness(name, cwd.parent, stub, cwd, pin.version)  # type: ignore[arg-type]
        pane = tmux.new_window(harness.tui_argv(), harness.env(), cwd, remain_on_exit=True)
        cap = Capturer(tmux, pane, pin)
        idle = dict(absent=[marks.busy], timeout=90.0)
        tmux.wait_for(pane, *marks.ready, timeout=START_TIMEOUT)
        cap.save("idle", "idle", True, "fresh session against the stub, empty composer")

        type_prompt(tmux, pane, "hello slow turn please")
        cap.save("draft", "idle", False, "a typed, unsent prompt in the composer")
        turn = stub.script(hold(), reply("STUB-REPLY: held turn released"), match="slow turn")
        tmux.keys(pane, "Enter")
        turn.wait_holding(timeout=90.0)
        tmux.wait_for(pane, marks.busy)
        cap.save("busy", "busy", True, "a turn held open by the stub")
        turn.release()
        tmux.wait_for(pane, "STUB-REPLY: held turn released", *marks.ready[:1], **idle)
        cap.save("after-turn", "idle", True, "the held turn answered")

        tool, args = shell_call(name, "touch made-by-tool")  # type: ignore[arg-type]
        asked = stub.script(
            call_tool(tool, args), reply("STUB-FINAL: tool returned"), match="TOOL:shell"
        )
        submit_prompt(tmux, pane, "TOOL:shell please")
        tmux.wait_for(pane, marks.menu, timeout=60.0)
        cap.save("permission-menu", "menu", None, "the permission prompt for a shell command")
        tmux.keys(pane, "Enter")
        asked.wait_finished(timeout=60.0)
        tmux.wait_for(pane, "STUB-FINAL: tool returned", *marks.ready[:1], **idle)
        cap.save("after-tool", "idle", True, "after the approved shell command")

        tmux.run("resize-window", "-t", pane, "-x", "60", "-y", "40")
        wait_until(lambda: max(map(len, tmux.capture(pane).splitlines())) <= 60, what="60 cols")
        tmux.wait_for(pane, marks.ready[0], timeout=30.0)
        cap.save("narrow-idle", "idle", True, "the idle screen in a 60-column pane")
        tmux.run("resize-window", "-t", pane, "-x", "120", "-y", "15")
        wait_until(lambda: len(tmux.capture(pane).splitlines()) <= 15, what="15 rows")
        tmux.wait_for(pane, marks.ready[0], timeout=30.0)
        cap.save("short-idle", "idle", True, "the idle screen in a 15-row pane")
        type_prompt(tmux, pane, "a draft in a short pane")
        cap.save("short-draft", "idle", False, "a draft in a 15-row pane")
        tmux.keys(pane, "C-u")

        submit_prompt(tmux, pane, EXIT[name])
        wait_until(lambda: tmux.pane_dead(pane), timeout=30.0, what=f"{name} to exit")
        cap.save("exited", "exited", None, f"after {EXIT[name]}; the pane stays (remain-on-exit)")


CAPTURE = {
    "claude": capture_claude,
    "codex": capture_codex,
    "opencode": capture_more,
    "omp": capture_more,
    "gemini": capture_more,
}


def main(argv: list[str]) -> int:
    wanted = argv or [pin.id for pin in PINS]
    chosen: list[Pin] = []
    for word in wanted:
        name, _, version = word.partition("-")
        if name not in CAPTURE or not version:
            print(f"not a pin of a harness this script drives: {word}", file=sys.stderr)
            return 2
        chosen.append(Pin(name, version))
    missing = [pin.id for pin in chosen if pin.binary is None]
    if missing:
        print(f"not installed: {', '.join(missing)} (run `make harnesses`)", file=sys.stderr)
        return 1
    for pin in chosen:
        CAPTURE[pin.name](pin)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
