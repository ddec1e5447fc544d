"""A deterministic fake agent TUI for messaging tests, drawn like Claude Code's screen.

Run as ``python3 <dir>/claude <control dir>`` (a file named ``claude``, so the directory
detects the harness from the process tree). It puts the terminal in raw mode, asks for
bracketed paste, and draws a transcript above a composer box (``❯`` between two rules, the
``? for shortcuts`` footer below). Typed characters and bracketed pastes go into the composer;
Enter submits it: the text is added to the transcript (each line prefixed ``> ``) and a turn
runs: the spinner line with ``esc to interrupt`` shows for ``turn`` seconds (the control dir's
``turn`` file, default 0.2), then ``● done`` and the idle composer come back. A prompt holding
``HOLD`` keeps the turn running until the control dir holds a file named ``release``
(which is then removed). Enter during a turn is held and submits the composer when the turn
ends, as Claude Code queues input. Ctrl-U clears the composer; a draft of more than ten lines
shows folded, as Claude Code shows a long paste. Every submitted prompt is appended to the
control dir's ``received`` file, one JSON string per line, so tests see exactly what was
submitted and how often. While the control dir holds ``stuck``, Enter is ignored (the composer
keeps its text, unsubmitted); while it holds ``sticky``, Ctrl-U is ignored too. A ``cold``
file holding seconds makes Enter ignored for that long after start, as a harness that has
drawn its idle composer before it takes input.
"""

from __future__ import annotations

import codecs
import json
import os
import select
import sys
import termios
import time
import tty
from pathlib import Path

RULE = "\u2500" * 60
PASTE_START = "\x1b[200~"
PASTE_END = "\x1b[201~"


FOLD_LINES = 10


class Agent:
    def __init__(self, control: Path) -> None:
        self.control = control
        self.composer = ""
        self.transcript: list[str] = []
        self.busy_until = 0.0
        self.hold = False
        self.queued_enter = False
        cold = control / "cold"
        self.cold_until = time.monotonic() + (float(cold.read_text()) if cold.exists() else 0.0)

    @property
    def busy(self) -> bool:
        return self.hold or time.monotonic() < self.busy_until

    def draw(self) -> None:
        out = ["\x1b[2J\x1b[H"]
        lines = self.transcript[-20:]
        out.extend(line + "\r\n" for line in lines)
        if self.busy:
            out.append("\u2733 Working\u2026 (esc to interrupt)\r\n")
        out.append(RULE + "\r\n")
        draft = self.composer.split("\n")
        if len(draft) > FOLD_LINES:  # as Claude Code shows a long paste: folded, one line
            draft = [f"[Pasted text #1 +{len(draft) - 1} lines]"]
        out.append("\u276f\u00a0" + draft[0] + "\r\n")
        out.extend("  " + more + "\r\n" for more in draft[1:])
        out.append(RULE + "\r\n")
        out.append("  ? for shortcuts")
        sys.stdout.write("".join(out))
        sys.stdout.flush()

    def submit(self) -> None:
        text = self.composer
        self.composer = ""
        with (self.control / "received").open("a", encoding="utf-8") as f:
            f.write(json.dumps(text) + "\n")
        self.transcript.extend("> " + line for line in text.split("\n"))
        turn_file = self.control / "turn"
        turn = float(turn_file.read_text()) if turn_file.exists() else 0.2
        self.busy_until = time.monotonic() + turn
        self.hold = "HOLD" in text

    def tick(self) -> bool:
        """Advance a running turn; True when the screen changed."""
        release = self.control / "release"
        if self.hold and release.exists():
            release.unlink()
            self.hold = False
            self.busy_until = 0.0
            self.transcript.append("\u25cf done")
            return True
        if not self.hold and self.busy_until and time.monotonic() >= self.busy_until:
            self.busy_until = 0.0
            self.transcript.append("\u25cf done")
            if self.queued_enter and self.composer:
                self.queued_enter = False
                self.submit()
            return True
        return False

    def feed(self, data: str, pasting: bool) -> bool:
        buf = data
        while buf:
            if buf.startswith(PASTE_START):
                pasting, buf = True, buf[len(PASTE_START) :]
                continue
            if buf.startswith(PASTE_END):
                pasting, buf = False, buf[len(PASTE_END) :]
                continue
            ch, buf = buf[:1], buf[1:]
            if pasting:
                self.composer += "\n" if ch in ("\r", "\n") else ch
            elif ch == "\r":
                if (self.control / "stuck").exists() or time.monotonic() < self.cold_until:
                    continue
                if self.busy:
                    self.queued_enter = True  # like Claude Code: submitted when the turn ends
                else:
                    self.submit()
            elif ch == "\x15":
                if not (self.control / "sticky").exists():
                    self.composer = ""
            elif ch == "\x7f":
                self.composer = self.composer[:-1]
            elif ch >= " ":
                self.composer += ch
        return pasting


def main() -> None:
    control = Path(sys.argv[1])
    control.mkdir(parents=True, exist_ok=True)
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    tty.setraw(fd)
    sys.stdout.write("\x1b[?2004h")
    agent = Agent(control)
    pasting = False
    pending = ""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    try:
        agent.draw()
        while True:
            ready, _, _ = select.select([fd], [], [], 0.05)
            changed = agent.tick()
            if ready:
                data = os.read(fd, 65536)
                if not data:
                    return
                text = pending + decoder.decode(data)
                # keep an incomplete escape sequence for the next read
                cut = text.rfind("\x1b")
                if cut != -1 and len(text) - cut < len(PASTE_START) and not text.endswith("~"):
                    text, pending = text[:cut], text[cut:]
                else:
                    pending = ""
                pasting = agent.feed(text, pasting)
                changed = True
            if changed:
                agent.draw()
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


if __name__ == "__main__":
    main()
