"""``read_session`` on a 10 MB Claude Code transcript against reading its tail in plain Python.

Ours: the session tools' read of the newest reply after the child wrote one more turn
(``ReplyReader.read`` on a file it has read before, then masking the reply), which is what
every ``read_session`` call after the first costs. The floor: open the file, read its last
64 KiB and parse those lines for the last assistant text, with nothing kept between calls.
The cold first read of the whole file is printed beside them. Target: ours p50 <= 2x floor.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from bench.bench_history import percentile
from openbus.daemon.history.replies import ReplyReader
from openbus.daemon.mcp.masking import Masker

SIZE = 10 * 1024 * 1024
ROUNDS = 200
TAIL = 64 * 1024


def _turn(i: int) -> str:
    user = {"type": "user", "message": {"role": "user", "content": f"step {i}: go on"}}
    words = " ".join(f"word{j}" for j in range(120))
    text = {"type": "text", "text": f"reply {i}: {words}"}
    assistant = {"type": "assistant", "message": {"content": [text]}}
    return json.dumps(user) + "\n" + json.dumps(assistant) + "\n"


def tail_floor(path: Path) -> str | None:
    with path.open("rb") as handle:
        handle.seek(0, 2)
        size = handle.tell()
        handle.seek(max(0, size - TAIL))
        lines = handle.read().split(b"\n")
    for raw in reversed(lines):
        try:
            rec = json.loads(raw)
        except ValueError:
            continue
        if rec.get("type") == "assistant":
            return str(rec["message"]["content"][0]["text"])
    return None


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "child.jsonl"
        with path.open("w") as handle:
            i = 0
            while handle.tell() < SIZE:
                handle.write(_turn(i))
                i += 1
        reader = ReplyReader()
        masker = Masker()
        t0 = time.perf_counter()
        reader.read(path, "claude")
        cold = (time.perf_counter() - t0) * 1000
        ours: list[float] = []
        unmasked: list[float] = []
        floor: list[float] = []
        for n in range(ROUNDS):
            with path.open("a") as handle:
                handle.write(_turn(i + n))
            t0 = time.perf_counter()
            read = reader.read(path, "claude")
            unmasked.append((time.perf_counter() - t0) * 1000)
            masker.mask(read.pending or "")
            ours.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            tail_floor(path)
            floor.append((time.perf_counter() - t0) * 1000)
        p50, f50 = percentile(ours, 50), percentile(floor, 50)
        ratio = p50 / f50
        print(
            f"read_session 10 MB   p50 {p50:6.2f} ms  tail-read floor p50 {f50:6.2f} ms  "
            f"ratio {ratio:4.2f}x (target <= 2x: {'ok' if ratio <= 2 else 'MISSED'})  "
            f"cold first read {cold:6.0f} ms"
        )
        r50 = percentile(unmasked, 50)
        print(
            f"  of which the transcript read p50 {r50:6.2f} ms = {r50 / f50:4.2f}x the floor; "
            "the rest is masking the reply (the floor masks nothing)"
        )
    return 0


if __name__ == "__main__":
    main()
