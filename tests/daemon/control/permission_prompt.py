"""A pane that shows Claude Code's captured permission prompt (run as a file named
``claude``, so the directory sees Claude Code) and records every key it is sent."""

from __future__ import annotations

import os
import sys
import termios
import tty
from pathlib import Path

screen = Path(sys.argv[1]).read_text()
keys = Path(sys.argv[2])
old = termios.tcgetattr(0)
tty.setraw(0)
try:
    sys.stdout.write(screen.replace("\n", "\r\n"))
    sys.stdout.flush()
    while True:
        data = os.read(0, 16)
        if not data:
            break
        with keys.open("ab") as handle:
            handle.write(data)
finally:
    termios.tcsetattr(0, termios.TCSADRAIN, old)
