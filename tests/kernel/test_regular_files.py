"""Only a regular file is read where someone else may have put the file."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from openbus.kernel.regular_files import open_regular, read_regular


def test_a_regular_file_is_read_whole_or_up_to_its_limit(tmp_path: Path) -> None:
    path = tmp_path / "status.json"
    path.write_bytes(b'{"sessionId": "s-1"}')
    assert read_regular(path) == b'{"sessionId": "s-1"}'
    assert read_regular(str(path), 5) == b'{"ses'
    fd, st = open_regular(path)
    os.close(fd)
    assert st.st_size == 20


def test_a_fifo_nobody_writes_is_refused_at_once_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "status.json"
    os.mkfifo(fifo)
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            read_regular(fifo)
        except OSError as exc:
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=30)  # a blocking open would still be waiting
    assert not reader.is_alive()
    assert [str(e) for e in outcome] == [f"[Errno 22] not a regular file: '{fifo}'"]


def test_a_link_to_a_device_is_refused(tmp_path: Path) -> None:
    link = tmp_path / "transcript.jsonl"
    link.symlink_to("/dev/zero")
    with pytest.raises(OSError, match="not a regular file"):
        read_regular(link)


def test_a_missing_file_is_an_os_error_like_any_other(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_regular(tmp_path / "none")
