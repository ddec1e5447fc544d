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
import re
import shutil
import sys
from collections.abc import Callable, Iterator
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
    answer_dialog,
    make_claude,
    make_codex,
    submit_prompt,
    type_prompt,
    wait_for_codex_ready,
)
from tests.support.more_harnesses import EXIT, MARKERS, make_harness, shell_call
from tests.support.stub_model import Script, StubModel, call_tool, hold, reply, running_stub_model
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


# (name suffix, columns, rows): the usual pane, a narrow one and a short one
SIZES = (("", 120, 40), ("-narrow", 60, 40), ("-short", 120, 15))
LONG_DRAFT = (
    "a long draft that wraps over several lines of the composer in a narrow pane, "
    "written the way a person explains a change: rename the marmalade module to quince, "
    "keep the old import path working for a release, and say so in the changelog"
)
MULTILINE_DRAFT = "first line of the draft\nsecond line\nthird line\nfourth line\nfifth line"
# A message as the delivery engine pastes it: the stamp (long enough to wrap at 120 columns),
# then the sender's line behind the quote bar
DELIVERED_DRAFT = (
    "[openbus message from agent:claude:pane:%2:24492 (pane %2) \u00b7 id soak-0 \u00b7 1 line "
    "follows, each behind \u2502 \u00b7 reply with send_message]\n"
    "\u2502 soak 0: please look at the failing billing test and report back when done"
)


def paste(tmux: TmuxServer, pane: str, text: str) -> None:
    """Paste ``text`` as a terminal paste (bracketed), newlines and all; no Enter."""
    tmux.run("set-buffer", "-b", "capture", "--", text)
    tmux.run("paste-buffer", "-p", "-d", "-b", "capture", "-t", pane)


def clear_composer(tmux: TmuxServer, pane: str, idle: str, typed: str) -> None:
    """Empty the composer (Backspace over every character typed) and wait for it to show."""
    tmux.run("send-keys", "-t", pane, "-N", str(len(typed) + 5), "BSpace")
    tmux.wait_for(pane, idle, absent=[typed.splitlines()[0][:30]])


def ask_for_the_tool(stub: StubModel, tmux: TmuxServer, pane: str) -> Script:
    """Submit a prompt whose turn calls the stub's MCP echo tool (the harness asks first)."""
    tool = stub.script(
        call_tool("mcp__steer__echo", {"text": "captured"}),
        reply("STUB-FINAL: tool returned: {tool_result}"),
        match="TOOL:echo",
    )
    submit_prompt(tmux, pane, "TOOL:echo please")
    return tool


def sized(tmux: TmuxServer, pane: str, cols: int, rows: int) -> None:
    tmux.run("resize-window", "-t", pane, "-x", str(cols), "-y", str(rows))


def long_draft(cap: Capturer, idle: str, suffix: str, size: str) -> None:
    """Type the long draft (it wraps), capture it, erase it."""
    type_prompt(cap.tmux, cap.pane, LONG_DRAFT[:60])
    cap.tmux.send_text(cap.pane, LONG_DRAFT[60:])
    cap.tmux.wait_for(cap.pane, "changelog")
    cap.save(f"draft-long{suffix}", "idle", False, "a long typed draft, wrapped" + size)
    clear_composer(cap.tmux, cap.pane, idle, LONG_DRAFT)


States = Callable[[Pin, StubModel, TmuxServer, Path, str, int, int], None]


def at_every_size(pin: Pin, states: States) -> None:
    """Drive ``states`` once per pane size, each in a fresh stub, tmux server and folder."""
    for suffix, cols, rows in SIZES:
        with world(f"{pin.name[:2]}{suffix}") as (stub, tmux, cwd):
            states(pin, stub, tmux, cwd, suffix, cols, rows)


def claude_states(
    pin: Pin, stub: StubModel, tmux: TmuxServer, cwd: Path, suffix: str, cols: int, rows: int
) -> None:
    claude = make_claude(cwd.parent, stub, cwd, pin.version)
    argv = claude.tui_argv(*claude.mcp_args("steer", stub.mcp_url, "STEER_TOKEN"))
    pane = tmux.new_window(argv, claude.env(STEER_TOKEN=MCP_TOKEN), cwd, remain_on_exit=True)
    sized(tmux, pane, cols, rows)
    cap = Capturer(tmux, pane, pin)
    cap.claude = claude
    tmux.wait_for(pane, CLAUDE_IDLE)
    size = f" ({cols}x{rows})"
    cap.save(f"idle{suffix}", "idle", True, "fresh session, empty composer" + size)

    long_draft(cap, CLAUDE_IDLE, suffix, size)
    # a multi-line draft typed as a person does: backslash, Enter between the lines
    lines = MULTILINE_DRAFT.splitlines()
    for line in lines[:-1]:
        tmux.send_text(pane, line + "\\")
        tmux.wait_for(pane, line + "\\")
        tmux.keys(pane, "Enter")
        tmux.wait_for(pane, line, absent=[line + "\\"])
    type_prompt(tmux, pane, lines[-1])
    cap.save(f"draft-multiline{suffix}", "idle", False, "a typed five-line draft" + size)
    clear_composer(tmux, pane, CLAUDE_IDLE, MULTILINE_DRAFT)
    paste(tmux, pane, MULTILINE_DRAFT)  # Claude shows a pasted block as one placeholder
    tmux.wait_for(pane, "Pasted text")
    cap.save(f"draft-pasted{suffix}", "idle", False, "a pasted five-line draft" + size)
    clear_composer(tmux, pane, CLAUDE_IDLE, "[Pasted text #1 +4 lines]")

    type_prompt(tmux, pane, "hello slow turn please")
    cap.save(f"draft{suffix}", "idle", False, "a typed, unsent prompt" + size)
    turn = stub.script(hold(), reply("STUB-REPLY: held turn released"), match="slow turn")
    tmux.keys(pane, "Enter")
    turn.wait_holding()
    tmux.wait_for(pane, CLAUDE_BUSY)
    wait_until(lambda: claude.live_status()[0].get("status") == "busy", what="busy status")
    cap.save(f"busy{suffix}", "busy", True, "a turn held open by the stub: spinner" + size)
    if not suffix:
        cap.save("busy-escapes", "busy", True, "the held turn, captured with -e", escapes=True)
    turn.release()
    tmux.wait_for(pane, "STUB-REPLY: held turn released", CLAUDE_IDLE)
    wait_until(lambda: claude.live_status()[0].get("status") == "idle", what="idle status")
    cap.save(f"after-turn{suffix}", "idle", True, "a finished turn" + size)

    tool = ask_for_the_tool(stub, tmux, pane)
    tmux.wait_for(pane, CLAUDE_PERMISSION)
    wait_until(lambda: claude.live_status()[0].get("status") == "waiting", what="waiting")
    cap.save(f"permission-menu{suffix}", "menu", None, "MCP tool permission dialog" + size)
    answer_dialog(tmux, pane, CLAUDE_PERMISSION)
    tool.wait_finished()
    wait_until(lambda: claude.live_status()[0].get("status") == "idle", what="idle status")
    tmux.wait_for(pane, "STUB-FINAL: tool returned", CLAUDE_IDLE)
    cap.save(f"after-tool{suffix}", "idle", True, "after an approved MCP tool call" + size)
    if not suffix:
        cap.save("after-tool-escapes", "idle", True, "after the tool turn, -e", escapes=True)
        tmux.send_text(pane, "/")
        wait_until(
            lambda: len(re.findall(r"^\s*/[\w-]+\s{2,}\S", tmux.capture(pane), re.M)) >= 3,
            what="the slash-command list",
        )
        cap.save("slash-menu", "menu", False, "the slash-command list under a '/' draft")
        tmux.keys(pane, "Escape", "BSpace")
        tmux.wait_for(pane, CLAUDE_IDLE)

    cap.claude = None  # the live status file goes away on /exit
    submit_prompt(tmux, pane, "/exit")
    wait_until(lambda: tmux.pane_dead(pane), timeout=20, what="claude to exit")
    cap.save(f"exited{suffix}", "exited", None, "after /exit; the pane stays" + size)


def codex_states(
    pin: Pin, stub: StubModel, tmux: TmuxServer, cwd: Path, suffix: str, cols: int, rows: int
) -> None:
    codex = make_codex(cwd.parent, stub, cwd, pin.version)
    stub.title = "Slow turn check"
    argv = codex.tui_argv(*codex.mcp_args("steer", stub.mcp_url, "STEER_TOKEN"))
    pane = tmux.new_window(argv, codex.env(STEER_TOKEN=MCP_TOKEN), cwd, remain_on_exit=True)
    sized(tmux, pane, cols, rows)
    cap = Capturer(tmux, pane, pin)
    wait_for_codex_ready(tmux, pane)
    size = f" ({cols}x{rows})"
    cap.save(f"idle{suffix}", "idle", True, "fresh session, placeholder shown" + size)

    long_draft(cap, CODEX_IDLE, suffix, size)
    paste(tmux, pane, MULTILINE_DRAFT)
    tmux.wait_for(pane, "fifth line")
    cap.save(f"draft-multiline{suffix}", "idle", False, "a pasted five-line draft" + size)
    clear_composer(tmux, pane, CODEX_IDLE, MULTILINE_DRAFT)

    type_prompt(tmux, pane, "hello codex slow turn")
    cap.save(f"draft{suffix}", "idle", False, "a typed, unsent prompt" + size)
    turn = stub.script(hold(), reply("STUB-REPLY: held turn released"), match="slow turn")
    tmux.keys(pane, "Enter")
    turn.wait_holding()
    tmux.wait_for(pane, "Working", CODEX_BUSY)
    cap.save(f"busy{suffix}", "busy", True, "a turn held open: '• Working (…)'" + size)
    if not suffix:
        cap.save("busy-escapes", "busy", True, "the held turn, captured with -e", escapes=True)
    turn.release()
    tmux.wait_for(pane, "STUB-REPLY: held turn released", "Worked for", CODEX_IDLE)
    cap.save(f"after-turn{suffix}", "idle", True, "a finished turn: 'Worked for'" + size)

    tool = ask_for_the_tool(stub, tmux, pane)
    tmux.wait_for(pane, "Allow the steer MCP server to run tool")
    cap.save(f"mcp-approval-menu{suffix}", "menu", None, "MCP tool approval prompt" + size)
    answer_dialog(tmux, pane, "Allow the steer MCP server to run tool")
    tool.wait_finished()
    tmux.wait_for(pane, "STUB-FINAL: tool returned", CODEX_IDLE)
    tmux.wait_for(pane, "Worked for", absent=[CODEX_BUSY])
    cap.save(f"after-tool{suffix}", "idle", True, "after an approved MCP tool call" + size)

    submit_prompt(tmux, pane, "/model")
    tmux.wait_for(pane, "Select Model")
    cap.save(f"model-picker{suffix}", "menu", None, "the /model picker" + size)
    tmux.keys(pane, "Escape")
    tmux.wait_for(pane, CODEX_IDLE, absent=["Select Model"])

    submit_prompt(tmux, pane, "/quit")
    wait_until(lambda: tmux.pane_dead(pane), timeout=20, what="codex to quit")
    cap.save(f"exited{suffix}", "exited", None, "after /quit; the pane stays" + size)


# OpenCode takes most of a minute to draw on a busy two-core host
START_TIMEOUT = 120.0


def capture_more(pin: Pin) -> None:
    """OpenCode, omp or Gemini CLI: idle, a pasted message, a draft, a held turn, its reply, a
    shell command's permission prompt, after the tool, 60-column and 15-row panes, a short-pane
    draft, exited."""
    name = pin.name
    marks = MARKERS[name]  # type: ignore[index]
    with world(name) as (stub, tmux, cwd):
        harness = make_harness(name, cwd.parent, stub, cwd, pin.version)  # type: ignore[arg-type]
        pane = tmux.new_window(harness.tui_argv(), harness.env(), cwd, remain_on_exit=True)
        cap = Capturer(tmux, pane, pin)
        idle = dict(absent=[marks.busy], timeout=90.0)
        tmux.wait_for(pane, *marks.ready, timeout=START_TIMEOUT)
        cap.save("idle", "idle", True, "fresh session against the stub, empty composer")

        paste(tmux, pane, DELIVERED_DRAFT)  # OpenCode shows a pasted block as a placeholder
        wait_until(
            lambda: any(m in tmux.capture(pane) for m in ("soak 0:", "Pasted")), what="the paste"
        )
        cap.save("draft-pasted", "idle", False, "a pasted two-line message, as delivery pastes")
        clear_composer(tmux, pane, marks.ready[0], DELIVERED_DRAFT)
        tmux.wait_for(pane, *marks.ready, absent=["Pasted"])

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


CAPTURE: dict[str, States] = {"claude": claude_states, "codex": codex_states}
# OpenCode, omp and Gemini CLI: every state and size in one session
MORE = frozenset(MARKERS)


def main(argv: list[str]) -> int:
    wanted = argv or [pin.id for pin in PINS]
    chosen: list[Pin] = []
    for word in wanted:
        name, _, version = word.partition("-")
        if (name not in CAPTURE and name not in MORE) or not version:
            print(f"not a pin of a harness this script drives: {word}", file=sys.stderr)
            return 2
        chosen.append(Pin(name, version))
    missing = [pin.id for pin in chosen if pin.binary is None]
    if missing:
        print(f"not installed: {', '.join(missing)} (run `make harnesses`)", file=sys.stderr)
        return 1
    for pin in chosen:
        if pin.name in MORE:
            capture_more(pin)
        else:
            at_every_size(pin, CAPTURE[pin.name])
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
