"""The parse helper: a process that reads and parses transcripts for a reconcile
(``parallel``), and the wire between the two.

Wire, one JSON document a line each way. To the helper: first the Codex thread names by home
(``{home: {id: name}}``), then ``[unit, [[harness, path, home], ...]]``. From the helper: first
``"started"``, then ``[unit, [result, ...]]`` for each unit in the order given, a result
``["ok", session fields or null, key]``, ``["error", text]`` or ``["here"]``: a file for the
reconcile to read itself (OpenCode's, whose sessions are rows of its database; or one whose
session JSON cannot carry exactly: a lone surrogate, a number that is not finite), so every file
reads as it does in one process. The helper reads nothing but the files named, writes nothing
but its answers, and exits when its input ends. It reads its input as it comes, whatever it is
busy with, so the reconcile never waits to hand over a unit.

It imports as little as it can (not ``subprocess``, not the store, not the sources): its
start is most of what it costs.
"""

from __future__ import annotations

import math
import os
import sys
import threading
from collections.abc import Mapping
from dataclasses import fields
from queue import SimpleQueue
from typing import Any

import orjson

from openbus.daemon.history.files import FileKey, read_file
from openbus.daemon.history.model import OPENCODE, ParsedSession

# what one file gave: (session or None, its key), or the text of the error reading it
Result = tuple[ParsedSession | None, FileKey] | str

STARTED = b'"started"'  # the helper's first line
_FIELDS = tuple(f.name for f in fields(ParsedSession))
_TUPLE_AT = tuple(at for at, name in enumerate(_FIELDS) if name in ("branches", "prs", "prompts"))
_OK, _ERROR, _HERE = "ok", "error", "here"


# --------------------------------------------------------------------------- the reconcile's end


def result_in(wire: list[Any]) -> Result | None:
    """A result off the wire; None for a file to read here. ValueError, TypeError,
    IndexError: not a result."""
    kind = wire[0]
    if kind == _ERROR:
        return str(wire[1])
    if kind == _HERE:
        return None
    if kind != _OK:
        raise ValueError(f"no result kind {kind!r}")
    values, key = wire[1], wire[2]
    size, mtime_ns, inode = (int(k) for k in key)
    if values is None:
        return None, (size, mtime_ns, inode)
    for at in _TUPLE_AT:
        values[at] = tuple(map(str, values[at]))
    return ParsedSession(*values), (size, mtime_ns, inode)


# --------------------------------------------------------------------------- the helper's end


def _result_out(result: tuple[ParsedSession | None, FileKey]) -> list[Any]:
    parsed, key = result
    if parsed is None:
        return [_OK, None, list(key)]
    values = [getattr(parsed, name) for name in _FIELDS]
    for number in (parsed.started, parsed.last_active):
        if number is not None and not math.isfinite(number):
            return [_HERE]
    return [_OK, values, list(key)]


def _answer(unit: int, jobs: list[list[str]], names: Mapping[str, Mapping[str, str]]) -> bytes:
    results: list[list[Any]] = []
    for harness, path, root in jobs:
        if harness == OPENCODE:  # a row of OpenCode's database: read by the reconcile
            results.append([_HERE])
            continue
        try:
            results.append(_result_out(read_file(harness, path, names.get(root, {}))))
        except OSError as exc:
            results.append([_ERROR, str(exc)])
    try:
        return orjson.dumps([unit, results]) + b"\n"
    except orjson.JSONEncodeError:  # a lone surrogate somewhere: not JSON text
        return orjson.dumps([unit, [_encodable(r) for r in results]]) + b"\n"


def _encodable(result: list[Any]) -> list[Any]:
    try:
        orjson.dumps(result)
    except orjson.JSONEncodeError:
        return [_HERE]
    return result


def main() -> None:
    """Read every request as it comes, on a thread of its own, and answer them in turn: the
    reconcile never waits to hand a unit over while it has not read an answer (its writes
    and this process's would otherwise wait on each other, each pipe full)."""
    requests: SimpleQueue[bytes | None] = SimpleQueue()

    def read() -> None:
        for line in sys.stdin.buffer:
            requests.put(line)
        requests.put(None)

    threading.Thread(target=read, daemon=True).start()
    names = orjson.loads(requests.get() or b"{}")
    out = sys.stdout.buffer
    out.write(STARTED + b"\n")
    out.flush()
    while (line := requests.get()) is not None:
        unit, jobs = orjson.loads(line)
        out.write(_answer(unit, jobs, names))
        out.flush()
    os._exit(0)  # all is said: no teardown for the reconcile to wait out


if __name__ == "__main__":
    main()
